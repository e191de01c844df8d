"""Category and trajectory assessments after the judges (issue #8 item 1): averaged over
judges per category, written into evaluation_metadata and the text, pooled in the report;
and each judge's spread across repeats in the report (item 11)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from eval_pipeline.exports.report_document import (
    assessments_section,
    render_html,
    render_markdown,
    report_sections,
    stability_section,
)
from eval_pipeline.report import build_report, report_markdown
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.scoring.assessments import (
    assessment_blocks,
    assessment_metadata,
    pooled_assessments,
)


def _row(tid: str, ci: int, kind: str, tool: str, scores: dict[str, float] | None,
         summary: str = "", error: str | None = None) -> dict[str, object]:
    return {"trajectory_id": tid, "clip_index": ci, "evaluation_kind": kind, "tool_type": tool,
            "status": "ok" if scores is not None else "failed",
            "scores": json.dumps(scores or {}), "summary": summary if scores else "",
            "reasoning": "r" if scores else "", "error": error, "label": None}


def _judge(rows: list[dict[str, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def two_judges() -> dict[str, pd.DataFrame]:
    """Trajectory t: a microsandbox clip, a deepsearch clip, the final clip; both judges
    assess both categories and the trajectory, except b's deepsearch assessment failed."""
    a = _judge([
        _row("t", 0, "clip_rubric", "microsandbox", {"code_correctness": 0.6}, "a0"),
        _row("t", 1, "clip_rubric", "deepsearch", {"synthesis_quality": 0.5}, "a1"),
        _row("t", 2, "clip_rubric", "final", {"task_completion": 1.0}, "a2"),
        _row("t", -1, "category_assessment", "microsandbox",
             {"tool_effectiveness": 0.8, "result_quality": 0.6}, "a-ms"),
        _row("t", -1, "category_assessment", "deepsearch",
             {"tool_effectiveness": 0.4, "result_quality": 0.2}, "a-ds"),
        _row("t", -1, "trajectory_assessment", "trajectory",
             {"task_completion": 1.0, "answer_quality": 0.5}, "a-traj"),
    ])
    b = _judge([
        _row("t", 0, "clip_rubric", "microsandbox", {"code_correctness": 0.8}, "b0"),
        _row("t", 1, "clip_rubric", "deepsearch", {"synthesis_quality": 0.7}, "b1"),
        _row("t", 2, "clip_rubric", "final", {"task_completion": 0.8}, "b2"),
        _row("t", -1, "category_assessment", "microsandbox",
             {"tool_effectiveness": 0.4, "result_quality": 1.0}, "b-ms"),
        _row("t", -1, "category_assessment", "deepsearch", None, error="HTTP 500"),
        _row("t", -1, "trajectory_assessment", "trajectory",
             {"task_completion": 0.6, "answer_quality": 0.7}, "b-traj"),
    ])
    return {"a": a, "b": b}


def test_each_category_is_averaged_on_its_own_over_the_judges_that_succeeded():
    averaged = average_judgments(two_judges())
    categories = averaged[averaged["evaluation_kind"] == "category_assessment"] \
        .set_index("tool_type")
    assert len(averaged) == 6 and len(categories) == 2  # not merged at clip_index -1
    ms = categories.loc["microsandbox"]
    assert json.loads(ms["scores"]) == pytest.approx(
        {"tool_effectiveness": 0.6, "result_quality": 0.8})
    assert ms["n_judges_succeeded"] == 2 and ms["spread"] == pytest.approx(0.4)
    assert ms["summary"] == "Combined evaluation: a-ms | b-ms"
    ds = categories.loc["deepsearch"]  # b failed: a's figures alone, never a zero
    assert json.loads(ds["scores"]) == {"tool_effectiveness": 0.4, "result_quality": 0.2}
    assert ds["n_judges_succeeded"] == 1 and json.loads(ds["errors"]) == ["b: HTTP 500"]
    whole = averaged[averaged["evaluation_kind"] == "trajectory_assessment"].iloc[0]
    assert json.loads(whole["scores"]) == pytest.approx(
        {"task_completion": 0.8, "answer_quality": 0.6})
    assert whole["label"] is None  # a rubric-shaped kind has no label


def test_metadata_blocks_follow_tool_averages_layout_and_failures_have_no_figure():
    averaged = average_judgments(two_judges())
    rows = averaged[averaged["evaluation_kind"].isin(
        ["category_assessment", "trajectory_assessment"])].to_dict("records")
    meta = assessment_metadata(rows, {"microsandbox": 1, "deepsearch": 1, "final": 1})
    assert list(meta) == ["category_assessments", "final_trajectory_assessment"]
    ms = meta["category_assessments"]["microsandbox"]
    assert list(ms)[:3] == ["average_scores", "overall_average", "clip_count"]
    assert ms["overall_average"] == pytest.approx(0.7) and ms["clip_count"] == 1
    assert ms["num_models"] == 2 and ms["status"] == "ok" and "errors" not in ms
    failed = [{**r, "status": "failed", "scores": "{}", "n_judges_succeeded": 0,
               "errors": json.dumps(["a: boom", "b: HTTP 500"])}
              for r in rows if r["tool_type"] == "deepsearch"]
    broken = assessment_metadata(failed, {"deepsearch": 1})["category_assessments"]
    assert broken["deepsearch"]["status"] == "failed"
    assert broken["deepsearch"]["average_scores"] == {}
    assert broken["deepsearch"]["overall_average"] is None
    assert broken["deepsearch"]["errors"] == ["a: boom", "b: HTTP 500"]
    final = meta["final_trajectory_assessment"]
    assert final["overall_average"] == pytest.approx(0.7) and final["num_models"] == 2


def test_blocks_are_escaped_and_name_their_category():
    rows = [{"evaluation_kind": "category_assessment", "tool_type": 'm"s', "status": "ok",
             "scores": json.dumps({"x": 0.5}), "summary": "</category_assessment><evil>",
             "reasoning": "a & b", "n_judges_succeeded": 2, "errors": "[]"},
            {"evaluation_kind": "trajectory_assessment", "tool_type": "trajectory",
             "status": "failed", "scores": "{}", "summary": "", "reasoning": "",
             "n_judges_succeeded": 0, "errors": json.dumps(["a: <boom>"])}]
    text = assessment_blocks(rows)
    assert '<category_assessment category="m&quot;s">' in text
    assert "&lt;/category_assessment&gt;&lt;evil&gt;" in text and "a &amp; b" in text
    assert text.count("</category_assessment>") == 1
    assert "<model_info>Averaged from 2 models</model_info>" in text
    assert "<final_trajectory_assessment>\n<error>No judge could make this assessment: " \
           "a: &lt;boom&gt;</error>" in text


def test_summaries_carry_the_blocks_the_score_and_the_text():
    response = "<think>a</think><microsandbox>x</microsandbox><result>1</result>" \
               "<think>b</think><deepsearch>q</deepsearch><result>2</result>" \
               "<answer>done</answer>"
    trajectories = pd.DataFrame([{"trajectory_id": "t", "batch": "b", "task_id": "x",
                                  "raw_response": response, "task_description": "d"}])
    clips = pd.DataFrame([{"trajectory_id": "t", "clip_index": i, "end": end}
                          for i, end in enumerate([62, 122, len(response)])])
    averaged = average_judgments(two_judges())
    row = summarize_trajectories(trajectories, clips, averaged, ["a", "b"]).iloc[0]
    meta = json.loads(row["evaluation_metadata"])
    assert list(meta)[-2:] == ["category_assessments", "final_trajectory_assessment"]
    assert list(meta["category_assessments"]) == ["microsandbox", "deepsearch"]
    assert meta["category_assessments"]["deepsearch"]["num_models"] == 1
    # the clip-rubric figures are untouched by the assessments
    assert meta["overall_trajectory_score"] == pytest.approx((0.7 + 0.6 + 0.9) / 3)
    assert row["trajectory_assessment_score"] == pytest.approx(0.7)
    full = row["full_response_with_evaluations"]
    assert full.startswith("<think>a</think>")
    tail = full.split("<answer>done</answer>")[1]
    assert tail.index('<category_assessment category="microsandbox">') \
        < tail.index('<category_assessment category="deepsearch">') \
        < tail.index("<final_trajectory_assessment>")


def _metadata(final: float | None, categories: dict[str, float | None]) -> str:
    meta: dict[str, object] = {"tool_averages": {}}
    if final is not None:
        meta["final_trajectory_assessment"] = {
            "average_scores": {"task_completion": final, "answer_quality": final / 2},
            "overall_average": final * 0.75}
    meta["category_assessments"] = {
        c: {"average_scores": {"tool_effectiveness": v} if v is not None else {},
            "overall_average": v} for c, v in categories.items()}
    return json.dumps(meta)


def test_pooled_figures_by_hand_and_nothing_assessed_is_no_figure():
    pooled = pooled_assessments([
        _metadata(0.8, {"microsandbox": 0.6, "deepsearch": 0.2}),
        _metadata(0.4, {"microsandbox": 1.0}),
        _metadata(None, {"deepsearch": None}),  # failed everywhere: counted nowhere
    ])
    assert pooled["trajectory_assessment_mean"] == pytest.approx((0.6 + 0.3) / 2)
    final = json.loads(pooled["trajectory_assessment_means"])
    assert final == pytest.approx({"task_completion": 0.6, "answer_quality": 0.3,
                                   "assessed": 2})
    categories = json.loads(pooled["category_assessment_means"])
    assert list(categories) == ["microsandbox", "deepsearch"]  # most assessed first
    assert categories["microsandbox"] == pytest.approx(
        {"tool_effectiveness": 0.8, "overall": 0.8, "assessed": 2})
    assert categories["deepsearch"]["assessed"] == 1
    none = pooled_assessments([json.dumps({"tool_averages": {}})])
    assert none["trajectory_assessment_mean"] is None
    assert json.loads(none["category_assessment_means"]) == {}


def _summary_frame(metas: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"overall_trajectory_score": [0.5] * len(metas),
                         "evaluation_metadata": metas, "total_clips": [2] * len(metas),
                         "successful_evaluations": [2] * len(metas),
                         "success": [True] * len(metas)})


def test_report_columns_and_sections_show_the_assessments():
    report = build_report({
        "b1": _summary_frame([_metadata(0.8, {"microsandbox": 0.6})]),
        "b2": _summary_frame([_metadata(0.4, {"microsandbox": 1.0, "deepsearch": 0.2})]),
    }).set_index("batch")
    assert report.loc["b1", "trajectory_assessment_mean"] == pytest.approx(0.6)
    assert report.loc["ALL", "trajectory_assessment_mean"] == pytest.approx(0.45)
    assert json.loads(report.loc["ALL", "category_assessment_means"])["microsandbox"][
        "overall"] == pytest.approx(0.8)
    text = report_markdown(report.reset_index(), None)
    assert "trajectory_assessment_mean" in text and "category_assessment_means" not in text

    section = assessments_section(report.reset_index())
    assert section is not None
    markdown = render_markdown([section])
    assert "| ALL | 2 | 0.450 | 0.600 | 0.300 |" in markdown
    assert "Category microsandbox: assessed in 2 trajectories (all batches), mean 0.800" \
        in markdown
    assert "| tool_effectiveness | 0.800 |" in markdown
    assert "Category deepsearch: assessed in 1 trajectories" in markdown
    assert "Category and trajectory assessments" in render_html([section], "r")
    # nothing assessed (e.g. assessments: false): no section, rather than an empty one
    plain = build_report({"b": _summary_frame([json.dumps({"tool_averages": {}})])})
    assert assessments_section(plain) is None
    assert all(s.title != "Category and trajectory assessments"
               for s in report_sections({"evaluation_report": plain}))


def test_report_gives_each_judges_mean_per_clip_spread_across_repeats():
    def table(stds: list[dict[str, float]], straddles: list[bool]) -> pd.DataFrame:
        return pd.DataFrame({
            "trajectory_id": "t", "clip_index": range(len(stds)),
            "evaluation_kind": "clip_rubric", "tool_type": "microsandbox", "status": "ok",
            "scores": json.dumps({"a": 0.5}), "summary": "", "reasoning": "",
            "repeats_ok": 3, "score_std": [json.dumps(s) for s in stds],
            "straddles": straddles})

    repeated = table([{"a": 0.1, "b": 0.3}, {"a": 0.0, "b": 0.0}, {}], [True, False, False])
    once = table([{}, {}], [False, False]).assign(repeats_ok=1)
    section = stability_section({"gpt": repeated, "heuristic": once})
    assert section is not None
    rows = section.blocks[1].rows  # type: ignore[union-attr]
    # gpt: rows with a measured spread: (0.1 + 0.3) / 2 = 0.2 and 0.0 -> mean 0.1;
    # a judge asking once has no spread to show
    assert rows == [["gpt", 3, 2, pytest.approx(0.1), 1]]
    assert stability_section({"heuristic": once}) is None
    old = once.drop(columns=["score_std", "repeats_ok", "straddles"])  # a pre-#8.11 folder
    assert stability_section({"x": old}) is None
