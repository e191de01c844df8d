"""A part's integer and boolean columns holding a null, which decide their pandas dtype
when the batches are read as one table: found from the footer's statistics when the writer
kept them, and from the columns themselves when it did not (the IO manager writes none)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eval_pipeline.defs.pipeline.io_manager import PARQUET_OPTIONS
from eval_pipeline.exports.tables import open_part

TABLE = pa.table({
    "a": pa.array([1, None, 3], pa.int64()),
    "b": pa.array([1, 2, 3], pa.int64()),
    "c": pa.array([True, None, False], pa.bool_()),
    "d": pa.array([True, False, True], pa.bool_()),
    "e": pa.array([None, None, None], pa.int32()),
    "text": pa.array(["x", None, "z"], pa.string()),  # not an integer or boolean column
    "f": pa.array([0.5, None, 1.0], pa.float64()),
})


@pytest.mark.parametrize("options", [PARQUET_OPTIONS, {}, {"write_statistics": ["a", "c"]}],
                         ids=["as the IO manager writes", "pyarrow's defaults",
                              "some statistics"])
def test_nulls_of_integer_and_boolean_columns(tmp_path: Path, options: dict) -> None:
    path = tmp_path / "b01.parquet"
    pq.write_table(TABLE, path, row_group_size=2, **options)
    part = open_part(path, "b01")
    assert part is not None
    assert part.nulls == {"a", "c", "e"}
    assert part.rows == 3


def test_a_missing_file_is_no_part(tmp_path: Path) -> None:
    assert open_part(tmp_path / "absent.parquet", "absent") is None
