"""Files that are never seen half-written, and one CLI run per store at a time.

A reader (a downstream asset, the UI, a second run) must find either the previous complete
file or the new complete file: every file is written beside its target under a temporary
name and renamed over it, which POSIX makes atomic on one file system. A killed run leaves
at most a hidden ``.*.tmp`` file, never a truncated table.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def temporary_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")


def write_atomic(path: Path, write: Callable[[BinaryIO], object], *, sync: bool = True
                 ) -> None:
    """``write(fh)`` into a temporary file beside ``path``, then rename it over ``path``.

    ``sync=False`` skips the ``fsync`` before the rename: readers still never see a
    half-written file (a crashed process leaves the old one), only a power loss may (the
    trade the event log's ``synchronous=NORMAL`` makes too; used for the asset Parquet,
    where it was a tenth of a CLI run's graph time, #12.4)."""
    with atomic_file(path, sync=sync) as fh:
        write(fh)


@contextmanager
def atomic_file(path: Path, *, sync: bool = True) -> Iterator[BinaryIO]:
    """An open temporary file beside ``path``, renamed over it when the block ends without
    an error (removed when it raises): :func:`write_atomic` for a file written over a
    longer stretch of code, e.g. batch by batch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(path)
    try:
        with tmp.open("wb") as fh:
            yield fh
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def new_folder(target: Path) -> Iterator[Path]:
    """A new hidden folder to fill, swapped in for ``target`` when the block ends without
    an error (removed when it raises): a reader sees the old folder or the new one (for
    the instant between two renames, none)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    new = temporary_beside(target)
    new.mkdir()
    try:
        yield new
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    old = temporary_beside(target) if target.exists() else None
    if old is not None:
        os.replace(target, old)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def replace_folder(target: Path, fill: Callable[[Path], object]) -> None:
    """``fill(folder)`` into a new hidden folder, then swap it in for ``target``: a reader
    sees the old folder or the new one (for the instant between two renames, none)."""
    with new_folder(target) as folder:
        fill(folder)


class StoreBusyError(Exception):
    """Another CLI run holds the store."""


@contextmanager
def exclusive_store(root: Path) -> Iterator[None]:
    """Hold the store for one CLI run; a second run is refused at once, not interleaved.

    An advisory ``flock`` on ``<store>/.lock``: the kernel releases it when the process
    ends, however it ends, so a killed run never leaves the store locked.
    """
    root.mkdir(parents=True, exist_ok=True)
    lock = root / ".lock"
    with lock.open("a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise StoreBusyError(
                f"the store {root} is in use by another eval-pipeline run (pid {holder}); "
                f"wait for it to finish, or give this run its own --store") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
