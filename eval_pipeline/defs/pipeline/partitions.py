"""One dynamic partition per batch file (``demo0201``, ``demo0202`` ...), many per run.

Every per-batch asset has a single-run backfill policy: a backfill from the UI, a sensor tick
or the CLI evaluates a range of batches in one run (one judge scheduler, one run's fixed cost)
while each batch keeps its own Parquet file and materialization.
"""

from collections.abc import Sequence

import dagster as dg

from eval_pipeline.defs.pipeline.conditions import with_automation

BATCHES_PARTITION = "batches"

batches_partitions_def = dg.DynamicPartitionsDefinition(name=BATCHES_PARTITION)

HOW_BATCHES_ARE_MADE = (
    "Partitions: one per batch file. new_drop_sensor (on by default; Automation tab) splits "
    "each file copied into the incoming folder (data/incoming/ in the project) into "
    "`batches/<drop>/<drop>NN.jsonl` and registers one partition per batch; `eval-pipeline run "
    "FILE` does the same from the command line. A partition added by hand has no batch file "
    "and fails in one line saying so.")
"""Appended to every per-batch asset's description: how its partitions come to be, where a
new user looks first (the asset page) when the materialize dialog lists no partition."""
batches_backfill_policy = dg.BackfillPolicy.single_run()

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def batch_ranges(wanted: Sequence[str], ordered: Sequence[str],
                 per_run: int | None = None) -> list[list[str]]:
    """``wanted`` cut into runs: each run a contiguous stretch of ``ordered`` (the instance's
    partition order, which a range tag refers to) holding only wanted batches, at most
    ``per_run`` long (None: unbounded)."""
    chosen = set(wanted)
    runs: list[list[str]] = []
    current: list[str] = []
    for key in ordered:
        if key in chosen and (per_run is None or len(current) < per_run):
            current.append(key)
            continue
        if current:
            runs.append(current)
        current = [key] if key in chosen else []
    if current:
        runs.append(current)
    missing = chosen - {k for run in runs for k in run}
    if missing:
        raise ValueError(f"batches not registered as partitions: {sorted(missing)}")
    return runs


def range_tags(keys: Sequence[str]) -> dict[str, str]:
    """Tags that make a run of a partitioned job cover ``keys[0]...keys[-1]``."""
    return {RANGE_START_TAG: keys[0], RANGE_END_TAG: keys[-1]}


def batch_run_request(batches: Sequence[str], run_key: str,
                      tags: dict[str, str] | None = None) -> dg.RunRequest:
    """One run over ``batches`` (contiguous in the instance's order, see batch_ranges)."""
    if len(batches) == 1:
        return dg.RunRequest(partition_key=batches[0], run_key=run_key, tags=tags or {})
    return dg.RunRequest(run_key=run_key, tags={**range_tags(batches), **(tags or {})})


def with_partitions_note(spec: dg.AssetSpec) -> dg.AssetSpec:
    """Per-batch assets say, on their page, how their partitions come to be."""
    if spec.partitions_def != batches_partitions_def:
        return spec
    return spec.replace_attributes(
        description=f"{spec.description or ''}\n\n{HOW_BATCHES_ARE_MADE}".strip())


def described(assets: Sequence[dg.AssetsDefinition]) -> list[dg.AssetsDefinition]:
    """``assets`` with the partitions note and their automation condition (see
    :mod:`eval_pipeline.defs.pipeline.conditions`). Module-level assets must be replaced by
    their described copy where they are defined: dg's loader collects module attributes
    too, and the original beside its copy is a duplicate key."""
    return list(dg.map_asset_specs(
        lambda spec: with_automation(with_partitions_note(spec)), assets))
