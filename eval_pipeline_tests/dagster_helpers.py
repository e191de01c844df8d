"""Helpers for tests that run the real graph: a batch on disk and its partition registered."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.splitting import split_drop

PER_BATCH = dg.AssetSelection.all() - dg.AssetSelection.assets("evaluation_report",
                                                               "routing_suite_results")


def stage_drop(drop: Path, root: Path, instance: dg.DagsterInstance, split_size: int = 10
               ) -> tuple[list[str], dg.Definitions]:
    keys = [m.partition_key for m in split_drop(drop, root / "batches", split_size)]
    instance.add_dynamic_partitions(BATCHES_PARTITION, keys)
    return keys, build_definitions_for(root)


def build_definitions_for(root: Path, judges: list[JudgeConfig] | None = None,
                          **settings) -> dg.Definitions:
    return build_definitions(
        judges or [JudgeConfig(name="heuristic")],
        pipeline=PipelineSettings(incoming_dir=str(root / "incoming"),
                                  batches_dir=str(root / "batches"), **settings),
        assets_dir=str(root / "assets"),
    )
