"""Jobs, the new-drop sensor, the declarative daily catch-up and the report trigger."""


import json
from pathlib import Path

import dagster as dg

from eval_pipeline.defs.pipeline.conditions import CATCH_UP_SENSOR, REPORT_KEY
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


def build_catch_up_sensor() -> dg.AutomationConditionSensorDefinition:
    """Evaluates the conditions above every 30 s. Ships stopped, as the daily schedule it
    replaces did: with LLM judges a catch-up after a rubric change costs a rescoring of
    every batch, which a user turns on deliberately (Automation tab)."""
    return dg.AutomationConditionSensorDefinition(
        CATCH_UP_SENSOR,
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=30,
        run_tags={"eval_pipeline/source": "catch_up"},
        description=(
            "Declarative automation for the pipeline's assets. At 03:00 UTC it requests "
            "every batch whose stages are missing, whose code version changed (a judge's "
            "model or settings, a rubric, a prompt template) or whose upstream changed since "
            "their last run, then evaluation_report; between ticks, the stages after one "
            "re-materialized by hand follow at once (eager). Each asset's Automation tab "
            "says which part of its condition was true for which batch. New drops are "
            "new_drop_sensor's."),
    )


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, monitored_jobs=[batch_job],
                      request_job=report_job,
                      default_status=dg.DefaultSensorStatus.STOPPED)
def report_after_batch_sensor(context: dg.RunStatusSensorContext) -> dg.RunRequest:
    """Refresh the cross-batch report whenever a batch run succeeds."""
    return dg.RunRequest(run_key=f"report:{context.dagster_run.run_id}")
