"""The routing_suite_results asset (#13.2): materialized against the fake servers with the
report and the pass counts in its metadata, its daily schedule, and its place apart from
the per-batch job."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.defs.pipeline.assets.routing_suite import (
    MODEL_UNDER_TEST_ENV,
    NOT_CONFIGURED,
    RoutingSuiteSettings,
    model_under_test_from_env,
    routing_suite_results,
)
from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.defs.pipeline.io_manager import ParquetIOManager
from eval_pipeline.defs.pipeline.resources import LLMJudgeResource, judge_resource
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer, status, text, tool_calls

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "suites" / "routing_evals.yaml"
KEY = "sk-test-ASSET-9f8e7d6c5b4a39281706"


@pytest.fixture(params=["openai", "anthropic"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeLLMServer]:
    fake = FakeLLMServer(request.param).start()
    yield fake
    fake.stop()


def model(server: FakeLLMServer) -> JudgeConfig:
    return JudgeConfig(name="mut", provider=server.kind, base_url=server.base_url,
                       api_key_env="SUITE_ASSET_KEY", concurrency=1, max_retries=0)


def test_materialize_writes_every_case_and_the_report_in_the_metadata(
        server, tmp_path, monkeypatch):
    monkeypatch.setenv("SUITE_ASSET_KEY", KEY)
    server.push(tool_calls("search_knowledge_base"), text("They like them."),   # pass
                tool_calls("search_knowledge_base"), text("Trending: ..."),     # wrong tool
                status(400, message="invalid request"),                         # error
                tool_calls("fetch_reddit_thread", "search_knowledge_base"),
                text("Here it is."))                                            # parallel
    result = dg.materialize(
        [routing_suite_results],
        resources={"io_manager": ParquetIOManager(base_path=str(tmp_path / "assets")),
                   "routing_suites": RoutingSuiteSettings(suites=[str(SAMPLE)]),
                   "model_under_test": judge_resource(model(server))})
    assert result.success
    (mat,) = result.asset_materializations_for_node("routing_suite_results")
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert (meta["cases"], meta["passed"], meta["failed"], meta["errors"]) == (4, 2, 1, 1)
    assert meta["pass_rate"] == 0.5
    assert (meta["passed_superset"], meta["passed_unordered"]) == (2, 1)
    assert meta["model_under_test"].startswith(f"mut ({server.kind}, ")
    report = meta["report"]
    assert "AGENT EVALUATION RESULTS" in report and "Results: 2/4 passed" in report
    assert "PASS  Knowledge base search" in report and "FAIL  Live subreddit browse" in report
    assert "ERROR  Explicit seed request" in report and "invalid request" in report
    assert "routing_evals: By mode: strict 1/3" in report
    table = pd.read_parquet(tmp_path / "assets" / "routing_suite_results.parquet")
    assert list(table["status"]) == ["pass", "fail", "error", "pass"]
    assert table["passed"].isna().tolist() == [False, False, True, False]
    # the key reaches neither the table nor the metadata
    assert KEY not in table.to_json() and KEY not in str(meta)


def test_without_a_model_the_asset_fails_saying_how_to_configure_one(tmp_path):
    result = dg.materialize(
        [routing_suite_results], raise_on_error=False,
        resources={"io_manager": ParquetIOManager(base_path=str(tmp_path)),
                   "routing_suites": RoutingSuiteSettings(suites=[str(SAMPLE)]),
                   "model_under_test": LLMJudgeResource(name="model_under_test")})
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert MODEL_UNDER_TEST_ENV in str(failure.step_failure_data.user_failure_data or
                                       failure.step_failure_data.error)


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance):
    schedule = defs.resolve_schedule_def("routing_suite_schedule")
    with dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 11, 22, 8,
                                                                 tzinfo=UTC)) as context:
        return schedule, schedule.evaluate_tick(context)


def test_the_daily_schedule_runs_the_suites_at_eight_and_skips_without_a_model(instance):
    configured = build_definitions([JudgeConfig(name="heuristic")],
                                   model_under_test=JudgeConfig(
                                       name="gpt", provider="openai",
                                       api_key_env="OPENAI_API_KEY"))
    schedule, tick = _tick(configured, instance)
    assert schedule.cron_schedule == "0 8 * * *" and schedule.execution_timezone == "UTC"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert [r.run_key for r in tick.run_requests] == ["routing_suites:20261122"]
    assert schedule.job_name == "routing_suite_job"
    job = configured.resolve_job_def("routing_suite_job")
    assert job.asset_layer.executable_asset_keys == {dg.AssetKey("routing_suite_results")}
    _, skipped = _tick(build_definitions([JudgeConfig(name="heuristic")]), instance)
    assert not skipped.run_requests and skipped.skip_message == NOT_CONFIGURED


def test_the_batch_job_leaves_the_suite_out_and_the_key_is_an_env_var(monkeypatch, tmp_path):
    defs = build_definitions([JudgeConfig(name="heuristic")])
    batch = defs.resolve_job_def("evaluate_batch").asset_layer.executable_asset_keys
    assert dg.AssetKey("routing_suite_results") not in batch
    assert dg.AssetKey("routing_checks") in batch
    judges = tmp_path / "judges.yaml"
    judges.write_text("judges:\n  - name: heuristic\n  - name: gpt\n    provider: openai\n"
                      "    api_key_env: MY_OPENAI_KEY\n  - name: claude\n"
                      "    provider: anthropic\n", "utf-8")
    monkeypatch.setenv(MODEL_UNDER_TEST_ENV, f"{judges}#gpt")
    config = model_under_test_from_env()
    assert config is not None and config.name == "gpt"
    resource = build_definitions([JudgeConfig(name="heuristic")],
                                 model_under_test=config).resources["model_under_test"]
    assert isinstance(resource.api_key, dg.EnvVar) and resource.api_key.env_var_name == \
        "MY_OPENAI_KEY"
    monkeypatch.setenv(MODEL_UNDER_TEST_ENV, str(judges))  # two LLM entries: name one
    with pytest.raises(ValueError, match="name one as the model under test"):
        model_under_test_from_env()
