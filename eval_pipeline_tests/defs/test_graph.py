"""The whole graph through Dagster's own machinery: materialize() into a tmp base path."""

import json

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.defs.pipeline.partitions import range_tags
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.dagster_helpers import PER_BATCH, build_definitions_for, stage_drop


def _materialize(defs, key, instance, selection=PER_BATCH):
    return dg.materialize(
        list(defs.assets), selection=selection, partition_key=key, instance=instance,
        resources=dict(defs.resources),
    )


def test_whole_graph_for_a_batch_with_malformed_records(project_root, tmp_path, instance):
    drop = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    (key,), defs = stage_drop(drop, tmp_path, instance)
    result = _materialize(defs, key, instance)
    assert result.success

    base = tmp_path / "assets"
    raw = pd.read_parquet(base / "raw_trajectories" / f"{key}.parquet")
    quarantine = pd.read_parquet(base / "quarantine" / f"{key}.parquet")
    kept = pd.read_parquet(base / "preprocessed_trajectories" / f"{key}.parquet")
    removed = pd.read_parquet(base / "preprocess_report" / f"{key}.parquet")
    clips = pd.read_parquet(base / "clips" / f"{key}.parquet")
    judged = pd.read_parquet(base / "judgments" / "heuristic" / f"{key}.parquet")
    averaged = pd.read_parquet(base / "averaged_scores" / f"{key}.parquet")
    summaries = pd.read_parquet(base / "trajectory_summaries" / f"{key}.parquet")

    records = [ln for ln in drop.read_text("utf-8").splitlines() if ln.strip()]
    assert len(raw) + len(quarantine) == len(records)
    assert len(kept) + len(removed) == len(raw)
    # Quarantined lines point at the user's file and line.
    assert set(quarantine["source_file"]) == {"sample_malformed.jsonl"}
    for line, reason in zip(quarantine["source_line"], quarantine["reason"], strict=True):
        assert reason and line >= 1
        with pytest.raises((ValueError, KeyError, TypeError, AssertionError)):
            value = json.loads(records[line - 1])
            assert isinstance(value, dict) and isinstance(value["raw_response"], str)
    # Every clip judged once on its rubric, plus the ReAct kinds: one thought_to_tool per
    # tool clip, one query_to_thought per tool clip with a thought, one
    # sequence_optimality per trajectory, one category assessment per tool type used in a
    # trajectory and one trajectory assessment per trajectory; every judgment ok with
    # scores in [0, 1].
    tool_clips = clips[clips["tool_type"] != "final"]
    assert judged["evaluation_kind"].value_counts().to_dict() == {
        "clip_rubric": len(clips), "thought_to_tool": len(tool_clips),
        "query_to_thought": int((tool_clips["thought"].str.strip() != "").sum()),
        "sequence_optimality": len(kept),
        "category_assessment": len(tool_clips[["trajectory_id", "tool_type"]]
                                   .drop_duplicates()),
        "trajectory_assessment": len(kept)}
    assert len(judged) == len(averaged)
    assert (judged["provider"] == "heuristic").all()
    for scores in judged["scores"]:
        values = json.loads(scores).values()
        assert values and all(0.0 <= v <= 1.0 for v in values)
    assert set(summaries["trajectory_id"]) == set(kept["trajectory_id"])
    meta = json.loads(summaries["evaluation_metadata"].iloc[0])
    assert meta["total_clips"] == int((clips["trajectory_id"]
                                      == summaries["trajectory_id"].iloc[0]).sum())
    assert "<clip_evaluation>" in summaries["full_response_with_evaluations"].iloc[0]

    # Metadata and asset checks are recorded on the instance.
    mats = {e.asset_key.to_user_string(): e.materialization.metadata
            for e in result.get_asset_materialization_events()}
    assert mats["raw_trajectories"]["records_read"].value == len(records)
    assert mats["quarantine"]["quarantined"].value == len(quarantine)
    assert mats["judgments/heuristic"]["ok"].value == len(judged)
    assert "preview" in mats["trajectory_summaries"]
    assert 0.0 <= mats["trajectory_summaries"]["thought_to_tool_accuracy"].value <= 1.0
    assert mats["judgments/heuristic"]["rows_by_kind"].value["sequence_optimality"] == len(kept)
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)
    assert {c.check_name for c in checks} >= {"every_record_accounted", "unique_trajectory_ids",
                                              "kept_plus_removed_equals_parsed",
                                              "scores_in_unit_interval"}


@pytest.mark.slow
def test_report_over_all_batches_and_its_delta(project_root, tmp_path, instance):
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    keys, defs = stage_drop(drop, tmp_path, instance, split_size=10)
    assert keys == ["sample_agent_runs01", "sample_agent_runs02", "sample_agent_runs03"]
    for key in keys[:2]:
        assert _materialize(defs, key, instance).success
    report_selection = dg.AssetSelection.assets("evaluation_report")
    first = dg.materialize(list(defs.assets), selection=report_selection, instance=instance,
                           resources=dict(defs.resources))
    report = pd.read_parquet(tmp_path / "assets" / "evaluation_report.parquet")
    # The batch never materialized is skipped, not an error.
    assert list(report["batch"]) == [*keys[:2], "ALL"]
    summaries = pd.concat(
        pd.read_parquet(tmp_path / "assets" / "trajectory_summaries" / f"{k}.parquet")
        for k in keys[:2])
    overall = report.set_index("batch").loc["ALL"]
    assert overall["trajectories"] == len(summaries)
    assert overall["mean_overall_score"] == pytest.approx(
        summaries["overall_trajectory_score"].dropna().mean())
    assert "delta_vs_last_report" not in first.get_asset_materialization_events()[0] \
        .materialization.metadata
    assert _materialize(defs, keys[2], instance).success
    second = dg.materialize(list(defs.assets), selection=report_selection, instance=instance,
                            resources=dict(defs.resources))
    meta = second.get_asset_materialization_events()[0].materialization.metadata
    assert meta["batches"].value == 3
    assert "delta_vs_last_report" in meta


@pytest.mark.slow
def test_one_table_of_a_multi_asset_can_be_materialized_alone(project_root, tmp_path,
                                                               instance):
    drop = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    (key,), defs = stage_drop(drop, tmp_path, instance)
    result = _materialize(defs, key, instance, dg.AssetSelection.assets("raw_trajectories"))
    assert result.success
    assert [e.asset_key.to_user_string() for e in result.get_asset_materialization_events()] \
        == ["raw_trajectories"]
    assert not (tmp_path / "assets" / "quarantine").exists()


@pytest.mark.slow
def test_one_run_over_several_batches_writes_each_batch_and_its_metadata(
        project_root, tmp_path, instance):
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    keys, defs = stage_drop(drop, tmp_path, instance, split_size=10)
    job = defs.resolve_job_def("evaluate_batch")
    result = job.execute_in_process(instance=instance, tags=range_tags(keys))
    assert result.success
    assert len(instance.get_runs()) == 1
    base = tmp_path / "assets"
    for name in ["raw_trajectories", "clips", "judgments/heuristic", "averaged_scores",
                 "trajectory_summaries"]:
        assert sorted(p.stem for p in (base / name).glob("*.parquet")) == keys, name
    # One materialization per batch, each with that batch's own figures.
    for key in keys:
        summaries = pd.read_parquet(base / "trajectory_summaries" / f"{key}.parquet")
        assert set(summaries["batch"]) == {key}
        judged = pd.read_parquet(base / "judgments" / "heuristic" / f"{key}.parquet")
        metas = {}
        for asset in (dg.AssetKey("trajectory_summaries"), dg.AssetKey(["judgments",
                                                                        "heuristic"])):
            record = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key]), limit=1
            ).records[0]
            metas[asset.to_user_string()] = record.asset_materialization.metadata
        assert metas["trajectory_summaries"]["trajectories"].value == len(summaries)
        assert metas["judgments/heuristic"]["rows"].value == len(judged)
        assert metas["judgments/heuristic"]["dagster/row_count"].value == len(judged)
        assert metas["judgments/heuristic"]["path"].value.endswith(
            f"heuristic/{key}.parquet")
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)


@pytest.mark.slow
def test_a_report_over_one_batch_names_that_batch(project_root, tmp_path, instance):
    drop = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    (key,), defs = stage_drop(drop, tmp_path, instance)
    assert _materialize(defs, key, instance).success
    assert dg.materialize(list(defs.assets), instance=instance, resources=dict(defs.resources),
                          selection=dg.AssetSelection.assets("evaluation_report")).success
    report = pd.read_parquet(tmp_path / "assets" / "evaluation_report.parquet")
    assert list(report["batch"]) == [key, "ALL"]


@pytest.mark.slow
def test_one_judge_of_several_can_be_materialized_alone(project_root, tmp_path, instance):
    drop = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    keys = stage_drop(drop, tmp_path, instance)[0]
    defs = build_definitions_for(tmp_path, [JudgeConfig(name="a"), JudgeConfig(name="b")])
    selection = (dg.AssetSelection.assets("raw_trajectories", "preprocessed_trajectories",
                                          "clips", ["judgments", "b"]))
    result = _materialize(defs, keys[0], instance, selection)
    assert result.success
    assert (tmp_path / "assets" / "judgments" / "b" / f"{keys[0]}.parquet").exists()
    assert not (tmp_path / "assets" / "judgments" / "a").exists()
    assert {c.asset_key.to_user_string() for c in result.get_asset_check_evaluations()
            if c.check_name == "scores_in_unit_interval"} == {"judgments/b"}
