"""``eval-pipeline suite`` (#13.2): the report in the CLI output, the exit codes, the files
``--output`` writes, and the refusals that stop it before any call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline.ingest import read_batch
from eval_pipeline.routing import routing_table
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer, status, text, tool_calls

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "suites" / "routing_evals.yaml"
KEY = "sk-test-CLI-0f1e2d3c4b5a69788796"


@pytest.fixture(autouse=True)
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("SUITE_CLI_KEY", KEY)
    return home


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    fake = FakeLLMServer("openai").start()
    yield fake
    fake.stop()


def judges_file(tmp_path: Path, server: FakeLLMServer) -> Path:
    path = tmp_path / "judges.yaml"
    path.write_text(
        "judges:\n  - name: heuristic\n"
        f"  - name: gpt\n    provider: openai\n    base_url: {server.base_url}\n"
        "    api_key_env: SUITE_CLI_KEY\n    concurrency: 1\n    max_retries: 0\n", "utf-8")
    return path


def right_answers(server: FakeLLMServer) -> None:
    for tool in ("search_knowledge_base", "fetch_subreddit_posts", "seed_subreddit",
                 "fetch_reddit_thread"):
        server.push(tool_calls(tool), text("Done."))


@pytest.mark.slow
def test_all_pass_prints_the_report_and_exits_0_and_the_run_is_in_the_instance(
        tmp_path, server, capsys, dagster_home):
    right_answers(server)
    out = tmp_path / "out"
    assert main(["suite", str(SAMPLE), "--judges", str(judges_file(tmp_path, server)),
                 "--model", "gpt", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "AGENT EVALUATION RESULTS" in printed and "Results: 4/4 passed" in printed
    assert "PASS  Explicit seed request" in printed
    assert "routing_evals: By mode: strict 4/4, unordered 4/4, subset 4/4, superset 4/4" \
        in printed
    report = (out / "routing_suite_report.txt").read_text("utf-8")
    assert report.strip() in printed
    table = pd.read_parquet(out / "routing_suite_results.parquet")
    assert list(table["status"]) == ["pass"] * 4
    # the recorded conversations read back as chat records with their case: the same calls
    records = [json.loads(line) for line in
               (out / "suite_trajectories.jsonl").read_text("utf-8").splitlines()]
    assert [r["id"] for r in records] == list(table["case"])
    raw, quarantined = read_batch(out / "suite_trajectories.jsonl", None, "b")
    assert len(quarantined) == 0 and set(raw["source_format"]) == {"chat"}
    _, checked = routing_table(raw)  # the pipeline's routing checks agree with the suite
    assert [(r.task_id, r.actual_tools, r.passed) for r in checked] == [
        (case, [tool], True) for case, tool in zip(table["case"], (
            "search_knowledge_base", "fetch_subreddit_posts", "seed_subreddit",
            "fetch_reddit_thread"), strict=True)]
    # the CLI's run is a materialization in the instance, with the report as metadata
    with dg.DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(
            dg.AssetKey("routing_suite_results"))
    assert event is not None
    metadata = event.asset_materialization.metadata  # type: ignore[union-attr]
    assert metadata["passed"].value == 4 and "Results: 4/4 passed" in metadata["report"].value


@pytest.mark.slow
def test_a_failed_case_exits_4_and_errors_alone_exit_3(tmp_path, server, capsys):
    judges = judges_file(tmp_path, server)
    server.push(tool_calls("search_knowledge_base"), text("ok"),
                tool_calls("search_knowledge_base"), text("ok"),   # wrong tool: FAIL
                status(500), tool_calls("fetch_reddit_thread"), text("ok"))
    assert main(["suite", str(SAMPLE), "--judges", str(judges)]) == 4
    captured = capsys.readouterr()
    assert "FAIL  Live subreddit browse" in captured.out
    assert "ERROR  Explicit seed request" in captured.out
    assert "1 of 4 cases failed" in captured.err
    server.push(tool_calls("search_knowledge_base"), text("ok"),
                tool_calls("fetch_subreddit_posts"), text("ok"),
                status(503),  # the seed case's call fails; no case FAILs
                tool_calls("fetch_reddit_thread"), text("ok"))
    assert main(["suite", str(SAMPLE), "--judges", str(judges)]) == 3
    captured = capsys.readouterr()
    assert "Results: 3/4 passed" in captured.out and "Errors: 1" in captured.out
    assert KEY not in captured.out + captured.err


def test_refusals_before_any_call(tmp_path, capsys):
    heuristic = tmp_path / "heuristic.yaml"
    heuristic.write_text("judges:\n  - name: heuristic\n", "utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools: [{name: a}]\ncases: [{name: x, prompt: p, expected_tools: [b]}]\n",
                   "utf-8")
    assert main(["suite", str(SAMPLE)]) == 1
    assert "needs a model under test" in capsys.readouterr().err
    assert main(["suite", str(SAMPLE), "--judges", str(heuristic)]) == 1
    assert "has no LLM entry" in capsys.readouterr().err
    assert main(["suite", str(SAMPLE), "--provider", "heuristic"]) == 1
    assert "calls no tools" in capsys.readouterr().err
    assert main(["suite", str(bad), "--provider", "openai", "--base-url",
                 "http://127.0.0.1:9/v1", "--api-key-env", "SUITE_CLI_KEY"]) == 1
    assert "case 'x': expects ['b'], which the model is never offered" in \
        capsys.readouterr().err
    assert main(["suite", str(tmp_path / "missing.yaml"), "--provider", "openai"]) == 1
    assert "suite file not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["suite", str(SAMPLE), "--routing-mode", "loose"])
    assert usage.value.code == 2
