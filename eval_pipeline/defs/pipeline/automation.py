"""Jobs, the new-drop sensor, the daily catch-up schedule and the report trigger."""


import json
from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from eval_pipeline.defs.pipeline.partitions import (
    BATCHES_PARTITION,
    batch_ranges,
    batch_run_request,
    batches_partitions_def,
)
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.score_changes import content_hash
from eval_pipeline.splitting import (
    MissingBatchError,
    drop_fingerprint,
    find_batch,
    list_drops,
    split_drop,
)
from eval_pipeline.staleness import BATCH_FILE_GONE, BatchState, why_stale

REPORT_KEY = dg.AssetKey("evaluation_report")
SUMMARIES_KEY = dg.AssetKey("trajectory_summaries")
ROUTING_SUITE_KEY = dg.AssetKey("routing_suite_results")  # its own job and schedule

batch_job = dg.define_asset_job(
    "evaluate_batch",
    selection=dg.AssetSelection.all() - dg.AssetSelection.assets(REPORT_KEY, ROUTING_SUITE_KEY),
    description="Every per-batch stage for a range of batch partitions (one or many).",
)
report_job = dg.define_asset_job(
    "evaluation_report_job", selection=dg.AssetSelection.assets(REPORT_KEY)
)


@dg.sensor(job=batch_job, minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING)
def new_drop_sensor(context: dg.SensorEvaluationContext,
                    pipeline: PipelineSettings) -> dg.SensorResult | dg.SkipReason:
    """Split each new or changed drop in the incoming folder into batches and run them:
    one run per drop (its batches as a partition range).

    Ships running, so a fresh ``dg dev`` registers and evaluates the sample drops in
    ``data/incoming`` within a minute: without it, no partition exists and "Materialize all"
    has nothing to run. A batch whose bytes were already evaluated (the same content hash as
    its last ingest, and summarized) is not rerun: re-dropping an identical file, or
    starting the UI on a store the CLI filled, costs nothing."""
    seen: dict[str, dict] = json.loads(context.cursor) if context.cursor else {}
    ordered = list(context.instance.get_dynamic_partitions(BATCHES_PARTITION))
    runs: list[tuple[list[str], str]] = []
    added: list[str] = []
    deleted: list[str] = []
    for drop in list_drops(pipeline.incoming_path):
        fingerprint = drop_fingerprint(drop)
        if seen.get(drop.name, {}).get("fingerprint") == fingerprint:
            continue
        manifests = split_drop(drop, pipeline.batches_path, pipeline.split_size,
                               pipeline.read_options().format_for(drop))
        keys = [m.partition_key for m in manifests]
        new = [k for k in keys if k not in ordered]
        added += new
        ordered += new
        deleted += [k for k in seen.get(drop.name, {}).get("keys", []) if k not in keys]
        todo = [k for k in keys if k in new
                or not already_evaluated(context.instance, pipeline.batches_path, k)]
        if todo:
            runs.append((todo, fingerprint))
        seen[drop.name] = {"fingerprint": fingerprint, "keys": keys}
        unchanged = f", {len(keys) - len(todo)} unchanged and evaluated" if len(todo) < len(
            keys) else ""
        context.log.info(f"{drop.name}: {len(keys)} batch(es) of up to "
                         f"{pipeline.split_size}{unchanged}")
    if not runs and not seen_changed(context.cursor, seen):
        return dg.SkipReason(f"no new drops in {pipeline.incoming_path}")
    ordered = [k for k in ordered if k not in deleted]
    run_requests = [batch_run_request(batches, f"{batches[0]}...{batches[-1]}:{fingerprint}")
                    for keys, fingerprint in runs for batches in batch_ranges(keys, ordered)]
    partition_requests: list = []
    if added:
        partition_requests.append(batches_partitions_def.build_add_request(added))
    if deleted:
        partition_requests.append(batches_partitions_def.build_delete_request(deleted))
    return dg.SensorResult(run_requests=run_requests,
                           dynamic_partitions_requests=partition_requests,
                           cursor=json.dumps(seen))


def seen_changed(cursor: str | None, seen: dict[str, dict]) -> bool:
    return (json.loads(cursor) if cursor else {}) != seen


def already_evaluated(instance: dg.DagsterInstance, batches_path: Path, partition: str
                      ) -> bool:
    """The batch file holds the bytes its last ingest read and the batch was summarized."""
    raw = _latest(instance, dg.AssetKey("raw_trajectories"), partition)
    ingested = raw.metadata.get("content_hash") if raw is not None else None
    if ingested is None or _latest(instance, SUMMARIES_KEY, partition) is None:
        return False
    try:
        path = find_batch(batches_path, partition)[0]
    except MissingBatchError:
        return False
    return content_hash(path) == ingested.value


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
    ).records
    return records[0].asset_materialization if records else None


def batch_state(instance: dg.DagsterInstance, pipeline: PipelineSettings, partition: str,
                assets: Sequence[dg.AssetKey]) -> BatchState:
    raw = _latest(instance, dg.AssetKey("raw_trajectories"), partition)
    ingested = raw.metadata.get("batch_fingerprint") if raw else None
    try:
        current = find_batch(pipeline.batches_path, partition)[1].fingerprint
    except MissingBatchError:
        current = None
    versions: dict[str, str | None] = {}
    for key in assets:
        mat = _latest(instance, key, partition)
        versions[key.to_user_string()] = ((mat.tags or {}).get("dagster/code_version")
                                          if mat else None)
    return BatchState(
        summarized=_latest(instance, dg.AssetKey("trajectory_summaries"), partition) is not None,
        ingested_fingerprint=getattr(ingested, "value", None),
        current_fingerprint=current,
        code_versions=versions,
    )


def expected_code_versions(graph) -> dict[dg.AssetKey, str]:
    """Current code version of every per-batch asset in the loaded definitions."""
    return {key: graph.get(key).code_version for key in graph.get_all_asset_keys()
            if graph.get(key).partitions_def == batches_partitions_def
            and graph.get(key).code_version}


def build_daily_schedule() -> dg.ScheduleDefinition:
    """A fresh schedule per Definitions: a schedule object keeps state from its evaluations."""

    @dg.schedule(job=batch_job, cron_schedule="0 3 * * *", execution_timezone="UTC",
                 default_status=dg.DefaultScheduleStatus.STOPPED)
    def daily_rerun_schedule(context: dg.ScheduleEvaluationContext, pipeline: PipelineSettings):
        """Every day, rerun batches that are missing, have new data, or changed code or judges:
        one run per reason and stretch of consecutive batches."""
        expected = expected_code_versions(context.repository_def.asset_graph)
        by_name = {k.to_user_string(): v for k, v in expected.items()}
        ordered = context.instance.get_dynamic_partitions(BATCHES_PARTITION)
        by_reason: dict[str, list[str]] = {}
        for key in ordered:
            reason = why_stale(batch_state(context.instance, pipeline, key, list(expected)),
                               by_name)
            if reason:
                by_reason.setdefault(reason, []).append(key)
        gone = by_reason.pop(BATCH_FILE_GONE, [])
        if gone:
            context.log.warning(
                f"skipped {len(gone)} batch(es) whose batch file is gone under "
                f"{pipeline.batches_path}: {', '.join(gone)}; remove them with "
                f"`eval-pipeline forget {' '.join(gone)}`")
        day = f"{context.scheduled_execution_time:%Y%m%d}"
        requests = [batch_run_request(batches, f"{batches[0]}...{batches[-1]}:{day}",
                                      {"eval_pipeline/rerun_reason": reason})
                    for reason, keys in by_reason.items()
                    for batches in batch_ranges(keys, ordered)]
        skipped = f"; skipped {len(gone)} batch(es) whose batch file is gone" if gone else ""
        return requests or dg.SkipReason(f"every batch is up to date{skipped}")

    return daily_rerun_schedule


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, monitored_jobs=[batch_job],
                      request_job=report_job,
                      default_status=dg.DefaultSensorStatus.STOPPED)
def report_after_batch_sensor(context: dg.RunStatusSensorContext) -> dg.RunRequest:
    """Refresh the cross-batch report whenever a batch run succeeds."""
    return dg.RunRequest(run_key=f"report:{context.dagster_run.run_id}")
