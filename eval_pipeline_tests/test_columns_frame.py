"""``ingest._columns_frame`` builds stage frames from arrays it makes itself: every kind of
column the stages hand it must come out as ``pd.DataFrame`` would make it (dtype and
values), and any other kind must still go through pandas' own inference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from eval_pipeline.ingest import _columns_frame

N = 4

KINDS: dict[str, Any] = {
    "none_scalar": None,
    "str_scalar": "batch-01",
    "bool_scalar": True,
    "int_scalar": 7,
    "float_scalar": 0.5,
    "nan_scalar": float("nan"),
    "huge_int_scalar": 1 << 70,
    "strings": ["a", "b", "", "é"],
    "strings_and_none": ["a", None, "c", None],
    "all_none": [None] * N,
    "bools": [True, False, True, True],
    "bools_and_none": [True, None, False, None],
    "ints": [1, -2, 3, 1 << 40],
    "huge_ints": [1, 1 << 64, 2, 3],
    "floats_list": [0.1, None, 0.3, 0.4],
    "mixed": [1, "a", None, 2.5],
    "dicts": [{"a": 1}, {}, None, {"b": [1]}],
    "numpy_int": np.arange(N, dtype=np.int64),
    "numpy_float": np.array([0.1, np.nan, 0.3, 0.4]),
    "series_str": pd.Series(["x", "y", None, "z"]),
    "arrow_strings": pd.arrays.ArrowStringArray(  # type: ignore[call-arg]
        pa.chunked_array([pa.array(["p", "q", None, "r"], pa.large_string())]),
        dtype=pd.Series([""]).dtype),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_column_is_what_pandas_makes(kind: str) -> None:
    columns = {"trajectory_id": ["t1", "t2", "t3", "t4"], kind: KINDS[kind]}
    names = ["trajectory_id", kind, "absent_is_not_asked"][:2]
    got = _columns_frame(dict(columns), names)
    want = pd.DataFrame(dict(columns), columns=names)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes)


def test_every_kind_together_and_frames_are_writable() -> None:
    columns = {"trajectory_id": ["t1", "t2", "t3", "t4"], **KINDS}
    names = list(columns)
    got = _columns_frame(dict(columns), names)
    pd.testing.assert_frame_equal(got, pd.DataFrame(dict(columns), columns=names),
                                  check_exact=True)
    readonly = np.arange(N, dtype=np.int64)
    readonly.flags.writeable = False
    frame = _columns_frame({"a": readonly, "b": "x"}, ["a", "b"])
    frame.loc[0, "a"] = 99  # a read-only view is copied, not handed to the frame
    assert readonly[0] == 0 and frame["a"].tolist() == [99, 1, 2, 3]
    assert isinstance(frame.index, pd.RangeIndex) and len(frame) == N


def test_empty_and_scalar_only_frames_as_pandas_makes_them() -> None:
    empty = _columns_frame({"a": [], "b": []}, ["a", "b"])
    pd.testing.assert_frame_equal(empty, pd.DataFrame({"a": [], "b": []}, columns=["a", "b"]))
    with pytest.raises(ValueError, match="scalar"):
        _columns_frame({"a": "x", "b": None}, ["a", "b"])
