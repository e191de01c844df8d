"""An index of a partitioned table: a few columns of every partition in one small Parquet.

``evaluation_report`` needs a handful of columns of every batch's trajectory_summaries.
Opening every batch's file made its cost grow with all batches (452 files on the corpora).
The IO manager keeps, per indexed asset, one Parquet holding those columns of every
partition, updated when partitions are written (one read and one write per run, whatever
the number of batches in it); the report reads that one file (#12.5).

Each row carries its partition and the size and modification time of the partition's own
file when the row was written. A reader on a local store checks them (a ``stat`` per file,
no read) and reads a partition from its own file when the index is behind it (a crash
between the two writes, a file written by other code): the index can be stale, never wrong.
Object stores (s3://, gs://) skip that check, as a ``stat`` there is a request per file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pandas as pd
from filelock import FileLock
from upath import UPath

from eval_pipeline.atomic import write_atomic

PARTITION = "_partition"
FILE_SIZE = "_file_size"
FILE_MTIME = "_file_mtime_ns"
_BOOKKEEPING = (PARTITION, FILE_SIZE, FILE_MTIME)


def _local(path: UPath) -> Path | None:
    return Path(path.path) if path.protocol in ("", "file") else None


def file_stamp(path: UPath) -> tuple[int, int] | None:
    """(size, mtime in ns) of a local file; None on an object store or when it is gone."""
    local = _local(path)
    if local is None:
        return None
    try:
        stat = local.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


@contextlib.contextmanager
def _locked(index: UPath) -> Iterator[None]:
    """Runs that write the same index one after the other (local stores only)."""
    local = _local(index)
    if local is None:
        yield
        return
    local.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(local.with_name(f".{local.name}.lock"))):
        yield


def _read(index: UPath) -> pd.DataFrame | None:
    try:
        with index.open("rb") as fh:
            return pd.read_parquet(fh)
    except (FileNotFoundError, OSError, ValueError):
        return None


def update_index(index: UPath, frames: Mapping[str, pd.DataFrame], columns: Sequence[str],
                 files: Mapping[str, UPath]) -> None:
    """Replace the rows of ``frames``' partitions with their ``columns`` (those present)."""
    parts = []
    for key, frame in frames.items():
        part = frame[[c for c in columns if c in frame.columns]].copy()
        stamp = file_stamp(files[key]) if key in files else None
        part.insert(0, PARTITION, key)
        part[FILE_SIZE] = stamp[0] if stamp else -1
        part[FILE_MTIME] = stamp[1] if stamp else -1
        parts.append(part)
    with _locked(index):
        old = _read(index)
        if old is not None:
            parts.insert(0, old[~old[PARTITION].isin(list(frames))])
        table = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
        local = _local(index)
        if local is not None:
            write_atomic(local, lambda fh: table.to_parquet(fh, index=False), sync=False)
        else:
            index.parent.mkdir(parents=True, exist_ok=True)
            with index.open("wb") as fh:
                table.to_parquet(fh, index=False)


def read_index(index: UPath, keys: Sequence[str], files: Mapping[str, UPath],
               columns: Sequence[str] | None = None
               ) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The indexed partitions among ``keys`` (only ``columns``, if given) and the keys the
    index cannot answer for (not in it, or their file changed since): read those from
    their files."""
    table = _read(index)
    if table is None:
        return {}, list(keys)
    wanted = [c for c in (columns or table.columns) if c in table.columns
              and c not in _BOOKKEEPING]
    found: dict[str, pd.DataFrame] = {}
    rows = dict(iter(table.groupby(PARTITION, sort=False).indices.items()))
    stale: list[str] = []
    for key in keys:
        at = rows.get(key)
        if at is None:
            stale.append(key)
            continue
        part = table.iloc[at]
        file = files.get(key)
        if file is not None and _local(file) is not None and file_stamp(file) != (
                int(part[FILE_SIZE].iloc[0]), int(part[FILE_MTIME].iloc[0])):
            stale.append(key)  # changed or gone: its own file says which
            continue
        found[key] = part[wanted].reset_index(drop=True)
    return found, stale
