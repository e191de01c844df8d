"""Pipeline settings as a Dagster resource: folders, split size and preprocessing rules.

The folders default to the instance's store (:mod:`eval_pipeline.store`), the same one the
CLI writes, so the UI can re-materialize what the CLI made; tests override them per run.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from eval_pipeline.agreement_report import DEFAULT_DISAGREEMENT_THRESHOLD
from eval_pipeline.ingest import ReadOptions
from eval_pipeline.preprocess import FilterMode, PreprocessConfig
from eval_pipeline.routing import ArgumentMode, TrajectoryMode
from eval_pipeline.store import resolve_store


class PipelineSettings(dg.ConfigurableResource):
    incoming_dir: str | None = None
    """Drops the sensor watches; default: the store's incoming/."""
    batches_dir: str | None = None
    """Batch files and manifests; default: the store's batches/."""
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
    disagreement_threshold: float = Field(default=DEFAULT_DISAGREEMENT_THRESHOLD, ge=0.0)
    """Judges whose scores for a clip differ by more than this (max - min, 0..1 scale)
    disagree: flagged in averaged_scores and listed in judge_disagreements."""
    routing_mode: TrajectoryMode = "superset"
    """Trajectory match mode, as LangChain agentevals: superset (every expected call was
    made; before #13 this was called subset), unordered (exactly the expected calls, any
    order), subset (no call beyond the expected ones), strict (the expected calls in order;
    one message's parallel calls in any order). A case's ``match_mode`` overrides it."""
    max_judge_failure_rate: float = Field(default=0.2, ge=0.0, le=1.0)
    """The judge_failure_rate check warns when more of a judge's attempted rows in a batch
    failed than this share."""
    max_judge_spread: float = Field(default=0.5, ge=0.0, le=1.0)
    """The judges_agree check warns when two judges' scores for one metric of a clip lie
    further apart than this."""
    routing_argument_mode: ArgumentMode = "exact"
    """Argument match mode, as agentevals: exact, ignore, subset (no argument beyond the
    expected ones), superset (every expected argument, extra ones allowed)."""

    @property
    def incoming_path(self) -> Path:
        return Path(self.incoming_dir) if self.incoming_dir else resolve_store().incoming

    @property
    def batches_path(self) -> Path:
        return Path(self.batches_dir) if self.batches_dir else resolve_store().batches

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
