"""The routing eval-suite report end to end (#13.1): CLI flag, stored modes, the report in the
CLI output, in routing_report.txt and in the routing_checks asset's metadata."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.cli import main


@pytest.fixture(autouse=True)
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def _case(name: str, prompt: str, expected: list[str], *calls: str) -> dict[str, Any]:
    """The routing evals document's case, with what a model did, as a chat log."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    if calls:  # all in one assistant message: parallel calls
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": c, "arguments": "{}"}} for i, c in enumerate(calls)]})
        messages += [{"role": "tool", "tool_call_id": f"call_{i}", "content": "canned"}
                     for i in range(len(calls))]
    messages.append({"role": "assistant", "content": "Here is what I found."})
    return {"id": name, "expected_tools": expected, "messages": messages}


@pytest.mark.slow
def test_cli_prints_the_eval_suite_report_in_the_chosen_mode(tmp_path, capsys):
    cases = tmp_path / "suite.jsonl"
    rows = [
        _case("Knowledge base search", "What are people saying about Python type hints?",
              ["search_knowledge_base"], "search_knowledge_base"),
        _case("Live subreddit browse", "What's trending on r/python right now?",
              ["fetch_subreddit_posts"], "search_knowledge_base"),
        _case("Explicit seed request", "Please seed r/learnpython with 2 threads",
              ["seed_subreddit"]),
        _case("Specific thread fetch", "Can you fetch the Reddit thread with ID abc123?",
              ["fetch_reddit_thread"], "fetch_reddit_thread", "search_knowledge_base"),
    ]
    cases.write_text("\n".join(json.dumps(r) for r in rows) + "\n", "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(cases), "--output", str(out), "--routing-mode", "unordered",
                 "--argument-mode", "ignore"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^routing checks\s+1/4 passed$", printed, re.MULTILINE)
    report = (out / "routing_report.txt").read_text("utf-8")
    assert report.strip() in printed  # short suites are printed after the summary
    assert "Mode: unordered (arguments: ignore)" in report
    assert ("PASS  Knowledge base search\n"
            "  Prompt:    What are people saying about Python type hints?\n"
            "  Expected:  ['search_knowledge_base']\n"
            "  Actual:    ['search_knowledge_base']\n"
            "  Reason:    Correct tools called: ['search_knowledge_base']") in report
    assert "FAIL  Explicit seed request" in report and "Results: 1/4 passed" in report

    table = pd.read_parquet(out / "routing_checks.parquet").set_index("task_id")
    assert set(table["match_mode"]) == {"unordered"}
    fetch = table.loc["Specific thread fetch"]
    # The parallel extra call fails unordered but passes superset, both stored.
    assert not fetch["passed"] and fetch["superset_passed"] and not fetch["subset_passed"]
    assert json.loads(fetch["actual_groups"]) == [["fetch_reddit_thread",
                                                   "search_knowledge_base"]]
    assert fetch["partial_credit"] == 1.0
    assert table.loc["Live subreddit browse", "partial_credit"] == 0.0

    with dg.DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("routing_checks"))
    assert event is not None and event.asset_materialization is not None
    metadata = event.asset_materialization.metadata
    assert "Results: 1/4 passed" in metadata["report"].value
    assert metadata["passed_superset"].value == 2 and metadata["passed_unordered"].value == 1
    assert metadata["mode"].value == "unordered"
