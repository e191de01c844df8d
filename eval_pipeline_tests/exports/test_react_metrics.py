"""#8.7: combined accuracy and the tool usage breakdown, per batch and overall, checked
against figures computed by hand, and printed as the ReAct framework prints them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from eval_pipeline.exports.react_metrics import react_metrics_text
from eval_pipeline.report import build_report
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline_tests.exports.helpers import run_tables


def _row(tid, ci, kind, label=None, status="ok"):
    positive = "optimal" if kind == "sequence_optimality" else "correct"
    return {"trajectory_id": tid, "clip_index": ci, "evaluation_kind": kind,
            "tool_type": "trajectory" if ci < 0 else "generic", "status": status,
            "scores": json.dumps({kind: float(label == positive)}) if status == "ok" else "{}",
            "label": label if status == "ok" else None, "summary": "", "reasoning": "r",
            "error": None if status == "ok" else "HTTP 500"}


def _tables():
    """Batch A, trajectory a: search, search, calc, final; batch B, trajectory b: calc, final.

    a: t2t correct / incorrect / correct; q2t correct / correct / failed
    b: t2t correct (judge 1) and incorrect (judge 2): a tie; q2t correct from both.
    """
    clips = pd.DataFrame(
        [{"trajectory_id": "a", "clip_index": i, "tool_type": t, "tool_name": n, "end": 0}
         for i, (t, n) in enumerate([("search_tool", "search"), ("search_tool", "search"),
                                     ("generic", "calc"), ("final", None)])]
        + [{"trajectory_id": "b", "clip_index": i, "tool_type": t, "tool_name": n, "end": 0}
           for i, (t, n) in enumerate([("generic", "calc"), ("final", None)])])
    one = pd.DataFrame([
        _row("a", 0, "thought_to_tool", "correct"), _row("a", 1, "thought_to_tool", "incorrect"),
        _row("a", 2, "thought_to_tool", "correct"), _row("a", 0, "query_to_thought", "correct"),
        _row("a", 1, "query_to_thought", "correct"),
        _row("a", 2, "query_to_thought", status="failed"),
        _row("a", -1, "sequence_optimality", "optimal"),
        _row("b", 0, "thought_to_tool", "correct"), _row("b", 0, "query_to_thought", "correct"),
    ])
    two = pd.DataFrame([_row("b", 0, "thought_to_tool", "incorrect"),
                        _row("b", 0, "query_to_thought", "correct")])
    judged_a = average_judgments({"j1": one[one["trajectory_id"] == "a"]})
    judged_b = average_judgments({"j1": one[one["trajectory_id"] == "b"], "j2": two})
    summaries = {}
    for batch, tid, averaged in (("A", "a", judged_a), ("B", "b", judged_b)):
        trajectories = pd.DataFrame([{"trajectory_id": tid, "batch": batch, "task_id": tid,
                                      "raw_response": ""}])
        summaries[batch] = summarize_trajectories(
            trajectories, clips[clips["trajectory_id"] == tid], averaged, ["x_y"])
    return summaries


def test_combined_accuracy_and_tool_usage_by_hand():
    report = build_report(_tables()).set_index("batch")
    # A: clips with both kinds scored: 0 (correct, correct) and 1 (incorrect, correct).
    assert report.loc["A", "combined_accuracy"] == pytest.approx(1 / 2)
    # B: thought-to-tool split 1:1, no majority: not "both correct".
    assert report.loc["B", "combined_accuracy"] == 0.0
    assert report.loc["ALL", "combined_accuracy"] == pytest.approx(1 / 3)
    usage_a = json.loads(report.loc["A", "tool_usage"])
    assert usage_a == {"search": {"calls": 2, "scored": 2, "share_correct": 0.5},
                       "calc": {"calls": 1, "scored": 1, "share_correct": 1.0}}
    usage_all = json.loads(report.loc["ALL", "tool_usage"])
    # calc: 1.0 in a, and the judges' agreement 0.5 in b.
    assert usage_all == {"calc": {"calls": 2, "scored": 2, "share_correct": 0.75},
                         "search": {"calls": 2, "scored": 2, "share_correct": 0.5}}
    # Tool shares weighted by the clips they judged give thought-to-tool accuracy back.
    for batch in ("A", "B", "ALL"):
        usage = json.loads(report.loc[batch, "tool_usage"]).values()
        pooled = sum(u["share_correct"] * u["scored"] for u in usage) / sum(
            u["scored"] for u in usage)
        assert pooled == pytest.approx(report.loc[batch, "thought_to_tool_accuracy"])


def test_printed_as_the_framework_prints_them():
    text = react_metrics_text(build_report(_tables()))
    blocks = text.strip().split("\n\n== ")
    assert [b.splitlines()[0].strip("= ") for b in blocks] == [
        "Batch A", "Batch B", "All batches"]
    overall = blocks[-1]
    assert "Query-to-Thought accuracy: 100.00%" in overall
    assert "Thought-to-Tool accuracy: 62.50%" in overall  # (1 + 0 + 1 + 0.5) / 4
    assert "Sequence Optimality accuracy: 100.00%" in overall
    assert "Combined accuracy (both correct): 33.33%" in overall
    assert "Tool Usage Breakdown:\n  calc: 2 uses (75.00% correct of 2 judged)\n" \
           "  search: 2 uses (50.00% correct of 2 judged)" in overall
    # Batch B had no sequence evaluation: said so, not 0%.
    assert "Sequence Optimality accuracy: n/a (not scored)" in blocks[1]


def test_heuristic_run_figures_agree_with_its_judgments(small_drop):
    """On real records with the heuristic judge: the report's combined accuracy is the
    share of clips whose two judgments are both 'correct', counted from the judgments."""
    tables = run_tables(small_drop)
    judged = tables["judgments__heuristic"]
    labels = {(r["trajectory_id"], r["clip_index"], r["evaluation_kind"]): r["label"]
              for r in judged.to_dict("records") if r["status"] == "ok"}
    both = [(t, c) for (t, c, k) in labels if k == "thought_to_tool"
            and (t, c, "query_to_thought") in labels]
    correct = sum(labels[(t, c, "thought_to_tool")] == labels[(t, c, "query_to_thought")]
                  == "correct" for t, c in both)
    report = tables["evaluation_report"].set_index("batch")
    assert both and report.loc["ALL", "combined_accuracy"] == pytest.approx(correct / len(both))
    clips = tables["clips"]
    calls = clips[clips["tool_type"] != "final"]["tool_name"].value_counts().to_dict()
    usage = json.loads(report.loc["ALL", "tool_usage"])
    assert {tool: u["calls"] for tool, u in usage.items()} == calls
