import json
import statistics

import pandas as pd
import pytest

from eval_pipeline.scoring import (
    average_judgments,
    embed_evaluations,
    evaluation_metadata,
    summarize_trajectories,
)


def _rows(judge_scores):
    """judge_scores: list of (clip_index, tool_type, scores or None for a failed row)."""
    return pd.DataFrame([
        {"trajectory_id": "t", "clip_index": ci, "evaluation_kind": "clip_rubric",
         "tool_type": tt, "status": "ok" if s is not None else "failed",
         "scores": json.dumps(s or {}), "summary": f"s{ci}" if s else "",
         "reasoning": "r" if s else "", "error": None if s else "HTTP 500"}
        for ci, tt, s in judge_scores
    ])


def test_failed_judges_are_left_out_of_the_mean_not_counted_as_zero():
    a = _rows([(0, "microsandbox", {"code_correctness": 0.8}), (1, "final", None)])
    b = _rows([(0, "microsandbox", {"code_correctness": 0.4}), (1, "final", None)])
    c = _rows([(0, "microsandbox", None), (1, "final", None)])
    avg = average_judgments({"a": a, "b": b, "c": c}).set_index("clip_index")
    assert json.loads(avg.loc[0, "scores"]) == {"code_correctness": pytest.approx(0.6)}
    assert avg.loc[0, "n_judges"] == 3 and avg.loc[0, "n_judges_succeeded"] == 2
    assert avg.loc[0, "spread"] == pytest.approx(0.4)
    assert avg.loc[0, "summary"] == "Combined evaluation: s0 | s0"
    # No judge succeeded: no scores at all, the errors kept.
    assert avg.loc[1, "status"] == "failed" and json.loads(avg.loc[1, "scores"]) == {}
    assert pd.isna(avg.loc[1, "mean_score"])
    assert len(json.loads(avg.loc[1, "errors"])) == 3


def test_overall_score_is_clip_count_weighted_mean_of_tool_averages():
    rows = [
        {"tool_type": "microsandbox", "status": "ok", "scores": json.dumps({"a": 1.0, "b": 0.5})},
        {"tool_type": "microsandbox", "status": "ok", "scores": json.dumps({"a": 0.0, "b": 0.5})},
        {"tool_type": "final", "status": "ok", "scores": json.dumps({"c": 0.9})},
        {"tool_type": "deepsearch", "status": "failed", "scores": "{}"},
    ]
    meta = evaluation_metadata(rows, ["heuristic_heuristic-v1"])
    ms = meta["tool_averages"]["microsandbox"]
    assert ms["average_scores"] == {"a": 0.5, "b": 0.5} and ms["clip_count"] == 2
    assert meta["overall_trajectory_score"] == pytest.approx((0.5 * 2 + 0.9 * 1) / 3)
    assert (meta["total_clips"], meta["successful_evaluations"]) == (4, 3)
    assert meta["success_rate"] == 0.75 and "deepsearch" not in meta["tool_averages"]
    nothing = evaluation_metadata([{"tool_type": "final", "status": "failed", "scores": "{}"}], [])
    assert nothing["overall_trajectory_score"] is None


def test_evaluations_are_embedded_right_after_each_clip():
    text = "AAA|BBB|"
    out = embed_evaluations(text, [(4, "<e1>"), (8, "<e2>")])
    assert out == "AAA|<e1>BBB|<e2>"


def test_summary_rows_carry_the_original_fields():
    trajectories = pd.DataFrame([{"trajectory_id": "t", "batch": "b", "task_id": "x",
                                  "raw_response": "<think>a</think><answer>b</answer>",
                                  "success": True, "task_description": "d"}])
    clips = pd.DataFrame([{"trajectory_id": "t", "clip_index": 0, "end": 34}])
    averaged = average_judgments({"h": _rows([(0, "final", {"task_completion": 1.0})])})
    table = summarize_trajectories(trajectories, clips, averaged, ["heuristic_heuristic-v1"])
    row = table.iloc[0]
    assert row["overall_trajectory_score"] == 1.0 and row["total_clips"] == 1
    assert row["full_response_with_evaluations"].startswith("<think>a</think><answer>b</answer>"
                                                            "\n<clip_evaluation>")
    assert '"task_completion": 1.0' in row["full_response_with_evaluations"]


def test_blocks_at_one_offset_come_out_last_given_first():
    text = "AAA|BBB|"
    out = embed_evaluations(text, [(4, "<a>"), (4, "<b>"), (0, "<c>"), (99, "<d>")])
    assert out == "<c>AAA|<b><a>BBB|<d>"


def test_three_judges_average_exactly_as_fmean_and_keep_their_order():
    judges = {name: _rows([(0, "microsandbox", {"m": value, "n": 1.0})])
              for name, value in (("z", 0.1), ("a", 0.2), ("m", 0.3))}
    row = average_judgments(judges).iloc[0]
    # fsum-exact (0.19999999999999998), not a naive float sum (0.20000000000000004)
    assert json.loads(row["scores"]) == {"m": statistics.fmean([0.1, 0.2, 0.3]), "n": 1.0}
    assert row["mean_score"] == statistics.fmean([statistics.fmean([0.1, 0.2, 0.3]), 1.0])
    assert json.loads(row["judges"]) == ["a", "m", "z"]
    assert row["summary"] == "Combined evaluation: s0 | s0 | s0"
    assert row["spread"] == pytest.approx(0.2)


def test_a_judge_table_without_a_summary_text_averages_with_the_others():
    """A missing text (NaN in a table read back without it, or written by an older
    version) is left out of the combined text, as an empty one is: it was a TypeError."""
    a = _rows([(0, "microsandbox", {"code_correctness": 0.8})])
    b = _rows([(0, "microsandbox", {"code_correctness": 0.4})])
    b["summary"] = float("nan")
    b["reasoning"] = None
    avg = average_judgments({"a": a, "b": b}).set_index("clip_index")
    assert avg.loc[0, "summary"] == "Combined evaluation: s0"
    assert avg.loc[0, "reasoning"] == "Combined evaluation: r"
    assert json.loads(avg.loc[0, "scores"]) == {"code_correctness": pytest.approx(0.6)}
