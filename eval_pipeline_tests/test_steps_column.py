"""The steps column's one Arrow type: conversion is lossless and idempotent."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from eval_pipeline.models import STEPS_ARROW_TYPE, Step, steps_to_rows
from eval_pipeline.steps_column import STEPS_DTYPE, as_steps_column, with_arrow_steps

ROWS = steps_to_rows([
    Step(kind="thought", content="plan", start=0, end=4),
    Step(kind="tool_call", content="<search_tool>q</search_tool>", start=4, end=32,
         tool_name="search_tool", tool_type="search_tool", tool_input="q",
         tool_call_id="c1", turn=0, label=-1.0),
])


def test_python_rows_round_trip_exactly() -> None:
    frame = pd.DataFrame({"trajectory_id": ["a", "b"], "steps": [ROWS, []]})
    arrow = with_arrow_steps(frame)
    assert arrow["steps"].dtype == STEPS_DTYPE
    assert arrow["steps"].tolist() == [ROWS, []]
    assert next(iter(arrow["steps"])) == ROWS
    assert frame["steps"].dtype == object  # the input frame is left as it was


def test_inferred_parquet_type_is_cast() -> None:
    """A table written before the type was fixed: all-None fields were inferred as null."""
    inferred = pa.Table.from_pandas(pd.DataFrame({"steps": [ROWS[:1]]}))["steps"]
    assert inferred.type != STEPS_ARROW_TYPE
    column = as_steps_column(pd.Series(pd.arrays.ArrowExtensionArray(inferred)))
    assert column.dtype == STEPS_DTYPE
    assert column.tolist() == [ROWS[:1]]


def test_arrow_steps_are_kept_as_they_are() -> None:
    arrow = with_arrow_steps(pd.DataFrame({"steps": [ROWS]}))
    assert with_arrow_steps(arrow) is arrow
    column = arrow["steps"]
    assert as_steps_column(column) is column
