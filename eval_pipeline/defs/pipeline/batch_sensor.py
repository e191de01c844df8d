"""The sensor that notices a provider batch has ended and requests the run that reads it.

Batch-mode judges (#18) never keep a worker waiting: the run that submits a wave ends with
the judge's partitions pending (tag ``eval_pipeline/batch=pending``, an observation on the
judge's asset). This sensor asks the provider about every batch in flight (through the
SDK, via the judge's resource and its EnvVar key) and, for each batch that has ended,
requests one run over the job's partitions selecting the judge's asset and everything
downstream of it (not the cross-batch report, which report_after_batch_sensor refreshes).
That run collects the results, submits the next wave if the context chain needs one (then
this repeats), or materializes the judgments and their downstream.

A sensor, not a polling loop inside an asset: a run that sleeps for hours holds a worker,
a run-queue slot and the judge pool for nothing, and dies with its process; the ledger
plus a sensor survive restarts, and ``run_key`` (one per ended provider batch) makes each
batch's pickup requested exactly once however often the sensor ticks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import dagster as dg

from eval_pipeline.defs.pipeline.assets.judging import (
    BATCH_TAG,
    judgment_asset_key,
    resource_key,
)
from eval_pipeline.defs.pipeline.automation import REPORT_KEY, batch_job
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION, range_tags
from eval_pipeline.defs.pipeline.resources import poll_batches
from eval_pipeline.judges.config import JudgeConfig

MIN_INTERVAL_S = 5


def collect_run_request(instance: dg.DagsterInstance, selection: Sequence[dg.AssetKey],
                        partitions: Sequence[str], run_key: str, judge: str
                        ) -> dg.RunRequest:
    """One run over ``partitions`` (a contiguous range in the instance's order, as the
    submitting run had) materializing ``selection``."""
    ordered = instance.get_dynamic_partitions(BATCHES_PARTITION)
    keys = sorted(partitions, key=lambda k: ordered.index(k) if k in ordered else len(ordered))
    tags = {BATCH_TAG: "collect", f"{BATCH_TAG}/judge": judge}
    if len(keys) == 1:
        return dg.RunRequest(run_key=run_key, partition_key=keys[0],
                             asset_selection=list(selection), tags=tags)
    return dg.RunRequest(run_key=run_key, asset_selection=list(selection),
                         tags={**range_tags(keys), **tags})


def build_batch_results_sensors(configs: Sequence[JudgeConfig]) -> list[dg.SensorDefinition]:
    """``batch_results_sensor`` when any judge runs in batch mode (none otherwise: a
    pipeline without one polls nobody)."""
    batch_judges = [c for c in configs if c.mode == "batch"]
    if not batch_judges:
        return []
    interval = max(MIN_INTERVAL_S, int(min(c.batch_poll_s for c in batch_judges)))

    @dg.sensor(job=batch_job, minimum_interval_seconds=interval,
               default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={resource_key(c) for c in batch_judges})
    def batch_results_sensor(context: dg.SensorEvaluationContext, **_resources: object
                             ) -> dg.SensorResult | dg.SkipReason:
        """Poll the providers' batches in flight; when one has ended, request the run that
        collects it and materializes the judgments and everything downstream.

        (The judge resources are read from ``context.resources``; a direct call also
        passes them as keyword arguments, which ``_resources`` takes.)"""
        repository = context.repository_def
        if repository is None:
            return dg.SkipReason("no repository to resolve the judges' downstream assets")
        graph = repository.asset_graph
        requests: list[dg.RunRequest] = []
        for config in batch_judges:
            resource = getattr(context.resources, resource_key(config))
            ended = asyncio.run(poll_batches(resource))
            key = judgment_asset_key(config)
            selection = sorted(dg.AssetSelection.assets(key).downstream().resolve(graph)
                               - {REPORT_KEY}, key=lambda k: k.to_user_string())
            for job, (partitions, batch_ids) in ended.items():
                context.log.info(f"judge {config.name!r}: batch {', '.join(batch_ids)} "
                                 f"ended; requesting the run for {len(partitions)} batch(es)")
                requests.append(collect_run_request(
                    context.instance, selection, partitions,
                    f"batch-collect:{job}:{batch_ids[-1]}", config.name))
        if not requests:
            return dg.SkipReason("no provider batch has ended")
        return dg.SensorResult(run_requests=requests)

    return [batch_results_sensor]
