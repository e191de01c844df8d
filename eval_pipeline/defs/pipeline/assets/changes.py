"""Score statistics and "why did this change" metadata on the scoring assets' materializations.

Each materialization of ``judgments/*``, ``averaged_scores``, ``trajectory_summaries`` and
``evaluation_report`` carries numeric values per metric (mean, count) and a failure rate, so
the asset page plots them across materializations, and, against the previous materialization
of the same partition, the mean change, how many rows moved by more than 0.1, the largest
movers, and which upstream version differs (``changed_upstream``): the batch's content hash,
the parser, the rubric/template version, a judge's provider, model or parameters.

Cheap by construction: no extra events (the values ride on the materialization the asset
already records), one instance query for the previous materialization and one for the
batch's data version per batch, and the previous scores are read from the previous Parquet
(only the key and score columns) before the new one overwrites it. The computations are in
:mod:`eval_pipeline.score_changes`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import dagster as dg
import pandas as pd
from dagster import DagsterEventType
from upath import UPath

from eval_pipeline.frame_columns import column_values
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.rubrics import all_templates_version
from eval_pipeline.score_changes import (
    combined_hash,
    compare_scores,
    failure_rate,
    judge_versions,
    metric_stats,
    row_scores,
    version_changes,
)

VERSIONS_KEY = "upstream_versions"
RAW_KEY = dg.AssetKey("raw_trajectories")
# tool_type too: a trajectory's category assessments share clip_index -1 and differ by it.
CLIP_KEYS = ("trajectory_id", "clip_index", "evaluation_kind", "tool_type")


_PREFETCHED: ContextVar[Mapping[tuple[dg.AssetKey, str], dg.AssetMaterialization | None]
                       | None] = ContextVar("eval_pipeline_latest_materializations", default=None)


_RUN_RECORDS: dict[str, dict[int, dg.AssetMaterialization]] = {}
"""The materializations :func:`prefetch` fetched in the current run, by storage id (one
run's at a time): a run's later steps ask again for the same ones (each scoring step asks
for the batches' raw_trajectories, which the run itself wrote), and deserializing them was
a third of the metadata's CPU in a corpora run (#12.4). A stored event never changes, and a
run's storage ids are not reused while it runs."""


def prefetch(instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey],
             partitions: Sequence[str], run_id: str | None = None
             ) -> dict[tuple[dg.AssetKey, str], dg.AssetMaterialization | None]:
    """The latest materialization of each of ``keys`` x ``partitions`` in two queries per
    key (each partition's latest storage id, then those records), not one per batch.
    With ``run_id`` (the asking step's run), records this run fetched before are not
    fetched again (:data:`_RUN_RECORDS`)."""
    if run_id is not None and run_id not in _RUN_RECORDS:
        _RUN_RECORDS.clear()
        _RUN_RECORDS[run_id] = {}
    known = _RUN_RECORDS.get(run_id, {}) if run_id is not None else {}
    found: dict[tuple[dg.AssetKey, str], dg.AssetMaterialization | None] = {}
    for key in keys:
        ids = instance.event_log_storage.get_latest_storage_id_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION, set(partitions))
        wanted = [i for i in ids.values() if i not in known]
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, storage_ids=wanted),
            limit=len(wanted)).records if wanted else []
        by_id: dict[int, dg.AssetMaterialization | None] = {
            i: known[i] for i in ids.values() if i in known}
        by_id.update({r.storage_id: r.asset_materialization for r in records})
        if run_id is not None:
            known.update({i: m for i, m in by_id.items() if m is not None})
        for partition in partitions:
            storage_id = ids.get(partition)
            found[(key, partition)] = by_id.get(storage_id) if storage_id else None
    return found


@contextmanager
def using(found: Mapping[tuple[dg.AssetKey, str], dg.AssetMaterialization | None]
          ) -> Iterator[None]:
    """Within the block, :func:`latest_materialization` answers from ``found`` (see
    :func:`prefetch`) where it can (#12.4). For metadata an asset computes before it yields
    its outputs: nothing it materializes in the block is seen, as with a query per batch."""
    token = _PREFETCHED.set(found)
    try:
        yield
    finally:
        _PREFETCHED.reset(token)


@contextmanager
def prefetched(instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey],
               partitions: Sequence[str], run_id: str | None = None) -> Iterator[None]:
    """:func:`prefetch` and :func:`using` in one block."""
    with using(prefetch(instance, keys, partitions, run_id)):
        yield


def latest_materialization(instance: dg.DagsterInstance, key: dg.AssetKey,
                           partition: str | None = None) -> dg.AssetMaterialization | None:
    known = _PREFETCHED.get()
    if known is not None and partition is not None and (key, partition) in known:
        return known[(key, partition)]
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key,
                              asset_partitions=[partition] if partition else None),
        limit=1).records
    return records[0].asset_materialization if records else None


def _previous_table(mat: dg.AssetMaterialization | None, columns: Sequence[str]
                    ) -> pd.DataFrame | None:
    """The previous materialization's table (only ``columns``), from its recorded path;
    None when it is gone (another store, deleted) or lacks a column."""
    path = mat.metadata.get("path") if mat is not None else None
    if path is None:
        return None
    try:
        with UPath(str(path.value)).open("rb") as fh:
            return pd.read_parquet(fh, columns=list(columns))
    except (OSError, ValueError, KeyError):
        return None


def upstream_versions(instance: dg.DagsterInstance, batch: str | None,
                      judges: Sequence[JudgeConfig]) -> dict[str, str]:
    """The versions a scored table depends on: the batch's content (the data version of its
    raw_trajectories, a hash of the batch file), the parser, the templates, each judge."""
    from eval_pipeline.defs.pipeline.assets.ingest import RAW_VERSION

    versions = {"parser_version": RAW_VERSION, "template_version": all_templates_version()}
    if batch is not None:
        raw = latest_materialization(instance, RAW_KEY, batch)
        content = raw.metadata.get("content_hash") if raw is not None else None
        versions["batch_data"] = (str(content.value) if content is not None
                                  else "(not ingested)" if raw is None else "(unknown)")
    for config in judges:
        versions.update(judge_versions(config))
    return versions


def ok_scores(table: pd.DataFrame) -> tuple[list[object], list[object]]:
    """The table's statuses, and the ``scores`` of its ok rows, as Python values.

    What ``table[table["status"] == "ok"]["scores"]`` holds, without the mask copying the
    table's every column (some 30, long texts among them) to read one: that and the Series
    around it were much of the per-batch score metadata's CPU in a corpora run (#12.4).
    """
    statuses = column_values(table, "status")
    scores = column_values(table, "scores")
    return statuses, [s for s, status in zip(scores, statuses, strict=True) if status == "ok"]


def stats_metadata(scores: Iterable[object] | None,
                   status: pd.Series | Sequence[object] | None = None) -> dict[str, object]:
    """Numeric mean per metric (``score/<metric>/mean``, which the Plots tab draws), the
    counts in one ``metric_counts`` entry, and the failure rate.

    One entry per count would put a judge with the assessments on (some 40 metrics) past
    about 100 entries, and the UI shows an asset's first hundred or so only: the score-change
    entries, which come last, were missing from the page (the browser test saw it)."""
    out: dict[str, object] = {}
    counts: dict[str, int] = {}
    for metric, (mean, count) in metric_stats(scores if scores is not None else []).items():
        out[f"score/{metric}/mean"] = dg.MetadataValue.float(mean)
        counts[metric] = int(count)
    out["metric_counts"] = dg.MetadataValue.json(counts)
    if status is not None:
        rate = failure_rate(status)
        out["failure_rate"] = (dg.MetadataValue.float(rate) if rate is not None
                               else dg.MetadataValue.null())
    return out


def change_metadata(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None,
                    table: pd.DataFrame, keys: Sequence[str], score: str,
                    versions: Mapping[str, str]) -> dict[str, object]:
    """The delta against the previous materialization of ``key`` (same partition) and which
    upstream version differs. Call before the new table is written."""
    previous = latest_materialization(instance, key, partition)
    recorded = previous.metadata.get(VERSIONS_KEY) if previous is not None else None
    changes = version_changes(getattr(recorded, "value", None), versions)
    out: dict[str, object] = {
        VERSIONS_KEY: dg.MetadataValue.json(dict(versions)),
        "changed_upstream_count": len(changes),
        "changed_upstream": dg.MetadataValue.md(
            "\n".join(f"- {c}" for c in changes) if changes
            else "_nothing upstream changed_" if previous is not None
            else "_first materialization_"),
    }
    old = _previous_table(previous, [*keys, score])
    if old is None:  # nothing to compare with: the new scores need not be keyed (#12.4)
        return out
    delta = compare_scores(row_scores(old, keys, score), row_scores(table, keys, score))
    if delta is None:
        return out
    out.update({
        "delta/mean_change": dg.MetadataValue.float(delta.mean_change)
        if delta.mean_change is not None else dg.MetadataValue.null(),
        "delta/compared": delta.compared,
        "delta/moved_over_0.1": delta.moved,
        "delta/added": delta.added,
        "delta/removed": delta.removed,
        "delta/movers": dg.MetadataValue.md(
            pd.DataFrame(delta.movers).to_markdown(index=False) if delta.movers
            else "_no score moved by more than 0.1_"),
    })
    return out


def judgment_changes(instance: dg.DagsterInstance, config: JudgeConfig, batch: str,
                     table: pd.DataFrame, batch_versions: Mapping[str, str]
                     ) -> dict[str, object]:
    """One judge's batch: per metric stats over ok rows, failure rate, delta, causes.

    The stats read the status and score columns as Python values (:func:`ok_scores`), not a
    masked copy of the table (this function was 2.0 % of a corpora run's CPU, #12.4)."""
    statuses, scores = ok_scores(table)
    own = {k: v for k, v in batch_versions.items()
           if not k.startswith("judge.") or k.startswith(f"judge.{config.name}.")}
    return {**stats_metadata(scores, statuses),
            **change_metadata(instance, dg.AssetKey(["judgments", config.name]), batch,
                              table, CLIP_KEYS, "scores", own)}


def averaged_changes(instance: dg.DagsterInstance, batch: str, table: pd.DataFrame,
                     judges: Sequence[JudgeConfig]) -> dict[str, object]:
    """The averages' batch, as :func:`judgment_changes` (2.7 % of a corpora run's CPU,
    mostly the stats, before they read plain columns, #12.4)."""
    statuses, scores = ok_scores(table)
    return {**stats_metadata(scores, statuses),
            **change_metadata(instance, dg.AssetKey("averaged_scores"), batch, table,
                              CLIP_KEYS, "mean_score",
                              upstream_versions(instance, batch, judges))}


def summary_changes(instance: dg.DagsterInstance, batch: str, table: pd.DataFrame,
                    judges: Sequence[JudgeConfig]) -> dict[str, object]:
    overall = table["overall_trajectory_score"]
    scored = overall.dropna()
    return {
        "score/overall/mean": dg.MetadataValue.float(round(float(scored.mean()), 4))
        if len(scored) else dg.MetadataValue.null(),
        "score/overall/count": len(scored),
        "failure_rate": dg.MetadataValue.float(round(1 - len(scored) / len(table), 4))
        if len(table) else dg.MetadataValue.null(),
        **change_metadata(instance, dg.AssetKey("trajectory_summaries"), batch, table,
                          ("trajectory_id",), "overall_trajectory_score",
                          upstream_versions(instance, batch, judges)),
    }


def report_changes(instance: dg.DagsterInstance, report: pd.DataFrame,
                   judges: Sequence[JudgeConfig]) -> dict[str, Any]:
    """The report's batches as rows: which batches' means moved, were added or removed."""
    versions = upstream_versions(instance, None, judges)
    batches = {str(b): "" for b in report["batch"] if b != "ALL"}
    versions["batches"] = f"{len(batches)} ({combined_hash(batches)[:8]})"
    return change_metadata(instance, dg.AssetKey("evaluation_report"), None, report,
                           ("batch",), "mean_overall_score", versions)
