"""Sensor and schedule evaluated directly against a real (temporary) instance."""

import json
import shutil

import dagster as dg
import pytest

from eval_pipeline.defs.pipeline.automation import new_drop_sensor
from eval_pipeline.defs.pipeline.partitions import (
    BATCHES_PARTITION,
    RANGE_END_TAG,
    RANGE_START_TAG,
    batch_ranges,
)
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.dagster_helpers import PER_BATCH, build_definitions_for, daily_tick


def _sensor(defs, instance, cursor=None):
    # Used as a context manager so its resources are torn down inside the test.
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                 resources={"pipeline": defs.resources["pipeline"]}) as context:
        return new_drop_sensor(context)


def _batches(request: dg.RunRequest, ordered: list[str]) -> list[str]:
    """The batches one run request covers: a partition key or a range in instance order."""
    if request.partition_key:
        return [request.partition_key]
    start, end = request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]
    return ordered[ordered.index(start):ordered.index(end) + 1]


def _by_batch(requests, ordered: list[str]) -> dict[str, dict[str, str]]:
    return {b: dict(r.tags) for r in requests for b in _batches(r, ordered)}


def test_sensor_splits_new_drops_registers_partitions_and_requests_runs(
        corpora_dir, tmp_path, instance):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    shutil.copy(corpora_dir / "dataeva" / "demo02.jsonl", incoming / "demo02.jsonl")
    defs = build_definitions_for(tmp_path)
    result = _sensor(defs, instance)
    keys = [f"demo02{i:02d}" for i in range(1, 11)]
    (request,) = result.run_requests  # the whole drop in one run
    assert _batches(request, keys) == keys
    (add,) = result.dynamic_partitions_requests
    assert add.partitions_def_name == BATCHES_PARTITION and list(add.partition_keys) == keys
    assert (tmp_path / "batches" / "demo02" / "demo0210.jsonl").read_text().count("\n") == 7

    # Same drop, same cursor: nothing to do.
    instance.add_dynamic_partitions(BATCHES_PARTITION, keys)
    again = _sensor(defs, instance, cursor=result.cursor)
    assert isinstance(again, dg.SkipReason)

    # A changed drop with fewer records re-splits, reruns and retires the vanished batches.
    lines = (incoming / "demo02.jsonl").read_text("utf-8").splitlines()[:25]
    (incoming / "demo02.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    changed = _sensor(defs, instance, cursor=result.cursor)
    (rerun,) = changed.run_requests
    assert _batches(rerun, keys[:3]) == keys[:3]
    assert rerun.run_key != request.run_key
    (delete,) = changed.dynamic_partitions_requests
    assert list(delete.partition_keys) == keys[3:]
    assert json.loads(changed.cursor)["demo02.jsonl"]["keys"] == keys[:3]


@pytest.mark.slow
def test_daily_schedule_requests_missing_then_changed_judges_only(
        project_root, tmp_path, instance):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    shutil.copy(project_root / "data" / "incoming" / "sample_agent_runs.jsonl", incoming)
    defs = build_definitions_for(tmp_path)
    sensed = _sensor(defs, instance)
    (add,) = sensed.dynamic_partitions_requests
    instance.add_dynamic_partitions(BATCHES_PARTITION, list(add.partition_keys))
    keys = instance.get_dynamic_partitions(BATCHES_PARTITION)

    def tick(d):
        return daily_tick(d, instance)

    first = tick(defs)
    assert len(first.run_requests) == 1  # every missing batch in one run
    assert _batches(first.run_requests[0], keys) == keys
    assert first.run_requests[0].tags["eval_pipeline/rerun_reason"] == "missing"

    done = keys[0]
    assert dg.materialize(list(defs.assets), selection=PER_BATCH, partition_key=done,
                          instance=instance, resources=dict(defs.resources)).success
    second = tick(defs)
    assert set(_by_batch(second.run_requests, keys)) == set(keys) - {done}

    # A new model for the judge makes the scored batch stale, for that reason.
    changed = build_definitions_for(tmp_path, [JudgeConfig(name="heuristic",
                                                           model="heuristic-v2")])
    third = tick(changed)
    reasons = _by_batch(third.run_requests, keys)
    assert reasons[done]["eval_pipeline/rerun_reason"] == "judge heuristic changed"
    assert all(reasons[k]["eval_pipeline/rerun_reason"] == "missing" for k in keys[1:])

    # New data in the batch file makes it stale too.
    settings: PipelineSettings = defs.resources["pipeline"]
    batch = next((settings.batches_path).glob(f"*/{done}.jsonl"))
    manifest = batch.with_name(batch.name + ".manifest.json")
    data = json.loads(manifest.read_text())
    data["fingerprint"] = "changed"
    manifest.write_text(json.dumps(data))
    fourth = tick(defs)
    reasons = _by_batch(fourth.run_requests, keys)
    assert reasons[done]["eval_pipeline/rerun_reason"] == "new data"


@pytest.mark.slow
def test_a_successful_batch_run_requests_the_report(project_root, tmp_path, instance):
    from eval_pipeline.defs.pipeline.automation import report_after_batch_sensor
    from eval_pipeline_tests.dagster_helpers import stage_drop

    drop = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    (key,), defs = stage_drop(drop, tmp_path, instance)
    result = defs.resolve_job_def("evaluate_batch").execute_in_process(
        partition_key=key, instance=instance)
    assert result.success
    (record,) = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS)
    success_event = record.dagster_event
    context = dg.build_run_status_sensor_context(
        sensor_name="report_after_batch_sensor", dagster_event=success_event,
        dagster_instance=instance, dagster_run=result.dagster_run,
        repository_def=defs.get_repository_def())
    request = report_after_batch_sensor(context)
    assert request.run_key == f"report:{result.run_id}"
    assert [t.job_name for t in report_after_batch_sensor.targets] == ["evaluation_report_job"]


def test_batch_ranges_cover_only_wanted_batches_in_instance_order():
    ordered = ["a1", "a2", "b1", "a3", "a4", "a5"]
    assert batch_ranges(["a1", "a2", "a3", "a4", "a5"], ordered) == [
        ["a1", "a2"], ["a3", "a4", "a5"]]
    assert batch_ranges(["a3", "a4", "a5"], ordered, per_run=2) == [["a3", "a4"], ["a5"]]
    assert batch_ranges([], ordered) == []
