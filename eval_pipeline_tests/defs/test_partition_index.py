"""#12.5: the index of a partitioned table answers for the partitions it holds, and only
while their files are the ones its entries were derived from; concurrent runs lose nothing."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pandas as pd
import pytest
from upath import UPath

from eval_pipeline.defs.pipeline.partition_index import (
    PARTITION,
    PartitionIndexer,
    read_index,
    table_path,
    update_index,
)
from eval_pipeline.defs.pipeline.table_cache import file_stamp

COLUMNS = ("score", "label")


def derive(frame: pd.DataFrame, partition: str) -> dict[str, pd.DataFrame]:
    """A small indexer: one summary row per partition, and the partition's rows."""
    return {"summary": pd.DataFrame({"rows": [len(frame)],
                                     "total": [float(frame["score"].sum())]}),
            "rows": frame[list(COLUMNS)]}


INDEXER = PartitionIndexer(columns=COLUMNS, derive=derive, marker="summary",
                           others=("rows",))


def _frame(score: float, n: int = 2) -> pd.DataFrame:
    return pd.DataFrame({"score": [score] * n, "label": ["a"] * n, "big": ["x" * 100] * n})


def _write(folder: Path, key: str, frame: pd.DataFrame) -> UPath:
    path = UPath(folder / f"{key}.parquet")
    frame.to_parquet(path.path, index=False)
    return path


def _index(index: UPath, frames: dict[str, pd.DataFrame], files: dict[str, UPath]) -> None:
    update_index(index, INDEXER, {k: derive(f, k) for k, f in frames.items()},
                 {k: file_stamp(files[k].path) for k in frames}, files)


def _rows(found, key: str) -> pd.DataFrame:
    rows = found.tables["rows"]
    return rows[rows[PARTITION] == key].drop(columns=[PARTITION]).reset_index(drop=True)


def test_index_answers_for_written_partitions(tmp_path: Path) -> None:
    index = UPath(tmp_path / "_index" / "t")
    frames = {"b1": _frame(0.5), "b2": _frame(0.25, 3)}
    files = {k: _write(tmp_path, k, f) for k, f in frames.items()}
    _index(index, frames, files)
    frames3 = {"b3": _frame(1.0)}
    files |= {"b3": _write(tmp_path, "b3", frames3["b3"])}
    _index(index, frames3, files)
    found = read_index(index, INDEXER, ["b3", "b1", "b2", "b4"], files)
    assert found.keys == ["b3", "b1", "b2", "b4"]
    assert found.answered == {"b1", "b2", "b3"} and found.stale == ["b4"]
    for key, frame in {**frames, **frames3}.items():
        pd.testing.assert_frame_equal(_rows(found, key), frame[list(COLUMNS)])
    summary = found.tables["summary"].set_index(PARTITION)
    assert summary.loc["b2", "rows"] == 3 and summary.loc["b3", "total"] == 2.0


def test_rewritten_partition_replaces_its_rows(tmp_path: Path) -> None:
    index = UPath(tmp_path / "_index" / "t")
    files = {"b1": _write(tmp_path, "b1", _frame(0.5))}
    _index(index, {"b1": _frame(0.5)}, files)
    files["b1"] = _write(tmp_path, "b1", _frame(0.75, 4))
    _index(index, {"b1": _frame(0.75, 4)}, files)
    found = read_index(index, INDEXER, ["b1"], files)
    assert _rows(found, "b1")["score"].tolist() == [0.75] * 4
    assert len(pd.read_parquet(table_path(index, "summary").path)) == 1


def test_a_file_changed_or_gone_behind_the_index_is_not_answered_for(tmp_path: Path) -> None:
    index = UPath(tmp_path / "_index" / "t")
    frames = {"b1": _frame(0.5), "b2": _frame(0.25), "b3": _frame(0.1)}
    files = {k: _write(tmp_path, k, f) for k, f in frames.items()}
    _index(index, frames, files)
    _write(tmp_path, "b1", _frame(0.9))  # written by other code: the index is behind
    stat = os.stat(files["b1"].path)
    os.utime(files["b1"].path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000))
    Path(files["b2"].path).unlink()
    found = read_index(index, INDEXER, ["b1", "b2", "b3"], files)
    assert found.stale == ["b1", "b2"] and found.answered == {"b3"}
    assert set(found.tables["rows"][PARTITION]) == {"b3"}


def test_no_index_yet_means_every_partition_from_its_file(tmp_path: Path) -> None:
    files = {"b1": _write(tmp_path, "b1", _frame(0.5))}
    found = read_index(UPath(tmp_path / "_index" / "t"), INDEXER, ["b1"], files)
    assert found.answered == set() and found.stale == ["b1"]


def test_an_entry_whose_file_was_rewritten_before_the_update_is_not_written(
        tmp_path: Path) -> None:
    """Another run rewrote the file between this run's write and its index update: this
    run's entry would describe a file that is gone, so it is not kept."""
    index = UPath(tmp_path / "_index" / "t")
    files = {"b1": _write(tmp_path, "b1", _frame(0.5))}
    stamp = file_stamp(files["b1"].path)
    os.replace(_write(tmp_path, "other", _frame(0.9)).path, files["b1"].path)
    update_index(index, INDEXER, {"b1": derive(_frame(0.5), "b1")}, {"b1": stamp}, files)
    found = read_index(index, INDEXER, ["b1"], files)
    assert found.stale == ["b1"]


def test_a_partition_whose_marker_was_not_written_is_stale(tmp_path: Path) -> None:
    """A crash between the tables of one update: the marker (written last) still holds
    the previous file's identity, the other table the new one's."""
    index = UPath(tmp_path / "_index" / "t")
    files = {"b1": _write(tmp_path, "b1", _frame(0.5))}
    _index(index, {"b1": _frame(0.5)}, files)
    marker = pd.read_parquet(table_path(index, "summary").path)
    files["b1"] = _write(tmp_path, "b1", _frame(0.75))
    _index(index, {"b1": _frame(0.75)}, files)
    marker.to_parquet(table_path(index, "summary").path, index=False)  # the old marker
    found = read_index(index, INDEXER, ["b1"], files)
    assert found.stale == ["b1"]


def _writer(folder: str, prefix: str, rounds: int) -> None:
    base = Path(folder)
    index = UPath(base / "_index" / "t")
    for r in range(rounds):
        keys = [f"{prefix}{r}_{i}" for i in range(3)]
        frames = {k: _frame(float(r)) for k in keys}
        files = {k: _write(base, k, f) for k, f in frames.items()}
        _index(index, frames, files)


def test_two_runs_updating_the_index_at_once_lose_nothing(tmp_path: Path) -> None:
    """Each update reads the index, replaces its partitions' rows and writes it back, under
    a file lock: two processes doing so at once keep each other's partitions."""
    context = multiprocessing.get_context("spawn")
    rounds = 25
    workers = [context.Process(target=_writer, args=(str(tmp_path), p, rounds))
               for p in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    keys = [f"{p}{r}_{i}" for p in "ab" for r in range(rounds) for i in range(3)]
    files = {k: UPath(tmp_path / f"{k}.parquet") for k in keys}
    found = read_index(UPath(tmp_path / "_index" / "t"), INDEXER, keys, files)
    assert found.stale == [] and found.answered == set(keys)
    assert len(found.tables["rows"]) == 2 * len(keys)


def test_an_object_store_index_is_trusted_without_file_checks() -> None:
    pytest.importorskip("fsspec")
    base = UPath("memory://index-test")
    files = {"b1": base / "b1.parquet"}
    with files["b1"].open("wb") as fh:
        _frame(0.5).to_parquet(fh, index=False)
    update_index(base / "_index", INDEXER, {"b1": derive(_frame(0.5), "b1")}, {"b1": None},
                 files)
    found = read_index(base / "_index", INDEXER, ["b1", "b2"], files)
    assert found.answered == {"b1"} and found.stale == ["b2"]


def test_stamped_rows_are_the_concat_of_each_partitions_stamped_rows() -> None:
    """#12.4: a run's index rows built in one concat equal the concat of each partition's
    stamped rows (empty ones left out unless all are), also with columns that differ
    between partitions and partitions without a file identity."""
    import numpy as np
    import pandas as pd

    from eval_pipeline.defs.pipeline.partition_index import _stamped, _with_stamp
    from eval_pipeline.defs.pipeline.table_cache import FileStamp

    def expected(frames, stamps):
        parts = [_with_stamp(f, p, stamps[p]) for p, f in frames]
        kept = [p for p in parts if len(p)] or parts[:1]
        return pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0]

    a = pd.DataFrame({"x": [1.5, np.nan], "y": ["u", None], "z": [True, False]})
    b = pd.DataFrame({"x": [2.0], "y": ["v"], "z": [None]})
    extra = pd.DataFrame({"w": [7], "x": [3.0]})
    empty = a.iloc[0:0]
    stamps = {"p1": FileStamp(10, 20, 30), "p2": None, "p3": FileStamp(1, 2, 3),
              "p4": FileStamp(4, 5, 6)}
    cases = [
        [("p1", a), ("p2", b), ("p3", a)],
        [("p1", a), ("p2", empty), ("p3", b)],
        [("p1", empty), ("p2", empty)],
        [("p1", a), ("p2", extra), ("p3", b)],
        [("p1", empty), ("p2", b)],
        [("p4", b)],
    ]
    for frames in cases:
        got = _stamped(frames, stamps)
        assert got is not None
        pd.testing.assert_frame_equal(got, expected(frames, stamps), check_exact=True)
    assert _stamped([], stamps) is None
