"""A run's tables read and written one batch at a time, equal to their concatenation (#12.3).

The CLI used to concatenate every batch of every asset into one DataFrame (``pd.concat``)
and write that, so its memory grew with the drop. Here a table is a list of :class:`Part`
(one Parquet per batch in the store, or a chunk an export spooled), and:

- :meth:`Parts.write` writes their concatenation with ``pyarrow.parquet.ParquetWriter``,
  one batch at a time, under one schema unified from the parts' footers: a column all-null
  (Arrow ``null``) in one batch and typed in another, an integer column in one batch and a
  float in another, or a column missing from a batch all become the type the concatenated
  DataFrame would have been written with, so the file reads back equal to it;
- :meth:`Parts.read` reads one part as a DataFrame with the values the concatenation would
  hold: pandas turns an integer column into floats when another batch has floats, nulls
  or lacks the column, and an export that prints ``3`` must not print ``3.0`` because the
  batches were read apart (``evaluated.jsonl``). The footers say which (the Arrow types,
  the null counts), so no batch is read twice for it.

Pure pyarrow and pandas; the store may be a local folder or any fsspec URL: the caller
hands in its base as a :class:`StorePath` (a ``Path``, or the ``UPath`` the orchestration
layer makes of a URL; domain modules do not import upath).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from eval_pipeline.atomic import write_atomic

ROW_GROUP_BYTES = 4 * 2**20
"""Batches are gathered up to about this many bytes (Arrow, in memory) per row group of an
exported file: a batch of ten trajectories is far smaller than a useful row group, and the
cap keeps what is held while writing independent of the drop."""
ROW_GROUP_TABLES = 256
"""...or up to this many batches' tables, whichever comes first: a table of a few rows per batch
(quarantine, routing checks) would otherwise hold every batch's Arrow objects, each with
its own schema and pandas metadata, until the run's end (#12.3)."""
_PANDAS = b"pandas"


class StorePath(Protocol):
    """A file or folder of the store: ``pathlib.Path`` or ``upath.UPath`` (fsspec)."""

    def joinpath(self, *parts: str) -> StorePath: ...

    def open(self, mode: Literal["rb"]) -> BinaryIO: ...


@dataclass(frozen=True)
class Part:
    """One batch of a table: its file, rows, Arrow schema and the columns that hold a null
    (for the integer and boolean columns, whose pandas dtype depends on it)."""

    key: str
    path: StorePath
    rows: int
    schema: pa.Schema
    nulls: frozenset[str]


def open_part(path: StorePath, key: str) -> Part | None:
    """The footer of ``path``; None when there is no such file."""
    try:
        with path.open("rb") as fh:
            meta = pq.read_metadata(fh)
    except FileNotFoundError:
        return None
    schema = meta.schema.to_arrow_schema()
    # one object per distinct schema: a run's thousands of parts share a handful, each
    # with its pandas metadata (a few KiB) kept until the export ends
    schema = _SCHEMAS.setdefault(schema, schema)
    return Part(key, path, meta.num_rows, schema, _columns_with_nulls(path, meta, schema))


_SCHEMAS: dict[pa.Schema, pa.Schema] = {}


def _columns_with_nulls(path: StorePath, meta: pq.FileMetaData, schema: pa.Schema
                        ) -> frozenset[str]:
    """Integer and boolean columns holding a null, from the row groups' statistics (read
    from the column itself when a writer left them out)."""
    wanted = {f.name for f in schema
              if pa.types.is_integer(f.type) or pa.types.is_boolean(f.type)}
    if not wanted or not meta.num_rows:
        return frozenset()
    found: set[str] = set()
    unknown: set[str] = set()
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for index in range(row_group.num_columns):
            column = row_group.column(index)
            name = column.path_in_schema
            if name not in wanted:
                continue
            stats = column.statistics
            if stats is None or not stats.has_null_count:
                unknown.add(name)
            elif stats.null_count:
                found.add(name)
    unread = sorted(unknown - found)
    if unread:  # one read of them all: opening the file again for each was most of the cost
        table = read_part(path, unread)
        found.update(name for name in unread if table.column(name).null_count)
    return frozenset(found)


def asset_parts(base: StorePath, asset: Sequence[str], partitions: Sequence[str]) -> list[Part]:
    """The run's batches of one asset (key path) in the store, in ``partitions`` order;
    batches without a file are left out (as the previous concatenation did)."""
    found = []
    for key in partitions:
        part = open_part(base.joinpath(*asset, f"{key}.parquet"), key)
        if part is not None:
            found.append(part)
    return found


def read_part(path: StorePath, columns: Sequence[str] | None = None) -> pa.Table:
    """A part's rows as Arrow (only ``columns``, which it must have, and its pandas index
    columns). ``ParquetFile.read``: half the cost of ``pq.read_table`` on the small files
    of one batch, where the dataset machinery's set-up is most of the work."""
    with path.open("rb") as fh:
        return pq.ParquetFile(fh).read(columns=list(columns) if columns is not None else None,
                                       use_pandas_metadata=True)


def to_frame(table: pa.Table) -> pd.DataFrame:
    """``table`` as ``pd.read_parquet`` converts it (with pyarrow >= 19 and pandas 3 that is
    ``Table.to_pandas``; one thread: a batch's tables are too small to share out)."""
    return table.to_pandas(use_threads=False)


@cache
def _dtypes_as_read(schema: pa.Schema, nulls: frozenset[str]) -> tuple[tuple[str, Any], ...]:
    """The pandas dtypes ``pd.read_parquet`` gives a file of this schema: a tiny table of
    the same types and null pattern, read the same way (cached: batches share schemas)."""
    columns = []
    for field in schema:
        if pa.types.is_integer(field.type) or pa.types.is_boolean(field.type):
            value = True if pa.types.is_boolean(field.type) else 0
            second = None if field.name in nulls else value
            columns.append(pa.array([value, second], type=field.type))
        else:
            columns.append(pa.nulls(2, type=field.type))
    table = pa.Table.from_arrays(columns, schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    buffer.seek(0)
    frame = pd.read_parquet(buffer)
    return tuple((str(name), dtype) for name, dtype in frame.dtypes.items())


def _unified_schema(parts: Sequence[Part]) -> pa.Schema:
    """The parts' schemas unified as the concatenated DataFrame is written: ``null``
    becomes the other batches' type, integers and floats become floats, columns missing
    from some batches are added; each column's pandas metadata from the first batch where
    the column has a type (so extension dtypes read back as they were written)."""
    bare = [p.schema.remove_metadata() for p in parts]
    unified = pa.unify_schemas(bare, promote_options="permissive")
    columns: dict[str, dict[str, Any]] = {}
    document: dict[str, Any] | None = None
    for part in parts:
        raw = (part.schema.metadata or {}).get(_PANDAS)
        if raw is None:
            continue
        meta = json.loads(raw)
        document = document or meta
        for entry in meta.get("columns", []):
            name = entry.get("name")
            if name not in unified.names:
                continue
            typed = not pa.types.is_null(part.schema.field(name).type)
            if name not in columns or (typed and columns[name].get("_null")):
                columns[name] = {**entry, "_null": not typed}
    if document is None:
        return unified
    document = {**document, "columns": [
        {k: v for k, v in columns[name].items() if k != "_null"}
        for name in unified.names if name in columns]}
    return unified.with_metadata({_PANDAS: json.dumps(document).encode("utf-8")})


def cast_to(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``: its columns cast, missing ones null, in schema order."""
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, type=field.type))
            continue
        column = table.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                # e.g. a struct gaining fields: through Python values, one batch at a time
                column = pa.chunked_array([pa.array(column.to_pylist(), type=field.type)],
                                          type=field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


class Parts:
    """A table as its parts, in order: what ``pd.concat`` of their non-empty DataFrames
    would be, written and read one part at a time."""

    def __init__(self, parts: Sequence[Part]) -> None:
        self.parts = list(parts)
        self.nonempty = [p for p in self.parts if p.rows]
        self._schema: pa.Schema | None = None
        self._dtypes: dict[str, Any] | None = None

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def schema(self) -> pa.Schema:
        """The written file's schema (the first part's when every part is empty: the
        previous code wrote the first empty DataFrame as it was)."""
        if self._schema is None:
            self._schema = (_unified_schema(self.nonempty) if self.nonempty
                            else self.parts[0].schema)
        return self._schema

    @property
    def dtypes(self) -> dict[str, Any]:
        """Column -> the pandas dtype it has in the concatenated DataFrame."""
        if self._dtypes is None:
            patterns = dict.fromkeys(_dtypes_as_read(p.schema, p.nulls)
                                     for p in (self.nonempty or self.parts[:1]))
            empty = [pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in pattern})
                     for pattern in patterns]
            joined = pd.concat(empty, ignore_index=True) if len(empty) > 1 else empty[0]
            self._dtypes = {str(name): dtype for name, dtype in joined.dtypes.items()}
        return self._dtypes

    def read(self, part: Part, columns: Sequence[str] | None = None,
             exact: bool = False) -> pd.DataFrame:
        """One part as a DataFrame (only ``columns``, those it has), with the values the
        concatenated DataFrame holds for its rows (see :func:`like_concatenated`);
        ``exact``: in its dtypes too (:func:`as_concatenated`)."""
        wanted = None if columns is None else [c for c in columns if c in part.schema.names]
        frame = to_frame(read_part(part.path, wanted))
        return (as_concatenated if exact else like_concatenated)(frame, self.dtypes)

    def frames(self, columns: Sequence[str] | None = None
               ) -> Iterator[tuple[Part, pd.DataFrame]]:
        """Each part and its DataFrame, in order (the empty ones too)."""
        for part in self.parts:
            yield part, self.read(part, columns)

    def write(self, target: Path, sync: bool = True,
              transform: Callable[[Part, pa.Table], pa.Table] | None = None) -> None:
        """The concatenation as one Parquet at ``target``, written atomically;
        ``transform`` changes a part's rows before they are written (same columns)."""

        def write(fh: BinaryIO) -> None:
            with ConcatWriter(fh, self.schema) as writer:
                for part in self.nonempty:
                    table = read_part(part.path)
                    writer.add(transform(part, table) if transform else table)

        write_atomic(target, write, sync=sync)


class ConcatWriter:
    """A Parquet file written from tables of one run's batches, each cast to ``schema``
    (a :attr:`Parts.schema`), gathered into row groups of about :data:`ROW_GROUP_BYTES`.
    A file given no rows holds ``schema``'s empty table."""

    def __init__(self, sink: BinaryIO, schema: pa.Schema) -> None:
        self.schema = schema
        self._writer = pq.ParquetWriter(sink, schema)
        self._held: list[pa.Table] = []
        self._size = 0
        self._rows = 0

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        table = cast_to(table, self.schema)
        self._held.append(table)
        self._size += table.nbytes
        self._rows += table.num_rows
        if self._size >= ROW_GROUP_BYTES or len(self._held) >= ROW_GROUP_TABLES:
            self._flush()

    def _flush(self) -> None:
        if self._held:
            self._writer.write_table(pa.concat_tables(self._held))
            self._held, self._size = [], 0

    def close(self) -> None:
        if not self._rows:
            self._writer.write_table(self.schema.empty_table())
        self._flush()
        self._writer.close()

    def __enter__(self) -> ConcatWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._writer.close()


def like_concatenated(frame: pd.DataFrame, dtypes: Mapping[str, Any]) -> pd.DataFrame:
    """``frame`` (one batch) with the values it has inside the concatenation: integer
    columns that became floats there become floats here (every other dtype change pandas
    makes when concatenating, to ``object`` or between string dtypes, keeps the values)."""
    cast = {c: dtypes[c] for c in frame.columns
            if c in dtypes and frame[c].dtype.kind in "iu"
            and getattr(dtypes[c], "kind", None) == "f"}
    return frame.astype(cast) if cast else frame


def as_concatenated(frame: pd.DataFrame, dtypes: Mapping[str, Any]) -> pd.DataFrame:
    """``frame`` (one batch) in the concatenation's dtypes, every column: pieces cast so
    join into the rows of the concatenation with its dtypes (for small tables kept across
    batches; :func:`like_concatenated` is enough for values read once)."""
    cast = {c: dtypes[c] for c in frame.columns if c in dtypes and frame[c].dtype != dtypes[c]}
    return frame.astype(cast) if cast else frame


class Spool:
    """DataFrame chunks an export makes batch by batch, kept as Parquet files in a
    temporary folder, then written as one file equal to their concatenation."""

    def __init__(self, folder: Path, name: str, index: bool = False) -> None:
        self.folder = folder
        self.name = name
        self.index = index
        self.parts: list[Part] = []

    def add(self, frame: pd.DataFrame) -> None:
        path = self.folder / f"{self.name}.{len(self.parts):06d}.parquet"
        frame.to_parquet(path, index=self.index)
        part = open_part(path, str(len(self.parts)))
        assert part is not None
        self.parts.append(part)

    def write(self, target: Path, sync: bool = True,
              transform: Callable[[Part, pa.Table], pa.Table] | None = None) -> None:
        Parts(self.parts).write(target, sync=sync, transform=transform)


def value_counts(counts: Mapping[Any, int]) -> list[tuple[Any, int]]:
    """``Series.value_counts()`` from counts kept in order of first appearance (as a dict
    or Counter fills): most frequent first, ties in order of first appearance, as pandas
    orders them (a stable sort of the counts in that order)."""
    return sorted(counts.items(), key=lambda item: -item[1])


def write_bytes_atomic(path: Path, chunks: Callable[[], Iterator[bytes]]) -> None:
    """``path`` written from ``chunks()``, atomically."""

    def write(fh: BinaryIO) -> None:
        for chunk in chunks():
            fh.write(chunk)

    write_atomic(path, write)
