"""Metadata helpers shared by the assets: previews and score summaries for the UI."""

from __future__ import annotations

import json
from collections.abc import Sequence

import dagster as dg
import pandas as pd

PREVIEW_ROWS = 10
PREVIEW_CHARS = 80


def preview(df: pd.DataFrame, columns: Sequence[str] | None = None) -> dg.MetadataValue:
    """A markdown table of the first rows, long cells cut so the UI stays readable."""
    shown = df[[c for c in (columns or df.columns) if c in df.columns]].head(PREVIEW_ROWS)
    shown = shown.map(
        lambda v: (str(v)[:PREVIEW_CHARS] + "...") if isinstance(v, str)
        and len(v) > PREVIEW_CHARS else v
    )
    if shown.empty:
        return dg.MetadataValue.md("_empty_")
    return dg.MetadataValue.md(shown.to_markdown(index=False))


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
    for batch, values in metadata.items():
        context.add_asset_metadata(values, asset_key=asset_key or output, partition_key=batch)
    return dg.Output(frames, output_name=output or "result")
