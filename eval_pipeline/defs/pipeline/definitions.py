"""The one place where the evaluation pipeline's definitions are assembled.

dg's loader finds :func:`pipeline` here (a folder with a ``definitions.py`` is loaded from it
alone), beside anything ``dg scaffold defs`` adds to ``eval_pipeline/defs/``; the CLI and the
tests call :func:`build_definitions` with their own judges and settings.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import dagster as dg

from eval_pipeline.defs.pipeline.assets import ingest, routing
from eval_pipeline.defs.pipeline.assets.agreement import build_agreement_assets
from eval_pipeline.defs.pipeline.assets.judging import (
    build_averaged_scores_asset,
    build_judgments_asset,
)
from eval_pipeline.defs.pipeline.assets.routing_suite import (
    RoutingSuiteSettings,
    build_routing_suite_schedule,
    model_under_test_from_env,
    routing_suite_job,
    routing_suite_resources,
    routing_suite_results,
    suites_from_env,
)
from eval_pipeline.defs.pipeline.assets.summaries import build_summary_assets
from eval_pipeline.defs.pipeline.automation import (
    batch_job,
    build_catch_up_sensor,
    new_drop_sensor,
    report_after_batch_sensor,
    report_job,
)
from eval_pipeline.defs.pipeline.batch_sensor import build_batch_results_sensors
from eval_pipeline.defs.pipeline.executor import executor_from_env
from eval_pipeline.defs.pipeline.io_manager import ParquetIOManager
from eval_pipeline.defs.pipeline.partitions import described
from eval_pipeline.defs.pipeline.phoenix import (
    build_phoenix_annotations_asset,
    build_phoenix_sensor,
)
from eval_pipeline.defs.pipeline.resources import (
    PhoenixResource,
    judge_resources,
    phoenix_resource_from_env,
)
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.defs.pipeline.table_cache import DEFAULT_BUDGET_MB
from eval_pipeline.judges.config import JudgeConfig, load_judges

JUDGES_FILE_ENV = "EVAL_PIPELINE_JUDGES"


def build_assets(judges: Sequence[JudgeConfig]) -> list[dg.AssetsDefinition]:
    return [
        ingest.raw_trajectories,
        ingest.preprocessed_trajectories,
        ingest.clips,
        routing.routing_checks,
        *described([build_judgments_asset(judges), build_averaged_scores_asset(judges),
                    *build_summary_assets(judges), build_agreement_assets(judges)]),
        routing_suite_results,
    ]


def build_definitions(
    judges: Sequence[JudgeConfig],
    *,
    pipeline: PipelineSettings | None = None,
    assets_dir: str | None = None,
    check_judges: bool = False,
    model_under_test: JudgeConfig | None = None,
    routing_suites: RoutingSuiteSettings | None = None,
    phoenix: PhoenixResource | None = None,
    executor: dg.ExecutorDefinition | None = None,
    table_cache_mb: int = DEFAULT_BUDGET_MB,
) -> dg.Definitions:
    """``check_judges``: each LLM judge resource checks its endpoint when set up (see
    ``LLMJudgeResource.check_endpoint``). ``model_under_test``: the judges-file entry the
    routing eval suites run through (none: ``routing_suite_results`` fails saying so).
    ``phoenix``: a Phoenix server to read traces from (``phoenix_sensor``) and write the
    evaluations back to (``phoenix_annotations``). ``executor``: how launched runs execute
    their steps (see :mod:`eval_pipeline.defs.pipeline.executor`); in-process runs ignore
    it. ``table_cache_mb``: how much of a run's tables the IO manager keeps in memory for the
    run's later steps (0: none; see :mod:`eval_pipeline.defs.pipeline.table_cache`)."""
    return dg.Definitions(
        executor=executor,
        assets=build_assets(judges) + phoenix_assets(judges, phoenix),
        jobs=[batch_job, report_job, routing_suite_job],
        sensors=[new_drop_sensor, report_after_batch_sensor, build_catch_up_sensor(),
                 *([build_phoenix_sensor()] if phoenix else []),
                 *build_batch_results_sensors(judges)],
        schedules=[build_routing_suite_schedule(model_under_test is not None)],
        resources={
            "io_manager": ParquetIOManager(base_path=assets_dir, cache_mb=table_cache_mb),
            "pipeline": pipeline or PipelineSettings(),
            **judge_resources(judges, check_endpoint=check_judges),
            **routing_suite_resources(model_under_test, routing_suites),
            **({"phoenix": phoenix} if phoenix else {}),
        },
    )


def phoenix_assets(judges: Sequence[JudgeConfig], phoenix: PhoenixResource | None
                   ) -> list[dg.AssetsDefinition]:
    """The write-back asset, only where a Phoenix server is configured: the file pipeline's
    graph stays as it was."""
    return [build_phoenix_annotations_asset(judges)] if phoenix else []


def location_definitions() -> dg.Definitions:
    """The UI's pipeline: judges from $EVAL_PIPELINE_JUDGES, else the heuristic judge; files
    in the instance's store (see :mod:`eval_pipeline.store`), as the CLI's; a Phoenix source
    and sink when ``EVAL_PIPELINE_PHOENIX_URL`` is set. Each LLM judge
    checks its endpoint when its step starts, so a run from the UI with a wrong base_url or
    key fails there in one line. Steps run with the executor $EVAL_PIPELINE_EXECUTOR
    names: multiprocess by default."""
    suites = suites_from_env()
    return build_definitions(load_judges(os.environ.get(JUDGES_FILE_ENV) or None),
                             check_judges=True, model_under_test=model_under_test_from_env(),
                             routing_suites=RoutingSuiteSettings(suites=suites) if suites
                             else None, phoenix=phoenix_resource_from_env(),
                             executor=executor_from_env())


@dg.definitions
def pipeline() -> dg.Definitions:
    return location_definitions()
