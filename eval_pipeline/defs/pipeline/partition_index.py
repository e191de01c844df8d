"""An index of a partitioned table: small tables derived from every partition, in one place.

``evaluation_report`` needs each batch's report row and, for the ``ALL`` row, a few figures
of every trajectory. Opening every batch's summaries made its cost grow with all batches
(452 files on the corpora), and recomputing every batch's row from them made it grow with
all trajectories. The IO manager keeps, per indexed asset, the tables an *indexer* derives
from each partition (for the summaries: the batch's report row, and its compact
per-trajectory figures), written when the partitions are written (one read and one write of
each index table per run, whatever the number of batches in it); the report reads those
(#12.5).

Each index row carries its partition and the identity (size, modification time, inode) of
the partition's own file it was derived from. An update under the index's lock keeps only
entries whose file is still that one, and a reader on a local store checks them (a ``stat``
per file, no read) and derives a partition from its own file when the index cannot answer
for it (not indexed, written by other code, rewritten since): the index can be stale, never
wrong. Object stores (s3://, gs://) skip the check, as a ``stat`` there is a request per
file.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
from filelock import FileLock
from upath import UPath

from eval_pipeline.atomic import write_atomic
from eval_pipeline.defs.pipeline.table_cache import FileStamp, file_stamp

PARTITION = "_partition"
FILE_SIZE = "_file_size"
FILE_MTIME = "_file_mtime_ns"
FILE_INODE = "_file_inode"
_BOOKKEEPING = (PARTITION, FILE_SIZE, FILE_MTIME, FILE_INODE)
_PARTITION_DTYPE = pd.DataFrame({PARTITION: ["x"]})[PARTITION].dtype
"""What a partition name inserted as a scalar column becomes (pandas' default strings)."""


@dataclass(frozen=True)
class PartitionIndexer:
    """What an asset's index holds: ``derive(frame, partition)`` gives the index tables of
    one partition (by name) from its table as a reader of ``columns`` gets it."""

    columns: tuple[str, ...]
    derive: Callable[[pd.DataFrame, str], Mapping[str, pd.DataFrame]]
    marker: str
    """The table with exactly one row per indexed partition (written last: a partition is
    indexed once its marker row is there)."""
    others: tuple[str, ...] = ()
    """Tables with any number of rows per partition (none for an empty one)."""

    @property
    def tables(self) -> tuple[str, ...]:
        return (*self.others, self.marker)


@cache
def resolve_indexer(reference: str) -> PartitionIndexer:
    """``"module:attribute"`` (the asset metadata names its indexer so), imported once."""
    module, _, name = reference.partition(":")
    indexer = getattr(importlib.import_module(module), name)
    if not isinstance(indexer, PartitionIndexer):
        raise TypeError(f"{reference} is not a PartitionIndexer")
    return indexer


@dataclass(frozen=True)
class IndexedPartitions:
    """What a read of the index gives for the partitions asked for."""

    keys: list[str]
    """The partitions asked for, in that order."""
    tables: dict[str, pd.DataFrame]
    """Each index table's rows of the partitions it answers for (``PARTITION`` tells whose;
    the files' identities left out)."""
    answered: set[str]
    stale: list[str]
    """The partitions to derive from their own files (not indexed, or changed since), in
    the order asked."""


def _local(path: UPath) -> Path | None:
    return Path(path.path) if path.protocol in ("", "file") else None


def _stamp(path: UPath) -> FileStamp | None:
    local = _local(path)
    return file_stamp(str(local)) if local is not None else None


def table_path(index_dir: UPath, name: str) -> UPath:
    return index_dir.joinpath(f"{name}.parquet")


@contextlib.contextmanager
def _locked(index_dir: UPath) -> Iterator[None]:
    """Runs that write the same index one after the other (local stores only)."""
    local = _local(index_dir)
    if local is None:
        yield
        return
    local.mkdir(parents=True, exist_ok=True)
    with FileLock(str(local / ".lock")):
        yield


def _read(path: UPath) -> pd.DataFrame | None:
    try:
        with path.open("rb") as fh:
            return pd.read_parquet(fh)
    except (FileNotFoundError, OSError, ValueError):
        return None


def _write(path: UPath, table: pd.DataFrame) -> None:
    local = _local(path)
    if local is not None:
        write_atomic(local, lambda fh: table.to_parquet(fh, index=False), sync=False)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        table.to_parquet(fh, index=False)


def table_with_partition(frame: pd.DataFrame, partition: str) -> pd.DataFrame:
    """``frame`` with the ``PARTITION`` column first, as index tables hold it."""
    part = frame.reset_index(drop=True)
    part.insert(0, PARTITION, partition)
    return part


def _with_stamp(frame: pd.DataFrame, partition: str, stamp: FileStamp | None) -> pd.DataFrame:
    part = table_with_partition(frame, partition)
    part[FILE_SIZE] = stamp.size if stamp else -1
    part[FILE_MTIME] = stamp.mtime_ns if stamp else -1
    part[FILE_INODE] = stamp.inode if stamp else -1
    return part


def update_index(index_dir: UPath, indexer: PartitionIndexer,
                 derived: Mapping[str, Mapping[str, pd.DataFrame]],
                 stamps: Mapping[str, FileStamp | None], files: Mapping[str, UPath]) -> None:
    """Replace the index rows of ``derived``'s partitions (partition -> table name -> rows),
    each derived from its file as it was at ``stamps[partition]``.

    Under the index's lock, a partition whose file is no longer that one (another run
    rewrote it since) keeps no entry: its own writer indexes it, or a reader derives it.
    The marker table is written last, so a crash in between leaves the partition stale."""
    with _locked(index_dir):
        current = {p: stamp for p, stamp in stamps.items()
                   if p in files and (_local(files[p]) is None or _stamp(files[p]) == stamp)}
        for name in indexer.tables:
            path = table_path(index_dir, name)
            new = _stamped([(p, tables[name]) for p, tables in derived.items()
                            if p in current and name in tables], current)
            parts = [] if new is None else [new]
            old = _read(path)
            if old is not None:
                parts.insert(0, old[~old[PARTITION].isin(list(derived))])
            kept = [p for p in parts if len(p)] or parts[:1]
            if not kept:
                continue
            _write(path, pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0])


def _stamped(frames: Sequence[tuple[str, pd.DataFrame]],
             stamps: Mapping[str, FileStamp | None]) -> pd.DataFrame | None:
    """``pd.concat`` of each partition's rows with its partition and file identity
    (:func:`_with_stamp`), empty ones left out unless all are, as one concat and a column
    each instead of four frame operations per partition (the index update of a run was a
    tenth of its writes, #12.4): the same frame (``test_partition_index.py``)."""
    if len(frames) <= 1:
        return _with_stamp(frames[0][1], frames[0][0], stamps[frames[0][0]]) if frames \
            else None
    used = [(p, f) for p, f in frames if len(f)] or list(frames[:1])
    if len(used) == 1:
        return _with_stamp(used[0][1], used[0][0], stamps[used[0][0]])
    order = dict.fromkeys([PARTITION])  # the columns in the order concat of stamped gives
    for _p, frame in used:
        order.update(dict.fromkeys([*frame.columns, FILE_SIZE, FILE_MTIME, FILE_INODE]))
    table = pd.concat([f for _p, f in used], ignore_index=True)
    lengths = [len(f) for _p, f in used]
    found = [stamps[p] for p, _f in used]
    table.insert(0, PARTITION, pd.Series(np.repeat(np.array([p for p, _f in used], dtype=object),
                                                   lengths).tolist(), dtype=_PARTITION_DTYPE))
    for column, value in ((FILE_SIZE, lambda s: s.size), (FILE_MTIME, lambda s: s.mtime_ns),
                          (FILE_INODE, lambda s: s.inode)):
        table[column] = np.repeat(np.array([value(s) if s else -1 for s in found],
                                           dtype=np.int64), lengths)
    return table[list(order)]


def _stamps(table: pd.DataFrame) -> dict[str, FileStamp]:
    firsts = table.drop_duplicates(PARTITION)
    return {str(p): FileStamp(int(s), int(m), int(i)) for p, s, m, i in zip(
        firsts[PARTITION], firsts[FILE_SIZE], firsts[FILE_MTIME], firsts[FILE_INODE],
        strict=True)}


def read_index(index_dir: UPath, indexer: PartitionIndexer, keys: Sequence[str],
               files: Mapping[str, UPath]) -> IndexedPartitions:
    """The index tables for the partitions ``keys``: the rows of those it can answer for
    (a marker row derived from the file as it is now, and no other table's rows derived
    from another version), and the others, to derive from their files."""
    tables = {name: _read(table_path(index_dir, name)) for name in indexer.tables}
    loaded = {name: t for name, t in tables.items() if t is not None}
    if len(loaded) != len(tables):
        return IndexedPartitions(list(keys), {}, set(), list(keys))
    marked = _stamps(loaded[indexer.marker])
    others = [_stamps(loaded[name]) for name in indexer.others]
    answered: set[str] = set()
    stale: list[str] = []
    for key in keys:
        recorded = marked.get(key)
        if recorded is None or any(o.get(key, recorded) != recorded for o in others):
            stale.append(key)  # not indexed, or its tables derived from different files
            continue
        file = files.get(key)
        if file is not None and _local(file) is not None and _stamp(file) != recorded:
            stale.append(key)  # changed or gone: its own file says which
            continue
        answered.add(key)
    stamp_columns = [FILE_SIZE, FILE_MTIME, FILE_INODE]
    rows = {name: table[table[PARTITION].isin(answered).to_numpy(dtype=np.bool_)].drop(
        columns=stamp_columns).reset_index(drop=True) for name, table in loaded.items()}
    return IndexedPartitions(list(keys), rows, answered, stale)
