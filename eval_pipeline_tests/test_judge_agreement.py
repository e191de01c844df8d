"""Inter-judge agreement and judges against human labels (#8.8, #8.9)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.agreement import (
    binary_agreement,
    fleiss_kappa,
    krippendorff_interval,
    passes,
)
from eval_pipeline.agreement_report import build_agreement
from eval_pipeline.scoring.averaging import average_judgments

NAN = math.nan


def test_krippendorff_interval_by_hand():
    # Values 1,1,2,2,3,4 pair within units: D_o = 2/6, D_e = 82/30, alpha = 1 - 10/82.
    assert krippendorff_interval([[1, 2, 3], [1, 2, 4]]) == pytest.approx(72 / 82)
    # A clip only one judge scored carries nothing; missing scores are NaN.
    assert krippendorff_interval([[1, 2, 3, NAN], [1, 2, 4, 5]]) == pytest.approx(72 / 82)
    assert krippendorff_interval([[1, NAN, 3], [1, 2, 3]]) == pytest.approx(1.0)
    # No figure: one judge, no shared clip, or no variation at all (alpha is 0/0).
    assert krippendorff_interval([[0.5, 0.7]]) is None
    assert krippendorff_interval([[0.5, NAN], [NAN, 0.7]]) is None
    assert krippendorff_interval([[0.5, 0.5], [0.5, 0.5]]) is None


def test_fleiss_kappa_by_hand_and_against_statsmodels():
    # p = (3/4, 1/4): P_e = 10/16; P_i = (1, 0): P_bar = 1/2; kappa = (8/16-10/16)/(6/16).
    assert fleiss_kappa([[2, 0], [1, 1]]) == pytest.approx(-1 / 3)
    assert fleiss_kappa([[3, 0], [0, 3]]) == pytest.approx(1.0)
    assert fleiss_kappa([[2, 0], [2, 0]]) is None  # one category only: chance agreement 1
    assert fleiss_kappa([[2, 0], [1, 2]]) is None  # raters per item must be equal
    inter_rater = pytest.importorskip("statsmodels.stats.inter_rater")
    rng = np.random.default_rng(8)
    for raters, categories in ((3, 2), (5, 4)):
        table = rng.multinomial(raters, [1 / categories] * categories, size=60)
        table[:20] = 0
        table[:20, 0] = raters  # some agreement beyond chance
        assert fleiss_kappa(table) == pytest.approx(inter_rater.fleiss_kappa(table))


def test_binary_agreement_by_hand_and_against_statsmodels():
    pairs = [(True, True), (True, True), (True, False), (False, True), (False, False),
             (False, False)]
    result = binary_agreement(pairs)
    assert (result.true_positive, result.false_negative, result.false_positive,
            result.true_negative) == (2, 1, 1, 2)
    # p_o = 4/6; both sides say good half the time: p_e = 1/2; kappa = (2/3 - 1/2)/(1/2).
    assert result.accuracy == pytest.approx(4 / 6)
    assert result.cohen_kappa == pytest.approx(1 / 3)
    assert binary_agreement([(True, True), (True, True)]).cohen_kappa is None
    assert binary_agreement([]).accuracy is None
    assert passes(0.5) and not passes(0.49)
    inter_rater = pytest.importorskip("statsmodels.stats.inter_rater")
    rng = np.random.default_rng(9)
    human = rng.random(200) < 0.4
    judge = np.where(rng.random(200) < 0.7, human, ~human)
    result = binary_agreement(zip(human.tolist(), judge.tolist(), strict=True))
    table = [[result.true_positive, result.false_negative],
             [result.false_positive, result.true_negative]]
    assert result.cohen_kappa == pytest.approx(inter_rater.cohens_kappa(table).kappa)
    assert result.accuracy == pytest.approx(float(np.mean(human == judge)))


def _judgment(tid, ci, kind, scores, status="ok", label=None, tool="search"):
    return {"trajectory_id": tid, "clip_index": ci, "evaluation_kind": kind,
            "tool_type": tool, "status": status,
            "scores": json.dumps(scores) if status == "ok" else "{}", "label": label,
            "summary": "", "reasoning": "", "error": None if status == "ok" else "boom"}


def test_averaged_scores_flag_clips_the_judges_disagree_on():
    a = pd.DataFrame([_judgment("t", 0, "clip_rubric", {"x": 0.9, "y": 0.5}),
                      _judgment("t", 1, "clip_rubric", {"x": 0.6}),
                      _judgment("t", 2, "clip_rubric", {"x": 1.0}),
                      _judgment("t", 3, "clip_rubric", {"x": 0.8})])
    b = pd.DataFrame([_judgment("t", 0, "clip_rubric", {"x": 0.2, "y": 0.5}),
                      _judgment("t", 1, "clip_rubric", {"x": 0.4}),
                      _judgment("t", 2, "clip_rubric", {}, status="failed"),
                      _judgment("t", 3, "clip_rubric", {"x": 0.3})])
    flagged = average_judgments({"a": a, "b": b}, 0.5).set_index("clip_index")
    # Spread 0.7 > 0.5 is flagged; 0.2 is not; one judge alone never is; exactly 0.5 is not.
    assert flagged["disagreement"].tolist() == [True, False, False, False]
    assert flagged.loc[0, "spread"] == pytest.approx(0.7)
    assert average_judgments({"a": a, "b": b}, 0.1)["disagreement"].tolist() == [
        True, True, False, True]
    assert not average_judgments({"a": a, "b": b})["disagreement"].any()


def test_build_agreement_between_judges_and_against_humans():
    a = pd.DataFrame([
        _judgment("t1", 0, "clip_rubric", {"x": 0.9}),
        _judgment("t1", 1, "clip_rubric", {"x": 0.2}),
        _judgment("t2", 0, "clip_rubric", {"x": 0.8}),
        _judgment("t2", 1, "clip_rubric", {"x": 0.7}, tool="final"),
        _judgment("t1", 0, "thought_to_tool", {"t2t": 1.0}, label="correct"),
        _judgment("t2", 0, "thought_to_tool", {"t2t": 1.0}, label="correct"),
    ])
    b = pd.DataFrame([
        _judgment("t1", 0, "clip_rubric", {"x": 0.8}),
        _judgment("t1", 1, "clip_rubric", {"x": 0.9}),
        _judgment("t2", 0, "clip_rubric", {"x": 0.8}),
        _judgment("t2", 1, "clip_rubric", {}, status="failed"),
        _judgment("t1", 0, "thought_to_tool", {"t2t": 1.0}, label="correct"),
        _judgment("t2", 0, "thought_to_tool", {"t2t": 0.0}, label="incorrect"),
    ])
    clips = pd.DataFrame({"trajectory_id": ["t1", "t1", "t2", "t2"], "clip_index": [0, 1, 0, 1],
                          "human_label": [1.0, -1.0, 0.0, None]})
    trajectories = pd.DataFrame({"trajectory_id": ["t1", "t2"], "task_id": ["q1", "q2"],
                                 "final_label": [None, -1.0], "reward": [1.0, None],
                                 "success": [None, None]})
    agreement, listed = build_agreement("b1", {"a": a, "b": b}, clips, trajectories, 0.5)
    between = agreement[agreement["comparison"] == "between_judges"].set_index(
        ["evaluation_kind", "metric"])
    rubric = between.loc[("clip_rubric", "x")]
    # Three clips both judges scored: (0.9, 0.8), (0.2, 0.9), (0.8, 0.8).
    assert rubric["items"] == 3 and rubric["judges"] == 2
    assert rubric["krippendorff_alpha"] == pytest.approx(
        krippendorff_interval([[0.9, 0.2, 0.8], [0.8, 0.9, 0.8]]))
    assert rubric["mean_spread"] == pytest.approx((0.1 + 0.7 + 0.0) / 3)
    assert rubric["max_spread"] == pytest.approx(0.7) and rubric["disagreements"] == 1
    # Labels: (correct, correct), (correct, incorrect): p = (3/4, 1/4), kappa = -1/3.
    assert between.loc[("thought_to_tool", "t2t"), "fleiss_kappa"] == pytest.approx(-1 / 3)
    assert between.loc[("thought_to_tool", "t2t"), "disagreements"] == 1
    gap = listed[(listed["comparison"] == "between_judges")
                 & (listed["evaluation_kind"] == "clip_rubric")]
    assert gap[["trajectory_id", "clip_index"]].values.tolist() == [["t1", 1]]
    assert json.loads(gap["scores"].iloc[0]) == {"a": 0.2, "b": 0.9}

    human = agreement[agreement["comparison"] != "between_judges"].set_index(
        ["comparison", "judge"])
    # Step labels: t1/0 good, t1/1 bad (t2/0 neutral: left out). Judge a: 0.9 pass, 0.2
    # fail: both right. Judge b: 0.8 pass (right), 0.9 pass on a bad step (wrong).
    assert human.loc[("step_label", "a"), ["items", "accuracy", "auc"]].tolist() == [2, 1.0, 1.0]
    assert human.loc[("step_label", "a"), "cohen_kappa"] == pytest.approx(1.0)
    step_b = human.loc[("step_label", "b")]
    assert (step_b["accuracy"], step_b["true_positive"], step_b["false_positive"]) == (0.5, 1, 1)
    assert step_b["cohen_kappa"] == pytest.approx(0.0)  # p_o 1/2, p_e 1/2
    wrong = listed[(listed["comparison"] == "step_label")]
    assert wrong[["judge", "trajectory_id", "clip_index", "human_label", "judge_score"]
                 ].values.tolist() == [["b", "t1", 1, -1.0, 0.9]]
    # Outcomes: t1 good (reward 1), t2 bad (final label -1). Judge a: t1 = mean(0.9, 0.2)
    # = 0.55 pass (right); t2 = (0.8 * 1 + 0.7 * 1) / 2 over its two tool types = 0.75
    # pass (wrong). Judge b: t1 0.85 (right), t2 0.8 (wrong).
    outcome_a = human.loc[("outcome", "a")]
    assert (outcome_a["items"], outcome_a["accuracy"], outcome_a["auc"]) == (2, 0.5, 0.0)
    wrong = listed[(listed["comparison"] == "outcome") & (listed["judge"] == "a")]
    assert wrong[["trajectory_id", "task_id", "human_label"]].values.tolist() == [
        ["t2", "q2", -1.0]]
    assert wrong["judge_score"].iloc[0] == pytest.approx(0.75)


def test_one_judge_without_labels_has_nothing_to_compare():
    a = pd.DataFrame([_judgment("t1", 0, "clip_rubric", {"x": 0.9})])
    clips = pd.DataFrame({"trajectory_id": ["t1"], "clip_index": [0], "human_label": [None]})
    trajectories = pd.DataFrame({"trajectory_id": ["t1"], "task_id": ["q"]})
    agreement, listed = build_agreement("b", {"a": a}, clips, trajectories)
    assert agreement.empty and listed.empty


@pytest.mark.slow
def test_cli_writes_agreement_with_the_report_figures(corpora_dir, tmp_path, monkeypatch):
    """AgentProcessBench through the CLI: judge_agreement's AUCs and counts for the one
    judge are the report's (computed independently from the averaged scores), and every
    listed disagreement is a decision that is not the human's."""
    from eval_pipeline.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    lines = (corpora_dir / "agentprocessbench" / "hotpotqa.jsonl").read_text(
        "utf-8").splitlines()[:20]
    drop = tmp_path / "apb.jsonl"
    drop.write_text("\n".join(lines) + "\n", "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(drop), "--output", str(out), "--split-size", "20",
                 "--disagreement-threshold", "0.3"]) == 0
    agreement = pd.read_parquet(out / "judge_agreement.parquet")
    listed = pd.read_parquet(out / "judge_disagreements.parquet")
    report = pd.read_parquet(out / "evaluation_report.parquet").set_index("batch")
    averaged = pd.read_parquet(out / "averaged_scores.parquet")

    assert not averaged["disagreement"].any()  # one judge never disagrees with itself
    assert set(agreement["comparison"]) == {"step_label", "outcome"}
    by = agreement.set_index("comparison")
    for comparison, prefix in (("step_label", "step"), ("outcome", "outcome")):
        row = by.loc[comparison]
        assert row["judge"] == "heuristic"
        assert row["items"] == report.loc["ALL", f"{prefix}_labelled"] > 0
        assert row["auc"] == pytest.approx(report.loc["ALL", f"{comparison}_auc"])
        confusion = (row["true_positive"] + row["false_positive"] + row["false_negative"]
                     + row["true_negative"])
        assert confusion == row["items"]
        assert row["accuracy"] == pytest.approx(
            (row["true_positive"] + row["true_negative"]) / row["items"])
        mine = listed[listed["comparison"] == comparison]
        assert len(mine) == row["disagreements"] == row["false_positive"] + row[
            "false_negative"]
        for human, score in zip(mine["human_label"], mine["judge_score"], strict=True):
            assert (human > 0) != passes(score)
