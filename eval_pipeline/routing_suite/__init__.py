"""Routing eval suites: cases of prompt, tools and expected calls, run through a model.

The routing evals document's lightweight evals (send a prompt with the tool definitions to
the model, record which tools it called, compare with the expected ones, print PASS/FAIL
and ``Results: k/n passed``), with the suite as data (:mod:`.spec`), the model configured
as a judge is (:mod:`.model`), the calls checked by every routing mode (:mod:`.run`) and the
document's report (:mod:`.report`). Dagster's side is the ``routing_suite_results`` asset
(``eval_pipeline/defs/pipeline/assets/routing_suite.py``); the CLI's is ``eval-pipeline
suite`` (:mod:`.command`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.routing import ArgumentMode, TrajectoryMode
from eval_pipeline.routing_suite.protocol import (
    NoModelUnderTest,
    ToolCallingModel,
    pick_entry,
)
from eval_pipeline.routing_suite.report import mode_summary, render_reports, render_suite_report
from eval_pipeline.routing_suite.run import (
    CaseOutcome,
    SuiteRun,
    run_case,
    run_suite,
    runs_from_table,
    suite_table,
)
from eval_pipeline.routing_suite.spec import (
    RoutingSuite,
    SuiteCase,
    SuiteFileError,
    ToolDefinition,
    load_suite,
    parse_suite,
)

__all__ = [
    "CaseOutcome", "NoModelUnderTest", "RoutingSuite", "SuiteCase", "SuiteFileError",
    "SuiteRun", "ToolCallingModel", "ToolDefinition", "load_suite", "mode_summary",
    "model_under_test", "parse_suite", "pick_entry", "render_reports",
    "render_suite_report", "run_case", "run_suite", "run_suite_files", "runs_from_table",
    "suite_table",
]


def model_under_test(config: JudgeConfig, api_key: str | None) -> ToolCallingModel:
    """The SDK model for a judges-file entry (:func:`.model.model_under_test`), imported
    only when a suite runs: the SDKs take seconds to import."""
    from eval_pipeline.routing_suite.model import model_under_test as build

    return build(config, api_key)


async def _run_all(config: JudgeConfig, api_key: str | None,
                   suites: list[tuple[RoutingSuite, str]], mode: TrajectoryMode,
                   argument_mode: ArgumentMode, retry_base_s: float) -> list[SuiteRun]:
    model = model_under_test(config, api_key)
    try:
        return [await run_suite(model, suite, suite_file=file, mode=mode,
                                argument_mode=argument_mode, retry_base_s=retry_base_s)
                for suite, file in suites]
    finally:
        await model.aclose()


def run_suite_files(paths: list[Path], config: JudgeConfig, api_key: str | None, *,
                    mode: TrajectoryMode = "superset", argument_mode: ArgumentMode = "exact",
                    retry_base_s: float = 0.5) -> list[SuiteRun]:
    """Every suite file through one model, in order (each suite's cases concurrently up to
    the entry's ``concurrency``). All files are read and checked before the first call."""
    suites = [(load_suite(p), str(p)) for p in paths]
    return asyncio.run(_run_all(config, api_key, suites, mode, argument_mode, retry_base_s))
