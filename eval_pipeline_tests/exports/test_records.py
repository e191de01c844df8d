"""``records`` gives what it gave through ``frame[columns].to_dict("records")``, value for
value and type for type, on every dtype and on the run tables the exports read (#12)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from eval_pipeline.exports.common import records
from eval_pipeline.frame_columns import TEXT_DTYPE
from eval_pipeline_tests import parquet_io
from eval_pipeline_tests.exports.helpers import run_tables
from eval_pipeline_tests.stage_digests import SAMPLES, stage_tables


def _reference(table: pd.DataFrame, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """The code ``records`` replaced."""
    names = [c for c in table.columns if columns is None or c in columns]
    return [{str(k): None if (v is None or (isinstance(v, float) and v != v) or v is pd.NA)
             else v for k, v in row.items()} for row in table[names].to_dict("records")]


def _typed(rows: list[dict[str, Any]]) -> list[list[tuple[str, str, str]]]:
    return [[(k, type(v).__name__, repr(v)) for k, v in row.items()] for row in rows]


def _assert_same(table: pd.DataFrame, columns: list[str] | None = None) -> None:
    assert _typed(records(table, columns)) == _typed(_reference(table, columns))


def test_every_dtype() -> None:
    frame = pd.DataFrame({
        "text": pd.array(["a", None, "ü"], dtype=TEXT_DTYPE),
        "int": np.array([1, 2, 3], dtype=np.int64),
        "int32": np.array([1, 2, 3], dtype=np.int32),
        "float": [0.5, np.nan, 1e-300],
        "bool": [True, False, True],
        "masked": pd.array([1, None, 3], dtype="Int64"),
        "boolean": pd.array([True, None, False], dtype="boolean"),
        "objects": np.array([np.float64(1.5), np.int64(2), None], dtype=object),
        "more_objects": np.array([np.bool_(True), pd.NA, "x"], dtype=object),
        "dates": np.array(["2026-01-01", "NaT", "2026-11-28"], dtype="datetime64[ns]"),
        "durations": np.array([1, 2, 3], dtype="timedelta64[s]"),
        "lists": [[1], [], None],
        "arrow_list": pd.array([[1], [], None], dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
        "category": pd.Categorical(["x", "y", "x"]),
        3: [1, 2, 3],  # a column name that is not text
    })
    _assert_same(frame)
    _assert_same(frame, ["bool", "text", "absent"])
    _assert_same(frame.iloc[[2, 0]])
    assert records(frame.iloc[:0]) == []


def test_the_run_tables() -> None:
    """Every table a run's exports read: the stages', the judgments, the averaged scores,
    the summaries and the report, as built and as read back from Parquet."""
    for path in sorted(SAMPLES.glob("*.jsonl"))[:3]:
        for table in [*stage_tables(path).values(), *run_tables(path).values()]:
            _assert_same(table)
            _assert_same(parquet_io.round_trip(table))
