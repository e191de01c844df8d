"""Batch mode in Dagster (#18.2): the run that submits ends pending, the sensor notices the
provider's results and requests the run that materializes the judgments and downstream.

Against the fake OpenAI server's Files and Batches endpoints, through the real SDK.
"""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.defs.pipeline.assets.judging import BATCH_TAG
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.dagster_helpers import PER_BATCH, stage_drop
from eval_pipeline_tests.judges.fake_batches import FakeBatches
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer

GPT = dg.AssetKey(["judgments", "gpt"])
HEURISTIC = dg.AssetKey(["judgments", "heuristic"])
AVERAGED = dg.AssetKey("averaged_scores")
SUMMARIES = dg.AssetKey("trajectory_summaries")


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1).records
    return records[0].asset_materialization if records else None


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance):
    sensor = defs.resolve_sensor_def("batch_results_sensor")
    with dg.build_sensor_context(instance=instance, definitions=defs,
                                 resources=dict(defs.resources)) as context:
        return sensor(context)


@pytest.fixture
def batch_server():
    server = FakeLLMServer("openai").start()
    batches = FakeBatches(server, delay_s=0.3)
    yield server, batches
    server.stop()


@pytest.mark.slow
def test_pending_run_then_sensor_requests_the_collecting_runs(
        batch_server, tmp_path: Path, instance, monkeypatch, project_root):
    server, fake = batch_server
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))  # the judge cache and ledger
    monkeypatch.setenv("BATCH_KEY", "sk-batch-test-0123456789")
    judges = [JudgeConfig(name="heuristic"),
              JudgeConfig(name="gpt", provider="openai", model="gpt-4.1-mini",
                          base_url=server.base_url, api_key_env="BATCH_KEY", mode="batch",
                          batch_waves=2, evaluations=["clip_rubric", "thought_to_tool"],
                          batch_poll_s=5)]
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    from eval_pipeline_tests.dagster_helpers import build_definitions_for

    keys, _ = stage_drop(drop, tmp_path, instance, split_size=100)
    defs = build_definitions_for(tmp_path, judges)
    (batch,) = keys

    fake.hold = True  # the first batch stays in progress until released
    first = dg.materialize(list(defs.assets), selection=PER_BATCH, partition_key=batch,
                           instance=instance, resources=dict(defs.resources))
    assert first.success
    # The live judge and its branch are done; the batch judge's partition is pending:
    # nothing downstream of it materialized, the run and an observation say so.
    assert _latest(instance, HEURISTIC, batch) is not None
    assert _latest(instance, GPT, batch) is None and _latest(instance, AVERAGED, batch) is None
    run = instance.get_run_by_id(first.run_id)
    assert run is not None and run.tags[BATCH_TAG] == "pending"
    observed = instance.fetch_observations(GPT, limit=1).records[0].asset_observation
    assert observed is not None and observed.partition == batch
    assert observed.metadata["batch"].value == "pending"
    assert observed.metadata["batch.in_flight"].value == ["batch_0001"]
    assert fake.created == 1

    # While the batch is processing the sensor requests nothing.
    assert isinstance(_tick(defs, instance), dg.SkipReason)
    fake.release()

    runs = 0
    while _latest(instance, GPT, batch) is None:
        runs += 1
        assert runs <= 4, "the batch judge never finished"
        time.sleep(fake.delay_s + 0.2)
        result = _tick(defs, instance)
        assert isinstance(result, dg.SensorResult), result
        (request,) = result.run_requests
        assert request.partition_key == batch
        assert {GPT, AVERAGED, SUMMARIES} <= set(request.asset_selection or [])
        assert HEURISTIC not in set(request.asset_selection or [])
        # The same ended batch is requested under the same run key: picked up once.
        again = _tick(defs, instance)
        assert isinstance(again, dg.SensorResult)
        assert again.run_requests[0].run_key == request.run_key
        collected = dg.materialize(list(defs.assets), selection=request.asset_selection,
                                   partition_key=batch, instance=instance,
                                   resources=dict(defs.resources), tags=request.tags)
        assert collected.success

    assert runs == 2 == fake.created  # bounded to two waves: two provider batches
    done = _latest(instance, GPT, batch)
    assert done.metadata["judge.mode"].value == "batch"
    assert done.metadata["batch.chain"].value == "bounded to 2 (2 waves)"
    assert done.metadata["batch.waves"].value == 2
    assert done.metadata["failed"].value == 0
    assert _latest(instance, SUMMARIES, batch) is not None
    table = pd.read_parquet(tmp_path / "assets" / "judgments" / "gpt" / f"{batch}.parquet")
    assert (table["status"] == "ok").all() and not table["cached"].any()
    # Half the live price: gpt-4.1-mini in batch is $0.20 / $0.80 per million tokens.
    per_row = (1000 * 0.20 + 200 * 0.80) / 1e6
    assert table["cost_usd"].tolist() == pytest.approx([per_row] * len(table))
    assert done.metadata["cost_usd"].value == pytest.approx(per_row * len(table))
    # Every row was one batch line; a bounded chain restarts at clip 2.
    assert fake.lines == len(table)
    rubric = table[table["evaluation_kind"] == "clip_rubric"]
    assert (rubric[rubric["clip_index"] % 2 == 0]["previous_context"] == "").all()
    assert (rubric[rubric["clip_index"] % 2 == 1]["previous_context"] != "").all()

    # A second run of the same batch: every answer comes from the cache, no batch at all.
    second = dg.materialize(list(defs.assets), selection=PER_BATCH, partition_key=batch,
                            instance=instance, resources=dict(defs.resources))
    assert second.success and fake.created == 2
    again = pd.read_parquet(tmp_path / "assets" / "judgments" / "gpt" / f"{batch}.parquet")
    assert again["cached"].all() and again["cost_usd"].sum() == 0
    assert instance.get_run_by_id(second.run_id).tags[BATCH_TAG] == "collected"
