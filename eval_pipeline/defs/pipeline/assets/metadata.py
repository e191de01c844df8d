"""Metadata helpers shared by the assets: previews and score summaries for the UI."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import dagster as dg
import pandas as pd
from dagster._core.execution.context.metadata_logging import (
    AssetMetadataHandle,
    OutputMetadataAccumulator,
)
from dagster._core.execution.context.system import StepExecutionContext
from tabulate import tabulate

PREVIEW_ROWS = 10
PREVIEW_CHARS = 80
# Where a step keeps the metadata it will put on each materialization (Dagster 1.13).
_ACCUMULATOR = "_metadata_accumulator"


def _cut(value: object) -> object:
    if isinstance(value, str) and len(value) > PREVIEW_CHARS:
        return value[:PREVIEW_CHARS] + "..."
    return value


def preview(df: pd.DataFrame, columns: Sequence[str] | None = None) -> dg.MetadataValue:
    """A markdown table of the first rows, long cells cut so the UI stays readable.

    Rendered by tabulate from the first rows' values, as ``DataFrame.to_markdown`` renders
    a frame, without the frame copies and the per-column mapping around it: a preview per
    batch and asset was half the metadata's CPU in a corpora run (#12.4); the text is the
    same on every table of that run (a None in an object column now shows blank, not nan).
    """
    names = [c for c in (columns or df.columns) if c in df.columns]
    if not len(df) or not names:
        return dg.MetadataValue.md("_empty_")
    # Each column's first values as ``Series.head().tolist()`` gives them (tolist of the
    # backing array), without a new frame per preview (a third of its CPU).
    values = [[_cut(v) for v in df[name]._values[:PREVIEW_ROWS].tolist()] for name in names]
    return dg.MetadataValue.md(tabulate(list(zip(*values, strict=True)),
                                        headers=[str(n) for n in names], tablefmt="pipe"))


def counts(series: pd.Series) -> dg.MetadataValue:
    return dg.MetadataValue.json({str(k): int(v) for k, v in series.value_counts().items()})


def metric_means(scores: pd.Series) -> dict[str, float]:
    """Mean of each metric over rows whose ``scores`` JSON holds it."""
    frame = pd.DataFrame([json.loads(s) for s in scores if s and s != "{}"])
    return {str(k): round(float(v), 4) for k, v in frame.mean().items()} if len(frame) else {}


def per_batch_output(context: dg.AssetExecutionContext, frames: dict[str, pd.DataFrame],
                     metadata: dict[str, dict[str, object]], output: str | None = None,
                     asset_key: dg.AssetKey | str | None = None) -> dg.Output:
    """The run's tables, one per batch, each batch's metadata on its own materialization.

    ``output`` names the output of a multi-asset (``asset_key`` its key, if not the same);
    None for a single asset.
    """
    step = context.op_execution_context.get_step_execution_context()
    add_batches_metadata(step, metadata, asset_key or output, set(context.partition_keys))
    return dg.Output(frames, output_name=output or "result")


def add_batch_metadata(step: StepExecutionContext, metadata: Mapping[str, Any],
                       asset_key: dg.AssetKey | str | None, batch: str,
                       targeted: Collection[str]) -> None:
    """Metadata for one batch's materialization (see :func:`add_batches_metadata`)."""
    add_batches_metadata(step, {batch: metadata}, asset_key, targeted)


def add_batches_metadata(step: StepExecutionContext,
                         by_batch: Mapping[str, Mapping[str, Any]],
                         asset_key: dg.AssetKey | str | None,
                         targeted: Collection[str]) -> None:
    """Metadata for each batch's materialization, as ``add_asset_metadata(partition_key=)``
    records it, without its per-call lookups and in one update for all batches.

    Dagster checks the key against the run's range on every call by asking the instance
    whether the range ends exist and listing every batch it knows: three SQLite queries,
    each a new connection. Once per batch and asset, that was a quarter of a CLI run on the
    corpora (452 batches), and it grew with the batches registered in the instance. The run's
    batches are known (``targeted``); the checks Dagster makes are kept, against them. And
    each call rebuilt the step's whole metadata map (every batch's so far), quadratic in the
    batches of a run; here it is rebuilt once per asset.
    """
    assets_def = step.assets_def
    if assets_def is None:
        raise dg.DagsterInvariantViolationError("batch metadata outside an asset step")
    key = dg.AssetKey.from_coercible(asset_key) if asset_key else assets_def.key
    if key not in assets_def.keys:
        raise dg.DagsterInvariantViolationError(
            f"metadata for {key.to_user_string()}, which this step does not materialize")
    stray = [batch for batch in by_batch if batch not in targeted]
    if stray:
        raise dg.DagsterInvariantViolationError(
            f"metadata for batch {stray[0]!r}, which this run does not target")
    accumulator = getattr(step, _ACCUMULATOR, None)
    if not isinstance(accumulator, OutputMetadataAccumulator):
        for batch, metadata in by_batch.items():  # a Dagster that keeps it elsewhere
            step.add_asset_metadata(metadata, asset_key=key, partition_key=batch)
        return
    merged = dict(accumulator.per_output_metadata)
    for batch, metadata in by_batch.items():
        handle = AssetMetadataHandle(asset_key=key, partition_key=batch)
        merged[handle] = {**merged.get(handle, {}), **metadata}
    setattr(step, _ACCUMULATOR, OutputMetadataAccumulator(per_output_metadata=merged))
