"""Why did this score change: the metadata a rematerialization records, read back from a real
instance, and data versions that keep an identical batch from making anything stale."""

import dagster as dg
import pandas as pd
import pytest
from dagster._core.definitions.data_version import StaleStatus
from dagster._utils.test.data_versions import get_stale_status_resolver

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.dagster_helpers import PER_BATCH, build_definitions_for, stage_drop


def _run(defs, key, instance, selection=PER_BATCH):
    result = dg.materialize(list(defs.assets), selection=selection, partition_key=key,
                            instance=instance, resources=dict(defs.resources))
    assert result.success
    return {e.asset_key.to_user_string(): e.materialization
            for e in result.get_asset_materialization_events()}


@pytest.mark.slow
def test_a_rematerialization_says_what_moved_and_which_upstream_version_changed(
        project_root, tmp_path, instance):
    drop = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    (key,), defs = stage_drop(drop, tmp_path, instance)
    first = _run(defs, key, instance)
    judged = first["judgments/heuristic"].metadata
    table = pd.read_parquet(tmp_path / "assets" / "judgments" / "heuristic" / f"{key}.parquet")
    ok = table[table["status"] == "ok"]
    metrics = {m for s in ok["scores"] for m in pd.read_json(
        pd.io.common.StringIO(f"[{s}]")).columns}
    assert metrics and all(isinstance(judged[f"score/{m}/mean"].value, float)
                           for m in metrics)
    counts = judged["metric_counts"].value
    assert set(counts) == metrics and sum(counts.values()) == sum(
        len(pd.read_json(pd.io.common.StringIO(f"[{s}]")).columns) for s in ok["scores"])
    # The UI lists an asset's first hundred or so metadata entries only: the score-change
    # entries must stay within them, with every rubric and assessment metric recorded.
    assert len(judged) < 90, len(judged)
    assert judged["failure_rate"].value == 0.0
    assert "first materialization" in judged["changed_upstream"].value
    assert "delta/mean_change" not in judged

    # Pretend two clips scored differently last time: the store's previous Parquet is what
    # the next materialization compares with.
    path = tmp_path / "assets" / "averaged_scores" / f"{key}.parquet"
    previous = pd.read_parquet(path)
    rows = previous.index[previous["status"] == "ok"][:2]
    previous.loc[rows, "mean_score"] = [0.0 if v > 0.5 else 1.0
                                        for v in previous.loc[rows, "mean_score"]]
    previous.to_parquet(path, index=False)
    moved = {f"{t}/{c}/{k}" for t, c, k in previous.loc[
        rows, ["trajectory_id", "clip_index", "evaluation_kind"]].itertuples(index=False)}

    changed = build_definitions_for(tmp_path, [JudgeConfig(name="heuristic", temperature=0.7)])
    second = _run(changed, key, instance)
    averaged = second["averaged_scores"].metadata
    assert averaged["delta/moved_over_0.1"].value == 2
    assert averaged["delta/compared"].value == len(previous[previous["status"] == "ok"])
    assert all(m in averaged["delta/movers"].value for m in moved)
    assert averaged["changed_upstream_count"].value == 1
    assert "judge.heuristic.temperature: 0.1 -> 0.7" in averaged["changed_upstream"].value
    assert averaged["upstream_versions"].value["batch_data"] == \
        second["raw_trajectories"].metadata["content_hash"].value
    # The judge's own table did not move: same clips, same deterministic scores.
    judged = second["judgments/heuristic"].metadata
    assert judged["delta/moved_over_0.1"].value == 0
    assert judged["delta/mean_change"].value == 0.0
    summaries = second["trajectory_summaries"].metadata
    assert summaries["delta/compared"].value == summaries["score/overall/count"].value > 0

    # The report compares batches: the same one batch, its mean unchanged.
    report = _run(changed, None, instance, dg.AssetSelection.assets("evaluation_report"))
    again = _run(changed, None, instance, dg.AssetSelection.assets("evaluation_report"))
    assert "first materialization" in report["evaluation_report"].metadata[
        "changed_upstream"].value
    assert again["evaluation_report"].metadata["delta/compared"].value == 2  # batch + ALL
    assert again["evaluation_report"].metadata["changed_upstream_count"].value == 0


@pytest.mark.slow
def test_an_identical_batch_reingested_leaves_downstream_fresh_and_changed_bytes_do_not(
        project_root, tmp_path, instance):
    drop = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    (key,), defs = stage_drop(drop, tmp_path, instance)
    first = _run(defs, key, instance)
    raw_only = dg.AssetSelection.assets("raw_trajectories", "quarantine")
    downstream = dg.AssetKey("preprocessed_trajectories")

    def status():  # what the UI shows (Dagster's resolver; its only Python door is private)
        resolver = get_stale_status_resolver(instance, list(defs.assets))
        return resolver.get_status(downstream, key)

    assert status() == StaleStatus.FRESH
    again = _run(defs, key, instance, raw_only)
    version = "dagster/data_version"
    assert again["raw_trajectories"].tags[version] == first["raw_trajectories"].tags[version]
    assert status() == StaleStatus.FRESH

    batch = next((tmp_path / "batches").glob(f"*/{key}.jsonl"))
    batch.write_bytes(batch.read_bytes().replace(b"a", b"b", 1))
    changed = _run(defs, key, instance, raw_only)
    assert changed["raw_trajectories"].tags[version] != first["raw_trajectories"].tags[version]
    assert status() == StaleStatus.STALE
