"""The one place where the code location is assembled.

``dagster dev -w workspace.yaml`` and ``dg dev`` load :func:`defs`; the CLI and the tests
call :func:`build_definitions` with their own judges and settings.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import dagster as dg

from eval_pipeline.assets.ingest import clips, preprocessed_trajectories, raw_trajectories
from eval_pipeline.assets.judging import build_averaged_scores_asset, build_judgments_asset
from eval_pipeline.assets.routing import routing_checks
from eval_pipeline.assets.summaries import build_summary_assets
from eval_pipeline.automation import (
    batch_job,
    build_daily_schedule,
    new_drop_sensor,
    report_after_batch_sensor,
    report_job,
)
from eval_pipeline.io_manager import ParquetIOManager
from eval_pipeline.judges.config import JudgeConfig, load_judges
from eval_pipeline.resources import judge_resources
from eval_pipeline.settings import PipelineSettings

JUDGES_FILE_ENV = "EVAL_PIPELINE_JUDGES"


def build_assets(judges: Sequence[JudgeConfig]) -> list[dg.AssetsDefinition]:
    return [
        raw_trajectories,
        preprocessed_trajectories,
        clips,
        routing_checks,
        build_judgments_asset(judges),
        build_averaged_scores_asset(judges),
        *build_summary_assets(judges),
    ]


def build_definitions(
    judges: Sequence[JudgeConfig],
    *,
    pipeline: PipelineSettings | None = None,
    assets_dir: str | None = None,
) -> dg.Definitions:
    return dg.Definitions(
        assets=build_assets(judges),
        jobs=[batch_job, report_job],
        sensors=[new_drop_sensor, report_after_batch_sensor],
        schedules=[build_daily_schedule()],
        resources={
            "io_manager": ParquetIOManager(base_path=assets_dir),
            "pipeline": pipeline or PipelineSettings(),
            **judge_resources(judges),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The UI's code location: judges from $EVAL_PIPELINE_JUDGES, else the heuristic judge;
    files in the instance's store (see :mod:`eval_pipeline.store`), as the CLI's."""
    return build_definitions(load_judges(os.environ.get(JUDGES_FILE_ENV) or None))
