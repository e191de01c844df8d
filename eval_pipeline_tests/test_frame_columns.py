"""The column helpers read what ``frame[name]`` reads, on every dtype the tables hold:
their arrays, and Python values equal to ``Series.tolist()`` in value and type (#12.2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from eval_pipeline.frame_columns import (
    TEXT_DTYPE,
    array_values,
    column_array,
    column_dtypes,
    column_values,
    select_columns,
    series_values,
)
from eval_pipeline_tests import parquet_io
from eval_pipeline_tests.stage_digests import SAMPLES, stage_tables


def _frame() -> pd.DataFrame:
    return pd.DataFrame({
        "text": pd.array(["a", None, "ü"], dtype=TEXT_DTYPE),
        "na_text": pd.array([None, None, None], dtype=TEXT_DTYPE),
        "int": np.array([1, 2, 3], dtype=np.int64),
        "int32": np.array([1, 2, 3], dtype=np.int32),
        "float": [0.5, np.nan, 1e-300],
        "bool": [True, False, True],
        "masked": pd.array([1, None, 3], dtype="Int64"),
        "objects": ["a", 1, None],
        "lists": [[1], [], None],
        "arrow_list": pd.array([[1], [], None], dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
        "category": pd.Categorical(["x", "y", "x"]),
    })


def _same_values(got: list, expected: list) -> None:
    assert [type(v) for v in got] == [type(v) for v in expected]
    assert [repr(v) for v in got] == [repr(v) for v in expected]


def _check(frame: pd.DataFrame) -> None:
    for name in frame.columns:
        series = frame[name]
        array = column_array(frame, name)
        assert array.dtype == series.dtype, name
        if isinstance(array, np.ndarray):
            assert not len(array) or np.shares_memory(array, series.to_numpy()), name
        else:
            assert array is series.array or array.equals(series.array), name
        _same_values(column_values(frame, name), series.tolist())
        _same_values(series_values(series), series.tolist())
        _same_values(array_values(array), series.tolist())


def test_every_dtype_reads_as_frame_getitem() -> None:
    frame = _frame()
    _check(frame)
    _check(frame.iloc[[2, 0]])  # a taken frame's columns
    _check(parquet_io.round_trip(frame.drop(columns=["objects", "lists", "arrow_list",
                                                    "category"])))


def test_column_dtypes_are_frame_dtypes() -> None:
    """Names and dtype objects as ``frame.dtypes.items()`` pairs them, repeated names and a
    taken frame too, and every stage table through Parquet."""
    frame = _frame()
    twice = pd.concat([frame[["int", "text"]], frame[["int"]]], axis=1)
    path = sorted(SAMPLES.glob("*.jsonl"))[0]
    tables = [parquet_io.round_trip(t) for t in stage_tables(path).values()]
    for each in [frame, frame.iloc[[2, 0]], twice, frame[[]], *tables]:
        got = column_dtypes(each)
        assert got == list(each.dtypes.items())
        assert [type(t) for _n, t in got] == [type(t) for t in each.dtypes]


def test_missing_and_repeated_names_raise_key_error() -> None:
    frame = _frame()
    with pytest.raises(KeyError):
        column_array(frame, "absent")
    twice = pd.concat([frame[["int"]], frame[["int"]]], axis=1)
    with pytest.raises(KeyError):
        column_values(twice, "int")


def test_the_stage_tables_read_as_frame_getitem() -> None:
    path = sorted(SAMPLES.glob("*.jsonl"))[0]
    for table in stage_tables(path).values():
        _check(table)
        _check(parquet_io.round_trip(table))


def test_select_columns_is_frame_getitem_and_leaves_the_source_alone() -> None:
    frame = _frame().iloc[[2, 0]]  # an index that is not 0..n
    names = ["float", "text", "masked", "int"]
    selected = select_columns(frame, names)
    pd.testing.assert_frame_equal(selected, frame[names])
    selected.loc[2, "int"] = 99  # copy-on-write: the source keeps its values
    selected["text"] = "changed"
    assert frame.loc[2, "int"] == 3 and frame["text"].tolist()[1] == "a"
    path = sorted(SAMPLES.glob("*.jsonl"))[0]
    for table in stage_tables(path).values():
        names = list(table.columns[::2])
        pd.testing.assert_frame_equal(select_columns(table, names), table[names])
