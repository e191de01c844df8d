"""#12.5: the index of a partitioned table answers for the partitions it holds, and only
while their files are the ones it indexed."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
from upath import UPath

from eval_pipeline.defs.pipeline.partition_index import read_index, update_index

COLUMNS = ["score", "label"]


def _write(folder: Path, key: str, frame: pd.DataFrame) -> UPath:
    path = UPath(folder / f"{key}.parquet")
    frame.to_parquet(path.path, index=False)
    return path


def _frame(score: float) -> pd.DataFrame:
    return pd.DataFrame({"score": [score, None], "label": ["a", "b"], "big": ["x" * 100] * 2})


def test_index_answers_for_written_partitions_in_the_order_asked(tmp_path: Path) -> None:
    index = UPath(tmp_path / "_index" / "t.parquet")
    frames = {"b1": _frame(0.5), "b2": _frame(0.25)}
    files = {k: _write(tmp_path, k, f) for k, f in frames.items()}
    update_index(index, frames, COLUMNS, files)
    frames3 = {"b3": _frame(1.0)}
    files |= {"b3": _write(tmp_path, "b3", frames3["b3"])}
    update_index(index, frames3, COLUMNS, files)
    found, stale = read_index(index, ["b3", "b1", "b2", "b4"], files, COLUMNS)
    assert list(found) == ["b3", "b1", "b2"] and stale == ["b4"]
    for key in {**frames, **frames3}:
        pd.testing.assert_frame_equal(found[key], pd.read_parquet(files[key].path,
                                                                  columns=COLUMNS))


def test_rewritten_partition_replaces_its_rows(tmp_path: Path) -> None:
    index = UPath(tmp_path / "_index" / "t.parquet")
    files = {"b1": _write(tmp_path, "b1", _frame(0.5))}
    update_index(index, {"b1": _frame(0.5)}, COLUMNS, files)
    update_index(index, {"b1": _frame(0.75)}, COLUMNS, files)
    found, _ = read_index(index, ["b1"], files, COLUMNS)
    assert found["b1"]["score"].tolist()[0] == 0.75 and len(found["b1"]) == 2


def test_a_file_changed_or_gone_behind_the_index_is_not_answered_for(tmp_path: Path) -> None:
    index = UPath(tmp_path / "_index" / "t.parquet")
    frames = {"b1": _frame(0.5), "b2": _frame(0.25)}
    files = {k: _write(tmp_path, k, f) for k, f in frames.items()}
    update_index(index, frames, COLUMNS, files)
    _write(tmp_path, "b1", _frame(0.9))  # written by other code: the index is behind
    stat = os.stat(files["b1"].path)
    os.utime(files["b1"].path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000))
    Path(files["b2"].path).unlink()
    found, stale = read_index(index, ["b1", "b2"], files, COLUMNS)
    assert found == {} and stale == ["b1", "b2"]


def test_no_index_yet_means_every_partition_from_its_file(tmp_path: Path) -> None:
    files = {"b1": _write(tmp_path, "b1", _frame(0.5))}
    found, stale = read_index(UPath(tmp_path / "_index" / "t.parquet"), ["b1"], files)
    assert found == {} and stale == ["b1"]
