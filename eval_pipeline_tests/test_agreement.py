import pytest

from eval_pipeline.agreement import auc, outcome_of, step_label_positive


def test_auc_is_the_probability_a_positive_outranks_a_negative():
    perfect = auc([(0.9, True), (0.8, True), (0.2, False), (0.1, False)])
    assert perfect.auc == 1.0 and (perfect.positives, perfect.negatives) == (2, 2)
    assert auc([(0.1, True), (0.9, False)]).auc == 0.0
    # One of the four pairs is inverted, one tied: (2 + 0.5) / 4.
    assert auc([(0.9, True), (0.5, True), (0.5, False), (0.7, False)]).auc == pytest.approx(
        (1 + 1 + 0.5 + 0) / 4)
    # Missing scores and labels are left out; one class alone gives no figure.
    assert auc([(None, True), (0.4, None), (0.3, True)]).auc is None


def test_outcome_and_step_labels():
    assert outcome_of({"final_label": -1.0, "success": True}) is False
    assert outcome_of({"reward": 1.0}) is True and outcome_of({"reward": 0.0}) is False
    assert outcome_of({"success": True}) is True and outcome_of({}) is None
    assert outcome_of({"final_label": float("nan"), "success": False}) is False
    assert step_label_positive(1.0) and step_label_positive(-1) is False
    assert step_label_positive(0.0) is None and step_label_positive(None) is None


@pytest.mark.slow
def test_human_labels_flow_from_steps_to_clips_to_the_report(corpora_dir, tmp_path,
                                                            monkeypatch):
    import json

    import pandas as pd

    from eval_pipeline.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    lines = (corpora_dir / "agentprocessbench" / "hotpotqa.jsonl").read_text(
        "utf-8").splitlines()[:20]
    drop = tmp_path / "apb.jsonl"
    drop.write_text("\n".join(lines) + "\n", "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(drop), "--output", str(out), "--split-size", "20"]) == 0
    clips = pd.read_parquet(out / "clips.parquet")
    averaged = pd.read_parquet(out / "averaged_scores.parquet")
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    report = pd.read_parquet(out / "evaluation_report.parquet").set_index("batch")

    # Every human step label of a kept trajectory lands on the clip holding that step.
    source = [json.loads(x) for x in lines]
    labelled_steps = sum(len(r["step_labels"]) for r in source)
    assert clips["human_label"].notna().sum() > 0
    assert clips["human_label"].notna().sum() <= labelled_steps
    rubric = averaged[(averaged["evaluation_kind"] == "clip_rubric")
                      & (averaged["status"] == "ok")]
    scored = clips.merge(rubric, on=["trajectory_id", "clip_index"])
    expected_steps = int(((scored["human_label"].notna()) & (scored["human_label"] != 0)).sum())
    assert report.loc["ALL", "step_labelled"] == expected_steps > 0
    expected_outcomes = int((summaries["final_label"].fillna(0) != 0).sum())
    assert report.loc["ALL", "outcome_labelled"] == expected_outcomes == len(summaries)
    for column in ("outcome_auc", "step_label_auc"):
        assert 0.0 <= report.loc["ALL", column] <= 1.0
