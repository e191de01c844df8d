"""Sensors and automation conditions evaluated directly against a real (temporary) instance."""

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from eval_pipeline.defs.pipeline.automation import new_drop_sensor
from eval_pipeline.defs.pipeline.partitions import (
    BATCHES_PARTITION,
    RANGE_END_TAG,
    RANGE_START_TAG,
    batch_ranges,
)
from eval_pipeline_tests.dagster_helpers import PER_BATCH, build_definitions_for


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


def _requested(result: dg.EvaluateAutomationConditionsResult, defs: dg.Definitions
               ) -> dict[str, set[str | None]]:
    """What one evaluation requested: asset (user string) -> partitions."""
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    return {k.to_user_string(): set(result.get_requested_partitions(k)) for k in keys
            if result.get_num_requested(k)}


JUDGED = {"judgments/heuristic", "averaged_scores", "trajectory_summaries", "judge_agreement",
          "judge_disagreements"}
"""What a changed rubric reaches: the judge and everything after it."""
PER_BATCH_ASSETS = JUDGED | {"raw_trajectories", "quarantine", "preprocessed_trajectories",
                             "preprocess_report", "clips", "routing_checks"}


@pytest.mark.slow
def test_declarative_catch_up_requests_missing_then_follows_upstream_then_a_changed_rubric(
        project_root, tmp_path, instance, monkeypatch):
    """The automation conditions, evaluated against a real instance as the catch-up
    sensor evaluates them: missing batches at the daily tick, nothing when nothing changed,
    the stages after one re-materialized by hand at once, a rubric edit at the next tick."""
    from eval_pipeline import rubrics
    from eval_pipeline_tests.dagster_helpers import stage_drop

    keys, defs = stage_drop(project_root / "data" / "incoming" / "sample_agent_runs.jsonl",
                            tmp_path, instance)
    assert len(keys) == 3
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(1)
    cursor = None

    def tick(at: datetime, definitions: dg.Definitions = defs) -> dict[str, set[str | None]]:
        nonlocal cursor
        result = dg.evaluate_automation_conditions(defs=definitions, instance=instance,
                                                   evaluation_time=at, cursor=cursor)
        cursor = result.cursor
        return _requested(result, definitions)

    def run(selection: dg.AssetSelection, partition: str | None) -> None:
        assert dg.materialize(list(defs.assets), selection=selection, partition_key=partition,
                              instance=instance, resources=dict(defs.resources)).success

    run(PER_BATCH, keys[0])
    assert tick(day.replace(hour=2)) == {}  # before the daily tick: nothing
    # 03:00 passed: every stage of the two missing batches, and the report (never made).
    first = tick(day.replace(hour=3, minute=1))
    assert first == {**{a: set(keys[1:]) for a in PER_BATCH_ASSETS},
                     "evaluation_report": {None}}
    for key in keys[1:]:
        run(PER_BATCH, key)
    run(dg.AssetSelection.assets("evaluation_report"), None)
    assert tick(day.replace(hour=3, minute=30)) == {}
    assert tick(day + timedelta(days=1, hours=3, minutes=1)) == {}  # nothing changed

    # A judge re-materialized by hand: the stages after it follow at once (eager).
    run(dg.AssetSelection.assets(["judgments", "heuristic"]), keys[0])
    assert tick(day + timedelta(days=1, hours=10)) == {
        a: {keys[0]} for a in JUDGED - {"judgments/heuristic"}}
    run(dg.AssetSelection.assets(*[dg.AssetKey.from_user_string(a)
                                   for a in JUDGED - {"judgments/heuristic"}]), keys[0])
    assert tick(day + timedelta(days=1, hours=10, minutes=1)) == {}

    # A metric added to a rubric: the judge's code version changes; at the next daily tick
    # the judge and everything after it are requested for every batch, nothing before it.
    table = rubrics.rubrics()
    edited = {**table, "microsandbox": table["microsandbox"].model_copy(update={
        "metrics": {**table["microsandbox"].metrics, "tests_pass": "The code's tests pass"}})}
    monkeypatch.setattr(rubrics, "rubrics", lambda: edited)
    changed = build_definitions_for(tmp_path)
    judge = dg.AssetKey(["judgments", "heuristic"])
    assert (changed.resolve_asset_graph().get(judge).code_version
            != defs.resolve_asset_graph().get(judge).code_version)
    assert tick(day + timedelta(days=1, hours=12), changed) == {}  # seen, not yet due
    assert tick(day + timedelta(days=2, hours=3, minutes=1), changed) == {
        **{a: set(keys) for a in JUDGED}, "evaluation_report": {None}}


def test_every_asset_has_a_labelled_condition_and_the_catch_up_sensor_is_switchable():
    defs = build_definitions_for(Path("unused"))
    graph = defs.resolve_asset_graph()
    conditions = {k.to_user_string(): graph.get(k).automation_condition
                  for k in graph.get_all_asset_keys()}
    # The routing suites run on their own schedule (they call a paid model under test).
    assert conditions.pop("routing_suite_results") is None
    labels = {name: c.get_label() for name, c in conditions.items() if c is not None}
    assert labels == {**dict.fromkeys(PER_BATCH_ASSETS - {"raw_trajectories", "quarantine"},
                                      "eager, or daily catch-up"),
                      "raw_trajectories": "daily catch-up", "quarantine": "daily catch-up",
                      "evaluation_report": "daily catch-up"}
    sensor = defs.resolve_sensor_def("catch_up_sensor")
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert [s.name for s in defs.schedules] == ["routing_suite_schedule"]  # no daily rerun


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
