"""Pipeline settings as a Dagster resource: folders, split size and preprocessing rules.

Defaults are relative to the working directory (the project root under ``dagster dev``);
the CLI and tests override them per run.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from eval_pipeline.ingest import ReadOptions
from eval_pipeline.preprocess import FilterMode, PreprocessConfig
from eval_pipeline.routing import RoutingMode


class PipelineSettings(dg.ConfigurableResource):
    incoming_dir: str = "data/incoming"
    batches_dir: str = "data/batches"
    split_size: int = 10
    beta_threshold: int = 15
    frequency_filter: FilterMode = "remove"
    duplicate_filter: FilterMode = "remove"
    repair_tags: bool = True
    input_format: str | None = None
    """Force one input format for every file instead of detecting it per file."""
    format_overrides: dict[str, str] = Field(default_factory=dict)
    """Per-file format: glob on the drop's name or path -> format name."""
    tools_file: str | None = None
    """A tools.yaml (tag/name -> tool type) replacing the packaged registry."""
    routing_mode: RoutingMode = "subset"
    """subset: every expected tool was called; exact: and no other tool."""

    @property
    def incoming_path(self) -> Path:
        return Path(self.incoming_dir)

    @property
    def batches_path(self) -> Path:
        return Path(self.batches_dir)

    def read_options(self) -> ReadOptions:
        return ReadOptions(input_format=self.input_format,
                           format_overrides=self.format_overrides, tools_file=self.tools_file)

    def preprocess_config(self) -> PreprocessConfig:
        return PreprocessConfig(
            beta_threshold=self.beta_threshold,
            frequency_filter=self.frequency_filter,
            duplicate_filter=self.duplicate_filter,
            repair_tags=self.repair_tags,
        )
