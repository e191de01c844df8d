"""A DataFrame's columns as arrays and as Python values, without a Series per column.

pandas 3 builds a Series for every ``frame[name]`` (25-35 µs each on the 2-core machine).
The scoring functions read a few dozen columns per call, and the per-batch assets call them
thousands of times per run: the Series alone were an eighth of the summaries' time (#12.2).
``DataFrame._get_column_array`` is the accessor pandas' own methods use to reach a column's
array; it is private, so ``test_frame_columns`` holds these helpers to ``frame[name]`` on
every dtype the tables hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

TEXT_DTYPE = pd.StringDtype("pyarrow", na_value=np.nan)
"""pandas' own text type (``str``), which the pipeline's text columns have."""


def column_array(frame: pd.DataFrame, name: str) -> Any:
    """``frame[name].array`` as pandas holds it (a numpy array for numpy dtypes): a missing
    name raises ``KeyError`` as ``frame[name]`` does; a name held by several columns too
    (``frame[name]`` would be a frame, not a column)."""
    loc = frame.columns.get_loc(name)
    if not isinstance(loc, int):
        raise KeyError(f"{name!r} names more than one column")
    return frame._get_column_array(loc)  # type: ignore[operator]  # private: not in the stubs


def array_values(array: Any) -> list[Any]:
    """``Series.tolist()`` of a column's array, the same values: pandas' text type from its
    Arrow data directly (pyarrow's own conversion to Python strings, its nulls then made
    the NaN pandas gives), in a quarter to a half of the time of pandas' ``to_numpy``
    (which masks the nulls over the whole array: 0.2 ms for a mostly empty column of 300
    rows) and a quarter of its ``tolist``."""
    if array.dtype != TEXT_DTYPE:
        return array.tolist()
    data = getattr(array, "_pa_array", None)  # private: the Arrow data pandas holds
    if not isinstance(data, pa.ChunkedArray):
        return array.to_numpy().tolist()
    values = data.to_numpy(zero_copy_only=False).tolist()
    if data.null_count:
        na = TEXT_DTYPE.na_value
        return [na if v is None else v for v in values]
    return values


def column_values(frame: pd.DataFrame, name: str) -> list[Any]:
    """``frame[name].tolist()`` (see :func:`column_array`, :func:`array_values`)."""
    return array_values(column_array(frame, name))


def series_values(column: pd.Series) -> list[Any]:
    """``column.tolist()``, through :func:`array_values` (for a Series already built)."""
    return array_values(column.array) if column.dtype == TEXT_DTYPE else column.tolist()


def column_dtypes(frame: pd.DataFrame) -> list[tuple[Any, Any]]:
    """``list(frame.dtypes.items())`` from the block manager's dtypes, without the Series
    ``frame.dtypes`` builds (60 against 150 µs for a table of 32 columns; the IO manager
    asks once or twice per table written, some 10,000 tables in a corpora run, #12.4)."""
    try:
        dtypes = frame._mgr.get_dtypes()
    except AttributeError:  # a pandas without the block manager
        return list(frame.dtypes.items())
    return list(zip(frame.columns.tolist(), dtypes.tolist(), strict=True))


def select_columns(frame: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """``frame[names]`` for names all present and unique, as ``reindex``: the same frame
    (values, dtypes, index; copy-on-write as any selection) in half the time of
    ``frame[names]``'s take over the columns (0.4 against 0.8 ms for a table of a batch, a
    few thousand selections per run in the exports and the table cache)."""
    return frame.reindex(columns=names)


def text_array(values: list[Any]) -> Any:
    """``pd.array(values, dtype=str)`` of Python strings (or None), made by pyarrow directly:
    pandas checks and converts every value first, a tenth of the summaries' time for their
    long texts. Anything else (a NaN, a number) goes through pandas, which converts it."""
    try:
        data = pa.array(values, pa.large_string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pd.array(values, dtype=TEXT_DTYPE)
    # pandas-stubs lag pandas 3 here: the constructor takes the dtype (its NaN flavour).
    return pd.arrays.ArrowStringArray(data, dtype=TEXT_DTYPE)  # type: ignore[call-arg]
