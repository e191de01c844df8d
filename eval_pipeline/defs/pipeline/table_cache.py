"""The tables the IO manager wrote or read during the current run, kept in memory.

Each per-batch asset's consumers read its Parquet back: in a CLI run over the corpora the
preprocessed trajectories were read four times per batch, and input loads were a tenth of
the graph's time (#12.4). The IO manager keeps what it wrote (and what it read) in this
cache, and a consumer in the same process is served from it instead of the file, as long as
the file is still the one the table came from.

What is served is exactly what reading the file would give (the tests compare every table
of a run), except that ``steps`` columns come back as Arrow
(:data:`~eval_pipeline.steps_column.STEPS_DTYPE`, #12.1), converted by neither the write nor
the read. A table whose columns all have plain dtypes (strings, numbers, booleans, Arrow
steps: no Python objects) is served as a shallow copy of the frame (pandas' copy-on-write
keeps a consumer's changes off the cached frame; Arrow memory is immutable and every
conversion of it to Python makes new objects); one with object columns (mixed values) is
converted from the Arrow table that was written, by the same function ``pd.read_parquet``
uses, once, and then served as a shallow copy too, except for its columns of nested values
(lists, structs: arrays and dicts in Python, which a consumer could change in place): those
columns alone are converted again for every consumer, so each gets its own objects, as
from a file. Converting the whole table for every consumer of the trajectories (whose
``expected_calls`` are lists) was 5 % of a corpora run's CPU (#12.4).

Bounded and scoped: at most ``budget`` bytes (Arrow size), least recently used first out;
emptied when a new run starts in the process; keyed by the file's path and checked against
its identity (size, modification time, inode) before every use, so a file another process
rewrote is read from disk. Each process has its own (a multiprocess run's steps share
nothing, and lose nothing but the speed-up).
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

# The conversion pd.read_parquet itself applies (pandas 3): private, so the tests compare
# what it gives with pd.read_parquet on every table of a run.
from pandas.io._util import arrow_table_to_pandas  # type: ignore[import-not-found]

from eval_pipeline.frame_columns import column_array, column_dtypes, select_columns
from eval_pipeline.models import STEP_ARROW_TYPE, STEPS_ARROW_TYPE
from eval_pipeline.steps_column import STEPS_DTYPE, steps_array

DEFAULT_BUDGET_MB = 256
"""The default budget: a CLI run holds at most about 16 MB of batch files (#12.3), whose
per-batch tables in Arrow form stay within this in one run's hot set (each table is read
by the next steps of the same run, soon after it is written)."""
_ATTRS = b"PANDAS_ATTRS"
_STEPS_FIELD = pa.field("steps", STEPS_ARROW_TYPE)
_STEP_FIELDS = frozenset(field.name for field in STEP_ARROW_TYPE)


@dataclass(frozen=True)
class FileStamp:
    """What identifies one version of a file: a rewrite (atomic rename) changes the inode,
    an in-place change the size or modification time."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, stat: os.stat_result) -> FileStamp:
        return cls(stat.st_size, stat.st_mtime_ns, stat.st_ino)


def file_stamp(path: str) -> FileStamp | None:
    try:
        return FileStamp.of(os.stat(path))
    except OSError:
        return None


def frame_from_arrow(table: pa.Table) -> pd.DataFrame:
    """The DataFrame ``pd.read_parquet`` makes of ``table`` (its conversion and attrs),
    except its ``steps`` column, which comes back as :data:`STEPS_DTYPE` without being
    converted to Python (#12.1: a table written before the type was fixed, with ``null``
    fields inferred, is cast first)."""
    position = table.schema.get_field_index("steps")
    steps = table.column(position) if position >= 0 else None
    if steps is not None and steps.type != STEPS_ARROW_TYPE:
        steps = _as_steps(steps)
        if steps is not None:
            table = table.set_column(position, _STEPS_FIELD, steps)
    if steps is None:
        frame = arrow_table_to_pandas(table)
    else:
        # What arrow_table_to_pandas does (pandas 3, pyarrow >= 19: Table.to_pandas without
        # a mapper; the tests hold the two alike), the steps' type mapped to STEPS_DTYPE,
        # which wraps the column as it is. A mapper also overrides the column's pandas
        # metadata, which pandas cannot parse when a writer recorded the Arrow dtype.
        frame = table.to_pandas(types_mapper=_steps_dtype)
    metadata = table.schema.metadata or {}
    if _ATTRS in metadata:
        frame.attrs = json.loads(metadata[_ATTRS])
    return frame


def _steps_dtype(kind: pa.DataType) -> pd.ArrowDtype | None:
    return STEPS_DTYPE if kind == STEPS_ARROW_TYPE else None


def _step_like(kind: pa.DataType) -> bool:
    """A type a steps column had: the fixed one, or one inferred from step rows (a list of
    structs with no field a step lacks, or of nulls, or null)."""
    if kind == STEPS_ARROW_TYPE or pa.types.is_null(kind):
        return True
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return False
    item = kind.value_type
    return pa.types.is_null(item) or (
        pa.types.is_struct(item) and {field.name for field in item} <= _STEP_FIELDS)


def _as_steps(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """A ``steps`` column as :data:`~eval_pipeline.models.STEPS_ARROW_TYPE` (cast when it
    was inferred), or None when it is not one a cast can make steps of (a table of some
    other nested values that happens to name a column so: converted as pandas does; a
    cast would drop the fields a step does not have)."""
    if not _step_like(column.type):
        return None
    try:
        return steps_array(column)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


_STRINGS = pd.StringDtype("pyarrow", na_value=np.nan)
"""pandas 3's default string dtype, the one ``pd.read_parquet`` gives string columns."""


def _plain_dtype(dtype: object) -> bool:
    return (isinstance(dtype, np.dtype) and dtype.kind in "biuf") or dtype == _STRINGS


def is_plain(frame: pd.DataFrame) -> bool:
    """Only numbers, booleans and pandas' default strings (and Arrow steps in the ``steps``
    column), and the index a read gives: such a frame is what reading its Parquet back gives
    (dtypes and values), and a shallow copy of it is safe to share (no Python objects a
    consumer could change in place: Arrow memory is immutable, every conversion of it makes
    new lists and dicts; copy-on-write covers the columns). Any other column (Python
    objects, nested lists as objects) is not."""
    index = frame.index
    return (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
            and all(_plain_dtype(dtype) or (name == "steps" and dtype == STEPS_DTYPE)
                    for name, dtype in column_dtypes(frame)))


def nested_object_columns(table: pa.Table, frame: pd.DataFrame) -> list[str]:
    """The columns of ``frame`` (converted from ``table``) that may hold values a consumer
    could change in place: object columns whose Arrow type is nested (a list becomes an
    array, a struct a dict). Every other Arrow type converts to immutable values (strings,
    bytes, numbers, decimals, dates, None), so its column may be shared; the steps column
    stays Arrow (:data:`STEPS_DTYPE`), immutable too. Read from the types, not by looking at
    every value (1.3 % of a corpora run's CPU)."""
    nested = {field.name for field in table.schema if pa.types.is_nested(field.type)}
    return [name for name, dtype in column_dtypes(frame)
            if name in nested and dtype == np.dtype(object)]


@dataclass
class _Entry:
    stamp: FileStamp
    table: pa.Table
    frame: pd.DataFrame | None
    """What a read gives, served as a shallow copy (its nested columns converted again).
    Set at once for a plain frame (see :func:`is_plain`), else converted from Arrow at the
    first use."""
    nbytes: int
    nested: list[str] | None = None
    """The frame's columns converted again for every consumer (see
    :func:`nested_object_columns`); None: no frame yet."""


class TableCache:
    """Tables by file path, at most ``budget`` bytes; see the module docstring."""

    def __init__(self, budget: int = DEFAULT_BUDGET_MB * 2**20) -> None:
        self.budget = budget
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._run: str | None = None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def begin_run(self, run_id: str | None, budget: int | None = None) -> None:
        """A new run in this process empties the cache (what one run wrote is what the
        same run reads; another run's tables would only hold memory)."""
        with self._lock:
            if budget is not None:
                self.budget = budget
            if run_id != self._run:
                self._entries.clear()
                self._bytes = 0
                self._run = run_id
            self._evict()

    def put(self, path: str, stamp: FileStamp, table: pa.Table,
            frame: pd.DataFrame | None = None) -> None:
        """Keep ``table`` (the file's content at ``stamp``); ``frame`` is what reading it
        gives, kept to be served when it is plain."""
        nbytes = table.nbytes
        with self._lock:
            self._drop(path)
            if nbytes > self.budget:
                return
            # A copy of its own: the writer's frame may change later (copy-on-write then
            # copies the writer's side, not this one).
            plain = frame.copy(deep=False) if frame is not None and is_plain(frame) else None
            self._entries[path] = _Entry(stamp, table, plain, nbytes,
                                         nested=[] if plain is not None else None)
            self._bytes += nbytes
            self._evict()

    def get(self, path: str, stamp: FileStamp | None,
            columns: Sequence[str] | None = None) -> pd.DataFrame | None:
        """The file's table as ``pd.read_parquet(path, columns=)`` would give it (only the
        ``columns`` present, in that order), or None when it is not here or the file is no
        longer the one it came from."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is None or stamp is None or entry.stamp != stamp:
                if entry is not None:
                    self._drop(path)
                self.misses += 1
                return None
            self._entries.move_to_end(path)
            self.hits += 1
        names = entry.table.column_names
        chosen = [c for c in columns if c in names] if columns else None
        frame, nested = entry.frame, entry.nested
        if frame is None or nested is None:
            frame = frame_from_arrow(entry.table)
            nested = nested_object_columns(entry.table, frame)
            with self._lock:  # whichever consumer converted first, the same frame
                entry.frame, entry.nested = frame, nested
        served = (frame if chosen is None else select_columns(frame, chosen)).copy(deep=False)
        own = [c for c in nested if chosen is None or c in chosen]
        if own:
            fresh = frame_from_arrow(entry.table.select(own))
            for name in own:
                served[name] = column_array(fresh, name)
        return served

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _drop(self, path: str) -> None:
        entry = self._entries.pop(path, None)
        if entry is not None:
            self._bytes -= entry.nbytes

    def _evict(self) -> None:
        while self._bytes > self.budget and self._entries:
            _path, entry = self._entries.popitem(last=False)
            self._bytes -= entry.nbytes


TABLE_CACHE = TableCache()
"""The process's cache, shared by every IO manager instance in it (Dagster creates one per
run, or per step in a multiprocess run)."""
