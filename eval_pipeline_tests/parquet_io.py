"""Tables through Parquet the way the IO manager writes and reads them (#12.1).

``DataFrame.to_parquet`` of a table with Arrow ``steps`` records a dtype name that
``pd.read_parquet`` cannot parse back (pandas' limitation for nested Arrow types), and a
plain read would hand consumers Python steps where the pipeline hands them Arrow ones; so
tests that mean "as the assets get it" go through the IO manager's own conversions."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from eval_pipeline.defs.pipeline.io_manager import to_arrow
from eval_pipeline.defs.pipeline.table_cache import frame_from_arrow


def write(frame: pd.DataFrame, target: Path | io.BytesIO) -> None:
    pq.write_table(to_arrow(frame), target)


def read(source: Path | io.BytesIO, columns: Sequence[str] | None = None) -> pd.DataFrame:
    if isinstance(source, io.BytesIO):
        source.seek(0)
    present = set(pq.read_schema(source).names)
    if isinstance(source, io.BytesIO):
        source.seek(0)
    names = None if columns is None else [c for c in columns if c in present]
    return frame_from_arrow(pq.read_table(source, columns=names, use_pandas_metadata=True))


def round_trip(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """``frame`` written and read back in memory (only ``columns`` present, if given)."""
    buffer = io.BytesIO()
    write(frame, buffer)
    return read(buffer, columns)
