"""Routing eval suites as an asset on a daily schedule: the routing evals document's scheduled
run (08:00 UTC), with its report in the asset's metadata instead of a CI job summary.

The suite files (``data/suites/*.yaml`` by default) run through the model under test, a
judges-file entry bound as the ``model_under_test`` resource (the judges' own
:class:`~eval_pipeline.defs.pipeline.resources.LLMJudgeResource`: every field visible in the
launchpad, the key only through ``EnvVar``). In the UI's code location the entry comes from
``$EVAL_PIPELINE_MODEL_UNDER_TEST`` (``judges.yaml`` or ``judges.yaml#name``); without it the
asset is there but fails at once saying so, and the schedule skips its ticks.

Unpartitioned: a suite is a handful of cases, run whole, and its history is the asset's
materializations (one per day on the schedule), each with the report and the pass counts.
"""


import os
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
from pydantic import Field

from eval_pipeline.defs.pipeline.assets.metadata import preview
from eval_pipeline.defs.pipeline.resources import LLMJudgeResource, judge_resource
from eval_pipeline.judges.config import JudgeConfig, load_judges
from eval_pipeline.routing import TRAJECTORY_MODES, ArgumentMode, TrajectoryMode
from eval_pipeline.routing_suite import (
    NoModelUnderTest,
    SuiteRun,
    load_suite,
    mode_summary,
    model_under_test,
    pick_entry,
    render_reports,
    run_suite,
    suite_table,
)
from eval_pipeline.routing_suite.spec import SUITE_SUFFIXES
from eval_pipeline.versions import source_version

ROUTING_SUITE_GROUP = "routing_suites"
SUITES_ENV = "EVAL_PIPELINE_SUITES"
MODEL_UNDER_TEST_ENV = "EVAL_PIPELINE_MODEL_UNDER_TEST"
DEFAULT_SUITES_DIR = Path(__file__).resolve().parents[4] / "data" / "suites"
# The document's workflow runs daily at 08:00 UTC.
SUITE_CRON = "0 8 * * *"
NOT_CONFIGURED = (f"no model under test: set {MODEL_UNDER_TEST_ENV} to a judges file "
                  "(judges.yaml, or judges.yaml#name for one of its entries) before starting "
                  "the code location, or run `eval-pipeline suite FILE --judges judges.yaml "
                  "--model NAME`")


class RoutingSuiteSettings(dg.ConfigurableResource):
    """Which suite files run, and the routing modes they are read in (a suite's or a
    case's own modes win)."""

    suites: list[str] = Field(
        default_factory=lambda: [str(DEFAULT_SUITES_DIR)],
        description="Suite files, or folders whose *.yaml, *.yml and *.json files are "
        "suites (default: the project's data/suites)")
    routing_mode: str = Field(default="superset",
                              description="strict, unordered, subset or superset")
    argument_mode: str = Field(default="exact", description="exact, ignore, subset or superset")
    retry_base_s: float = Field(default=0.5, description="First backoff wait, doubled each try")

    def suite_files(self) -> list[Path]:
        files: list[Path] = []
        for entry in self.suites:
            path = Path(entry)
            if path.is_dir():
                files += sorted(p for p in path.iterdir() if p.suffix.lower() in SUITE_SUFFIXES)
            else:
                files.append(path)
        return files


def _modes(settings: RoutingSuiteSettings) -> tuple[TrajectoryMode, ArgumentMode]:
    if settings.routing_mode not in TRAJECTORY_MODES:
        raise dg.Failure(f"routing_mode {settings.routing_mode!r} is not one of "
                         f"{', '.join(TRAJECTORY_MODES)}")
    from eval_pipeline.routing import ARGUMENT_MODES

    if settings.argument_mode not in ARGUMENT_MODES:
        raise dg.Failure(f"argument_mode {settings.argument_mode!r} is not one of "
                         f"{', '.join(ARGUMENT_MODES)}")
    return settings.routing_mode, settings.argument_mode


async def _run(config: JudgeConfig, api_key: str | None, settings: RoutingSuiteSettings
               ) -> list[SuiteRun]:
    mode, argument_mode = _modes(settings)
    suites = [(load_suite(p), str(p)) for p in settings.suite_files()]
    if not suites:
        raise dg.Failure(f"no suite files in {', '.join(settings.suites)}")
    model = model_under_test(config, api_key)
    try:
        return [await run_suite(model, suite, suite_file=file, mode=mode,
                                argument_mode=argument_mode,
                                retry_base_s=settings.retry_base_s)
                for suite, file in suites]
    finally:
        await model.aclose()


@dg.asset(
    group_name=ROUTING_SUITE_GROUP,
    kinds={"pandas", "parquet"},
    code_version=source_version("eval_pipeline.routing", "eval_pipeline.routing_suite",
                                __name__),
    pool="judge_api",
)
async def routing_suite_results(context: dg.AssetExecutionContext,
                                routing_suites: RoutingSuiteSettings,
                                model_under_test: LLMJudgeResource) -> dg.Output[pd.DataFrame]:
    """Each routing eval suite run through the model under test: per case, did the model
    call the expected tools? One row per case with the verdict of every routing mode (or
    the error of a model call that failed, counted apart), and the recorded conversation;
    the document's PASS/FAIL report in the metadata."""
    if model_under_test.provider is None:
        raise dg.Failure(description=NOT_CONFIGURED)
    config = model_under_test.judge_config()
    try:
        runs = await _run(config, model_under_test.api_key, routing_suites)
    except (NoModelUnderTest, ValueError) as exc:  # SuiteFileError is a ValueError
        raise dg.Failure(description=str(exc)) from None
    table = suite_table(runs)
    for run in runs:
        context.log.info(f"{run.suite}: {run.passed}/{len(run.outcomes)} passed, "
                         f"{run.failed} failed, {run.errors} errors")
    return dg.Output(table, metadata=suite_metadata(runs, table))


def suite_metadata(runs: list[SuiteRun], table: pd.DataFrame) -> dict[str, Any]:
    """The report as the document prints it, and the numbers to chart over the days."""
    cases = len(table)
    passed = sum(r.passed for r in runs)
    judged = sum(len(r.outcomes) - r.errors for r in runs)
    report = render_reports(runs) + "\n\n" + "\n".join(
        f"{r.suite}: {mode_summary(r)}" for r in runs)
    first = runs[0] if runs else None
    return {
        "dagster/row_count": cases,
        "model_under_test": (f"{first.model_name} ({first.provider}, {first.model})"
                             if first else ""),
        "suites": len(runs),
        "cases": cases,
        "passed": passed,
        "failed": sum(r.failed for r in runs),
        "errors": sum(r.errors for r in runs),
        "pass_rate": dg.MetadataValue.float(round(passed / cases, 4)) if cases
        else dg.MetadataValue.null(),
        **{f"passed_{m}": sum(r.passed_in_mode(m) for r in runs) for m in TRAJECTORY_MODES},
        "judged": judged,
        "mean_partial_credit": dg.MetadataValue.float(round(float(
            table["partial_credit"].dropna().mean()), 4)) if judged
        else dg.MetadataValue.null(),
        "tokens_in": int(table["tokens_in"].sum()) if cases else 0,
        "tokens_out": int(table["tokens_out"].sum()) if cases else 0,
        "cost_usd": dg.MetadataValue.float(round(float(table["cost_usd"].fillna(0).sum()), 6)),
        "report": dg.MetadataValue.md(f"```\n{report}\n```"),
        "preview": preview(table, ["suite", "case", "status", "match_mode", "partial_credit",
                                   "expected_tools", "actual_tools", "reason", "error"]),
    }


routing_suite_job = dg.define_asset_job(
    "routing_suite_job", selection=dg.AssetSelection.assets(routing_suite_results),
    description="Run every routing eval suite through the model under test.")


def build_routing_suite_schedule(configured: bool = False) -> dg.ScheduleDefinition:
    """A fresh schedule per Definitions (a schedule object keeps state from its ticks).
    Stopped until turned on, as the batch schedule: each tick calls a (paid) model.
    ``configured``: a model under test is bound; the tick itself needs no resource, so the
    daemon evaluating it needs no key."""

    @dg.schedule(job=routing_suite_job, cron_schedule=SUITE_CRON, execution_timezone="UTC",
                 default_status=dg.DefaultScheduleStatus.STOPPED)
    def routing_suite_schedule(context: dg.ScheduleEvaluationContext
                               ) -> dg.RunRequest | dg.SkipReason:
        """Every day at 08:00 UTC, as the routing evals document's workflow: run the suites
        through the model under test (skipped while none is configured)."""
        if not configured:
            return dg.SkipReason(NOT_CONFIGURED)
        return dg.RunRequest(
            run_key=f"routing_suites:{context.scheduled_execution_time:%Y%m%d}")

    return routing_suite_schedule


def model_under_test_from_env() -> JudgeConfig | None:
    """``$EVAL_PIPELINE_MODEL_UNDER_TEST``: ``judges.yaml`` (its one LLM entry) or
    ``judges.yaml#name``; None when unset."""
    value = os.environ.get(MODEL_UNDER_TEST_ENV)
    if not value:
        return None
    path, _, name = value.partition("#")
    return pick_entry(load_judges(path), name or None)


def suites_from_env() -> list[str] | None:
    value = os.environ.get(SUITES_ENV)
    return [p for p in value.split(os.pathsep) if p] if value else None


def routing_suite_resources(config: JudgeConfig | None,
                            settings: RoutingSuiteSettings | None = None
                            ) -> dict[str, dg.ConfigurableResource]:
    """``model_under_test`` (the entry, key bound through EnvVar; an empty resource when
    none is configured) and ``routing_suites``."""
    model = (judge_resource(config) if config is not None
             else LLMJudgeResource(name="model_under_test"))
    return {"model_under_test": model, "routing_suites": settings or RoutingSuiteSettings()}
