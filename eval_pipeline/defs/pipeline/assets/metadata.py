"""Metadata helpers shared by the assets: previews and score summaries for the UI."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd
import pyarrow.compute as pc
from dagster._core.execution.context.metadata_logging import (
    AssetMetadataHandle,
    OutputMetadataAccumulator,
)
from dagster._core.execution.context.system import StepExecutionContext
from pandas.api.extensions import ExtensionArray
from tabulate import tabulate

from eval_pipeline.frame_columns import TEXT_DTYPE, series_values
from eval_pipeline.score_changes import loads_json, metric_means_counts

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


def counts(values: pd.Series | ExtensionArray | np.ndarray | Sequence[object]
           ) -> dg.MetadataValue:
    """How many times each value occurs, as ``value_counts()`` gives them: the most frequent
    first, ties in order of first appearance, missing values (None, NaN) left out.

    ``values``: a Series, a column's array (:func:`eval_pipeline.frame_columns.column_array`)
    or a list. Text is counted without pandas' Series and Index around the count (0.8 % of
    a corpora run's CPU, #12.4): pandas' text type by Arrow's ``value_counts`` as pandas
    counts it, object values that are all text (or missing) by a ``Counter``, both in order
    of first appearance, then sorted by count as ``value_counts`` sorts (stable, so ties
    keep that order). Anything else goes to ``value_counts``.
    """
    array: Any = values.array if isinstance(values, pd.Series) else values
    pairs: list[tuple[Any, int]] | None = None
    listed: list[Any] | None = None
    if isinstance(array, ExtensionArray) and array.dtype == TEXT_DTYPE:
        tally = pc.value_counts(array.__arrow_array__())  # type: ignore[attr-defined]
        pairs = [(k, n) for k, n in zip(tally.field(0).to_pylist(),
                                        tally.field(1).to_pylist(), strict=True)
                 if k is not None]
    elif isinstance(values, (pd.Series, np.ndarray)):
        listed = values.tolist() if values.dtype == object else None
    elif isinstance(values, (list, tuple)):
        listed = list(values)
    if listed is not None:
        if not all(type(v) is str for v in listed):
            listed = [v for v in listed if not (v is None or (type(v) is float and v != v))]
        if all(type(v) is str for v in listed):
            pairs = list(Counter(listed).items())
    if pairs is None:
        series = values if isinstance(values, pd.Series) else pd.Series(array)
        return dg.MetadataValue.json({str(k): int(v)
                                      for k, v in series.value_counts().items()})
    return dg.MetadataValue.json(dict(sorted(pairs, key=itemgetter(1), reverse=True)))


def metric_means(scores: Iterable[object]) -> dict[str, float]:
    """Mean of each metric over rows whose ``scores`` JSON holds it, in order of first
    appearance (a metric only ever NaN: NaN).

    Through :func:`eval_pipeline.score_changes.metric_means_counts`, the frame's ``mean()``
    bit for bit without the frame (judgment_metadata 2.6 % and averaged_metadata 1.6 % of a
    corpora run's CPU, mostly frames, #12.4); a value that is not a number goes to pandas.
    """
    values = series_values(scores) if isinstance(scores, pd.Series) else scores
    rows = [loads_json(s) for s in values if s and s != "{}"]
    stats = metric_means_counts(rows) if all(type(r) is dict for r in rows) else None
    if stats is not None:
        return {str(k): round(mean, 4) for k, (mean, _) in stats.items()}
    frame = pd.DataFrame(rows)
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
