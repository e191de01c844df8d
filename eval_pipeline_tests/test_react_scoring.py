"""ReAct evaluations downstream of the judges: averaging, summaries, report, CLI, versions."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from pydantic import ValidationError

from eval_pipeline.cli import main
from eval_pipeline.judges.config import JudgeConfig, load_judges
from eval_pipeline.report import build_report
from eval_pipeline.scoring import average_judgments, react_label_text, summarize_trajectories

RUBRIC = {"task_completion": 0.8, "response_quality": 0.6}


def row(kind: str, clip_index: int, *, scores: dict | None = None, label: str | None = None,
        status: str = "ok", tid: str = "t0", tool_type: str = "generic",
        error: str | None = None) -> dict:
    return {"trajectory_id": tid, "clip_index": clip_index, "evaluation_kind": kind,
            "tool_type": tool_type, "status": status,
            "scores": json.dumps(scores) if status == "ok" else "{}",
            "label": label if status == "ok" else None,
            "summary": f"{kind} {clip_index}" if status == "ok" else "",
            "reasoning": "because" if status == "ok" else "", "error": error}


def t2t(clip_index: int, label: str, **kw) -> dict:
    return row("thought_to_tool", clip_index, label=label,
               scores={"thought_to_tool": float(label == "correct")}, **kw)


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def test_react_rows_average_to_agreement_with_the_majority_label():
    judged = {
        "a": frame(t2t(0, "correct")),
        "b": frame(t2t(0, "correct")),
        "c": frame(t2t(0, "incorrect")),
        "d": frame(row("thought_to_tool", 0, status="failed", error="HTTP 500")),
    }
    (avg,) = average_judgments(judged).to_dict("records")
    assert avg["n_judges"] == 4 and avg["n_judges_succeeded"] == 3
    # the failed judge is not a 0: 2 of the 3 judges that answered said "correct"
    assert json.loads(avg["scores"]) == {"thought_to_tool": pytest.approx(2 / 3)}
    assert avg["label"] == "correct"
    assert json.loads(avg["label_counts"]) == {"correct": 2, "incorrect": 1}
    assert react_label_text(avg) == "correct (2 of 3 judges)"

    tie = average_judgments({"a": frame(t2t(0, "correct")), "b": frame(t2t(0, "incorrect"))})
    tie_row = tie.to_dict("records")[0]
    assert tie_row["label"] is None and json.loads(tie_row["scores"]) == {"thought_to_tool": 0.5}
    assert react_label_text(tie_row) == "split (correct 1, incorrect 1)"

    none = average_judgments({"a": frame(row("thought_to_tool", 0, status="failed",
                                             error="boom"))}).to_dict("records")[0]
    assert none["status"] == "failed" and json.loads(none["scores"]) == {}
    assert none["mean_score"] is None and react_label_text(none) == "not scored"


def _trajectory_tables():
    raw = "<think>a</think><search>q</search><result>r</result>" \
          "<think>b</think><search>q2</search><result>r2</result><answer>x</answer>"
    trajectories = pd.DataFrame([{"trajectory_id": "t0", "batch": "b", "task_id": "1",
                                  "raw_response": raw, "success": True}])
    ends = [raw.index("</result>") + 9, raw.rindex("</result>") + 9, len(raw)]
    clips = pd.DataFrame({"trajectory_id": ["t0"] * 3, "clip_index": [0, 1, 2],
                          "end": ends})
    rubric = [row("clip_rubric", 0, scores={"parameter_quality": 0.5}),
              row("clip_rubric", 1, scores={"parameter_quality": 0.7}),
              row("clip_rubric", 2, scores=RUBRIC, tool_type="final")]
    react = [t2t(0, "correct"), t2t(1, "incorrect"),
             row("query_to_thought", 0, status="failed", error="HTTP 400"),
             row("sequence_optimality", -1, scores={"sequence_optimality": 1.0},
                 label="optimal", tool_type="trajectory")]
    return trajectories, clips, rubric, react


def test_summaries_carry_react_accuracies_without_touching_the_original_figures():
    trajectories, clips, rubric, react = _trajectory_tables()
    plain = summarize_trajectories(trajectories, clips,
                                   average_judgments({"h": frame(*rubric)}), ["h"])
    full = summarize_trajectories(trajectories, clips,
                                  average_judgments({"h": frame(*rubric, *react)}), ["h"])
    p, f = plain.iloc[0], full.iloc[0]

    assert f["thought_to_tool_accuracy"] == pytest.approx(0.5)  # mean of 1 and 0
    assert f["query_to_thought_accuracy"] is None  # its only clip failed: no figure, not 0
    assert f["sequence_optimality"] == 1.0
    # the clip-rubric figures are exactly what they were without the ReAct rows
    assert f["overall_trajectory_score"] == p["overall_trajectory_score"]
    meta, plain_meta = json.loads(f["evaluation_metadata"]), json.loads(p["evaluation_metadata"])
    react_block = meta.pop("react_evaluations")
    assert meta == plain_meta and "react_evaluations" not in plain_meta
    assert react_block == {
        "thought_to_tool": {"accuracy": 0.5, "scored": 2, "total": 2,
                            "labels": {"correct": 1, "incorrect": 1}},
        "query_to_thought": {"accuracy": None, "scored": 0, "total": 1, "labels": {}},
        "sequence_optimality": {"score": 1.0, "label": "optimal", "scored": True},
        # #8.7: query-to-thought failed on the one clip that has it: nothing to combine.
        "combined": {"correct": 0, "scored": 0, "accuracy": None},
        "tool_usage": {},  # this test's clips table has no tool types
    }
    assert pd.isna(p["thought_to_tool_accuracy"]) and pd.isna(p["sequence_optimality"])

    text = f["full_response_with_evaluations"]
    assert text.count("<clip_evaluation>") == 3
    assert ("<react_checks>thought_to_tool: correct; query_to_thought: not scored"
            "</react_checks>\n</clip_evaluation>") in text
    assert "<react_checks>thought_to_tool: incorrect</react_checks>" in text
    assert text.rstrip().endswith("</trajectory_evaluation>")
    assert "<sequence_optimality>optimal</sequence_optimality>" in text
    assert "<react_checks>" not in p["full_response_with_evaluations"]
    assert "<trajectory_evaluation>" not in p["full_response_with_evaluations"]
    # removing the ReAct additions gives back the original tool's text exactly
    stripped = text.split("\n<trajectory_evaluation>")[0]
    for line in ("<react_checks>thought_to_tool: correct; query_to_thought: not scored"
                 "</react_checks>\n", "<react_checks>thought_to_tool: incorrect</react_checks>\n"):
        stripped = stripped.replace(line, "")
    assert stripped == p["full_response_with_evaluations"]


def _summary(accuracies: list[tuple[float | None, int]], seq: float | None) -> dict:
    react = {"thought_to_tool": {"accuracy": accuracies[0][0], "scored": accuracies[0][1]},
             "query_to_thought": {"accuracy": accuracies[1][0], "scored": accuracies[1][1]},
             "sequence_optimality": {"score": seq}}
    meta = {"tool_averages": {}, "react_evaluations": react}
    return {"overall_trajectory_score": 0.5, "total_clips": 2, "successful_evaluations": 2,
            "success": True, "evaluation_metadata": json.dumps(meta)}


def test_report_pools_the_seed_accuracies_per_batch_and_overall():
    a = pd.DataFrame([_summary([(1.0, 1), (0.0, 1)], 1.0),
                      _summary([(0.5, 2), (None, 0)], 0.0)])
    b = pd.DataFrame([_summary([(0.0, 1), (1.0, 3)], None)])
    plain = pd.DataFrame([{**_summary([(None, 0), (None, 0)], None),
                           "evaluation_metadata": json.dumps({"tool_averages": {}})}])
    report = build_report({"a": a, "b": b, "c": plain}).set_index("batch")
    # pooled over scored clips, the seed's "share of tool selections that match"
    assert report.loc["a", "thought_to_tool_accuracy"] == pytest.approx(2 / 3)
    assert report.loc["a", "query_to_thought_accuracy"] == pytest.approx(0.0)
    assert report.loc["a", "sequence_optimality_accuracy"] == pytest.approx(0.5)
    assert report.loc["b", "query_to_thought_accuracy"] == pytest.approx(1.0)
    assert pd.isna(report.loc["b", "sequence_optimality_accuracy"])
    assert pd.isna(report.loc["c", "thought_to_tool_accuracy"])  # never evaluated: no 0
    assert report.loc["ALL", "thought_to_tool_accuracy"] == pytest.approx(2 / 4)
    assert report.loc["ALL", "query_to_thought_accuracy"] == pytest.approx(3 / 4)
    assert report.loc["ALL", "sequence_optimality_accuracy"] == pytest.approx(0.5)


def test_evaluations_config_is_validated_and_versions_the_judge_asset(tmp_path):
    from eval_pipeline.defs.pipeline.assets.judging import judge_code_version

    assert JudgeConfig(name="h").evaluations == [
        "clip_rubric", "thought_to_tool", "query_to_thought", "sequence_optimality",
        "category_assessment", "trajectory_assessment"]
    for bad in (["clip_rubric", "vibes"], [], ["clip_rubric", "clip_rubric"]):
        with pytest.raises(ValidationError):
            JudgeConfig(name="h", evaluations=bad)
    narrow = JudgeConfig(name="h", evaluations=["clip_rubric"])
    assert judge_code_version(narrow) != judge_code_version(JudgeConfig(name="h"))
    assert judge_code_version(JudgeConfig(
        name="h", evaluations=["sequence_optimality", "clip_rubric"])) == judge_code_version(
        JudgeConfig(name="h", evaluations=["clip_rubric", "sequence_optimality"]))
    path = tmp_path / "judges.yaml"
    path.write_text("judges:\n  - name: h\n    provider: heuristic\n"
                    "    evaluations: [clip_rubric, query_to_thought]\n", "utf-8")
    assert load_judges(path)[0].evaluations == ["clip_rubric", "query_to_thought"]


# -- the whole graph via the CLI --------------------------------------------------------

@pytest.fixture
def dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.mark.slow
def test_cli_on_the_sample_data_reports_the_react_accuracies(project_root, tmp_path, capsys,
                                                             dagster_home):
    out = tmp_path / "out"
    assert main(["run", str(project_root / "data"), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    judged = pd.read_parquet(out / "judgments__heuristic.parquet")
    clips = pd.read_parquet(out / "clips.parquet")
    assert judged["evaluation_kind"].value_counts().to_dict() == {
        "clip_rubric": 63, "thought_to_tool": 36, "query_to_thought": 33,
        "sequence_optimality": 27, "category_assessment": 32, "trajectory_assessment": 27}
    assert len(clips) == 63 and int((clips["tool_type"] != "final").sum()) == 36

    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    for column in ("thought_to_tool_accuracy", "query_to_thought_accuracy",
                   "sequence_optimality"):
        assert summaries[column].notna().any(), column
    assert summaries["sequence_optimality"].notna().all()  # one per trajectory
    report = pd.read_parquet(out / "evaluation_report.parquet").set_index("batch")
    react = judged[judged["evaluation_kind"] != "clip_rubric"]
    for kind, column in (("thought_to_tool", "thought_to_tool_accuracy"),
                         ("query_to_thought", "query_to_thought_accuracy"),
                         ("sequence_optimality", "sequence_optimality_accuracy")):
        values = [json.loads(s)[kind] for s in react[react["evaluation_kind"] == kind]["scores"]]
        # one judge: the seed's accuracy is the share of positive labels
        assert report.loc["ALL", column] == pytest.approx(sum(values) / len(values))
        assert sum(values) == (react[react["evaluation_kind"] == kind]["label"].isin(
            ["correct", "optimal"])).sum()
    assert report.loc["ALL", "thought_to_tool_accuracy"] == pytest.approx(31 / 36)
    assert "thought-to-tool accuracy" in printed and "0.861" in printed
    # the original tool's figures are those of the clip rubric alone
    assert report.loc["ALL", "mean_overall_score"] == pytest.approx(
        summaries["overall_trajectory_score"].mean())

    first = json.loads((out / "evaluated.jsonl").read_text("utf-8").splitlines()[0])
    # the original's files' key order (num_clips beside total_clips), then ours
    assert list(first["evaluation_metadata"]) == [
        "num_clips", "num_models", "model_names", "total_clips", "successful_evaluations",
        "success_rate", "overall_trajectory_score", "tool_averages", "react_evaluations",
        "category_assessments", "final_trajectory_assessment"]
    assert "<react_checks>thought_to_tool: " in first["full_response_with_evaluations"]
    assert "<trajectory_evaluation>" in first["full_response_with_evaluations"]


@pytest.mark.slow
def test_judges_file_narrowed_to_the_rubric_gives_no_react_rows(project_root, tmp_path,
                                                                 dagster_home):
    judges = tmp_path / "judges.yaml"
    judges.write_text("judges:\n  - name: heuristic\n    provider: heuristic\n"
                      "    evaluations: [clip_rubric]\n", "utf-8")
    out = tmp_path / "out"
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    assert main(["run", str(drop), "--output", str(out), "--judges", str(judges)]) == 0
    judged = pd.read_parquet(out / "judgments__heuristic.parquet")
    assert set(judged["evaluation_kind"]) == {"clip_rubric"}
    assert len(judged) == len(pd.read_parquet(out / "clips.parquet"))
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    assert summaries[["thought_to_tool_accuracy", "query_to_thought_accuracy",
                      "sequence_optimality"]].isna().all().all()
    report = pd.read_parquet(out / "evaluation_report.parquet")
    assert report["thought_to_tool_accuracy"].isna().all()
    for line in (out / "evaluated.jsonl").read_text("utf-8").splitlines():
        record = json.loads(line)
        assert "react_evaluations" not in record["evaluation_metadata"]
        assert "<react_checks>" not in record["full_response_with_evaluations"]
        assert "<trajectory_evaluation>" not in record["full_response_with_evaluations"]


def test_react_checks_appear_when_the_rubric_failed_or_was_not_asked():
    trajectories, clips, rubric, react = _trajectory_tables()
    failed_rubric = [row("clip_rubric", 0, status="failed", error="HTTP 500"), *rubric[1:]]
    text = summarize_trajectories(trajectories, clips, average_judgments(
        {"h": frame(*failed_rubric, *react)}), ["h"]).iloc[0]["full_response_with_evaluations"]
    assert ("<error>No judge could score this clip: h: HTTP 500</error>\n<react_checks>"
            "thought_to_tool: correct; query_to_thought: not scored</react_checks>\n"
            "</clip_evaluation>") in text

    # a judges file narrowed to the ReAct kinds: the clip blocks hold only the checks
    only_react = summarize_trajectories(trajectories, clips, average_judgments(
        {"h": frame(*react)}), ["h"]).iloc[0]
    text = only_react["full_response_with_evaluations"]
    assert text.count("<clip_evaluation>") == 2 and "<scores>" not in text
    assert "<clip_evaluation>\n<react_checks>thought_to_tool: incorrect</react_checks>\n" \
           "</clip_evaluation>" in text
    assert only_react["overall_trajectory_score"] is None  # no rubric: no invented score
    assert only_react["thought_to_tool_accuracy"] == pytest.approx(0.5)
