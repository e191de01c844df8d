"""The ``steps`` column as the stage tables hold it: Arrow, not Python dicts (#12.1).

Every table that has a ``steps`` column holds it as ``pd.ArrowDtype(STEPS_ARROW_TYPE)``:
one ``list<struct>`` in Arrow memory, which the compiled stages read and write without
building a Python object per step, and which the IO manager writes to Parquet (and reads
back) without converting. Python code that needs the steps still gets, per trajectory,
exactly the list of dicts ``steps_to_rows`` makes (iteration, ``.tolist()``, ``.iloc``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import pyarrow as pa

from eval_pipeline.models import STEPS_ARROW_TYPE

STEPS_DTYPE = pd.ArrowDtype(STEPS_ARROW_TYPE)
"""The dtype of every ``steps`` column."""


def steps_array(values: pa.Array | pa.ChunkedArray | Iterable[Iterable[Mapping[str, Any]]]
                ) -> pa.ChunkedArray:
    """``values`` as one chunked array of :data:`STEPS_ARROW_TYPE`: Arrow arrays are cast
    (a table written before the type was fixed has ``null`` fields where a batch had no
    value), Python step rows converted."""
    if isinstance(values, pa.ChunkedArray | pa.Array):
        array = values if values.type == STEPS_ARROW_TYPE else values.cast(STEPS_ARROW_TYPE)
    else:
        array = pa.array(list(values), type=STEPS_ARROW_TYPE)
    return array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])


def as_steps_column(column: pd.Series) -> pd.Series:
    """``column`` with the steps dtype; the same object when it has it already, so calling
    this on every table a stage hands on costs nothing once producers make Arrow steps."""
    if column.dtype == STEPS_DTYPE:
        return column
    if isinstance(column.dtype, pd.ArrowDtype):
        values: Any = column.array.__arrow_array__()
    else:
        values = column.tolist()
    return pd.Series(pd.arrays.ArrowExtensionArray(steps_array(values)), index=column.index,
                     name=column.name, copy=False)


def with_arrow_steps(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``steps`` column (if any) as :data:`STEPS_DTYPE`."""
    if "steps" not in frame.columns or frame["steps"].dtype == STEPS_DTYPE:
        return frame
    out = frame.copy(deep=False)
    out["steps"] = as_steps_column(frame["steps"])
    return out
