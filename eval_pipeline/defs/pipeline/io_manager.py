"""Every asset is a pandas DataFrame stored as Parquet under one configurable base path.

Built on Dagster's UPathIOManager, so the base path may be a local folder or any fsspec URL
(s3://, gs://, memory://) without changing an asset. Local files are written atomically
(temporary file, then rename), so a concurrent run or a crash never leaves a half-written
table to read. One file per batch partition, also when
one run materializes many batches: a partitioned asset then returns ``dict[batch, DataFrame]``
and each batch gets its own file and its own materialization metadata (path, row count), which
the stock UPathIOManager refuses ("does not support persisting an output associated with
multiple partitions").

The tables a run writes are kept in memory for the same run's consumers
(:mod:`eval_pipeline.defs.pipeline.table_cache`), which are served what reading the file would
give without reading it; and the Parquet is written without dictionary pages and column
statistics (see :data:`PARQUET_OPTIONS`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from dagster._core.storage.upath_io_manager import is_dict_type
from upath import UPath

from eval_pipeline.atomic import write_atomic
from eval_pipeline.defs.pipeline.assets.metadata import add_batches_metadata
from eval_pipeline.defs.pipeline.partition_index import (
    PARTITION,
    IndexedPartitions,
    PartitionIndexer,
    read_index,
    resolve_indexer,
    table_with_partition,
    update_index,
)
from eval_pipeline.defs.pipeline.table_cache import (
    DEFAULT_BUDGET_MB,
    TABLE_CACHE,
    FileStamp,
    TableCache,
    file_stamp,
    frame_from_arrow,
)
from eval_pipeline.frame_columns import column_dtypes
from eval_pipeline.steps_column import STEPS_DTYPE
from eval_pipeline.store import resolve_store

INDEXER = "eval_pipeline/indexer"
"""Asset metadata: ``"module:attribute"`` of the
:class:`~eval_pipeline.defs.pipeline.partition_index.PartitionIndexer` whose tables of every
partition the IO manager keeps in the asset's index, updated as partitions are written."""
FROM_INDEX = "from_index"
"""Input metadata: the upstream asset's indexer reference; the input is then the index
(:class:`~eval_pipeline.defs.pipeline.partition_index.IndexedPartitions`) of the partitions
loaded, not their tables."""

Frames = dict[str, pd.DataFrame]
"""One DataFrame per batch partition of a run: what partitioned assets return and read."""


PARQUET_OPTIONS: dict[str, Any] = {"compression": "snappy", "use_dictionary": False,
                                   "write_statistics": False}
"""How the asset tables are written. Dictionary pages and min/max statistics serve
repeated values and filtered reads; these tables are mostly long, distinct texts read whole,
so both only cost: measured on 2,487 tables of a corpora run (every second one), writing
took 18 % less CPU, decoding 32 % less, and the files were 27 % smaller than with pyarrow's
defaults. Values and types read back are the same (Parquet's encodings are lossless)."""


def _local(path: UPath) -> Path | None:
    return Path(path.path) if path.protocol in ("", "file") else None


def write_table(table: pa.Table, path: UPath) -> FileStamp | None:
    """``table`` as Parquet at ``path``; a local file's identity once written (taken from
    the written handle, so a concurrent rewrite cannot be mistaken for it)."""
    local = _local(path)
    if local is None:
        # Object stores (s3://, gs://) publish an object only once its upload completes.
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            pq.write_table(table, fh, **PARQUET_OPTIONS)
        return None
    stamps: list[FileStamp] = []

    def write(fh: Any) -> None:
        pq.write_table(table, fh, **PARQUET_OPTIONS)
        fh.flush()
        stamps.append(FileStamp.of(os.fstat(fh.fileno())))

    write_atomic(local, write, sync=False)  # a reader never sees a half-written table
    return stamps[0]


_STRINGS = pd.StringDtype("pyarrow", na_value=np.nan)
_SCHEMAS: dict[tuple[object, ...], pa.Schema] = {}
_MAX_SCHEMAS = 1024


def _convertible(dtypes: Sequence[tuple[Any, Any]]) -> bool:
    """Columns (names and dtypes) :func:`to_arrow` converts itself: unique string names,
    numpy numbers, booleans and objects, pandas' default strings and Arrow steps (no
    categoricals, dates or other types whose pandas metadata depends on their values)."""
    names = [n for n, _t in dtypes]
    return (all(isinstance(n, str) for n in names) and len(set(names)) == len(names)
            and all((isinstance(t, np.dtype) and t.kind in "biufO") or t == _STRINGS
                    or (n == "steps" and t == STEPS_DTYPE)
                    for n, t in dtypes))


_STEPS_COLUMN = {"name": "steps", "field_name": "steps", "pandas_type": "list[object]",
                 "numpy_type": "object", "metadata": None}
"""pandas' metadata for an Arrow ``steps`` column: what ``Table.from_pandas`` records for
steps held as Python lists, so any reader (``pd.read_parquet``, older code) reads the file
as it read it before. What it records for the Arrow dtype cannot be read back at all:
pandas cannot parse that ``numpy_type``."""


def _converted_by_pandas(frame: pd.DataFrame) -> pa.Table:
    """``pa.Table.from_pandas(frame, preserve_index=False)``; an Arrow ``steps`` column
    (whose buffers from_pandas takes as they are) recorded in the metadata as
    :data:`_STEPS_COLUMN`."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if "steps" not in frame.columns or not any(
            name == "steps" and dtype == STEPS_DTYPE for name, dtype in frame.dtypes.items()):
        return table
    metadata = dict(table.schema.metadata or {})
    if b"pandas" in metadata:
        document = json.loads(metadata[b"pandas"])
        document["columns"] = [dict(_STEPS_COLUMN) if c.get("name") == "steps" else c
                               for c in document["columns"]]
        metadata[b"pandas"] = json.dumps(document).encode()
    return table.replace_schema_metadata(metadata)


def _from_pandas(frame: pd.DataFrame) -> pa.Table:
    """``pa.Table.from_pandas(frame, preserve_index=False)``, four times faster on these
    tables: each column converted by ``pa.array(values, from_pandas=True)`` (what
    from_pandas calls for it) without a Series per column, and the schema with its pandas
    metadata, which depends only on the names, the dtypes and the Arrow types here, taken
    from the first table of each kind that from_pandas converted (#12.4). Converting was
    the largest part of writing a run's tables; the tests compare the result with
    from_pandas, metadata included, on every table of a run. An Arrow ``steps`` column
    (#12.1) is written as it is, without a copy or a conversion (``pa.array`` takes an
    Arrow-backed array's own buffers), with the metadata of steps as Python lists."""
    dtypes = column_dtypes(frame)
    if not _convertible(dtypes):
        return _converted_by_pandas(frame)
    try:
        manager = frame._mgr
        arrays = [pa.array(manager.iget_values(i), from_pandas=True)
                  for i in range(len(frame.columns))]
    except AttributeError:  # a pandas without the block manager's column access
        return _converted_by_pandas(frame)
    key = (tuple(n for n, _t in dtypes), tuple(str(t) for _n, t in dtypes),
           str(frame.columns.dtype),
           tuple(str(a.type) for a in arrays))
    schema = _SCHEMAS.get(key)
    if schema is None:
        table = _converted_by_pandas(frame)
        if len(_SCHEMAS) < _MAX_SCHEMAS:
            _SCHEMAS[key] = table.schema
        return table
    return pa.Table.from_arrays(arrays, schema=schema)


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """The Arrow table ``DataFrame.to_parquet(index=False)`` writes (attrs included)."""
    table = _from_pandas(frame)
    if frame.attrs:
        table = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), b"PANDAS_ATTRS": json.dumps(frame.attrs)})
    return table


class ParquetUPathIOManager(dg.UPathIOManager):
    extension = ".parquet"

    def __init__(self, base_path: UPath, cache: TableCache | None = None) -> None:
        super().__init__(base_path=base_path)
        self._cache = cache

    def dump_to_path(self, context: dg.OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        self._dump(context, obj, path)

    def _dump(self, context: dg.OutputContext, obj: pd.DataFrame, path: UPath
              ) -> tuple[pa.Table, FileStamp | None]:
        """The table written and, on a local store, the file's identity once written."""
        if not isinstance(obj, pd.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()} must be a DataFrame, "
                            f"got {type(obj).__name__}")
        table = to_arrow(obj)
        stamp = write_table(table, path)
        if self._cache is not None and stamp is not None:
            self._cache.put(str(path), stamp, table, obj)
        return table, stamp

    def load_from_path(self, context: dg.InputContext, path: UPath) -> pd.DataFrame:
        """Only the columns the input's ``columns`` metadata names, if it names any (those
        present in the file: a column an older table lacks is left out, as before). From
        the run's table cache when the file is the one the cached table came from."""
        columns = (context.definition_metadata or {}).get("columns")
        local = _local(path)
        if self._cache is None or local is None:
            return read_parquet(path, columns)
        cached = self._cache.get(str(path), file_stamp(str(local)), columns)
        if cached is not None:
            return cached
        if columns:
            return read_parquet(path, columns)
        with local.open("rb") as fh:  # read whole, kept for the run's next consumers
            stamp = FileStamp.of(os.fstat(fh.fileno()))
            table = pq.read_table(fh, use_pandas_metadata=True)
        frame = frame_from_arrow(table)
        self._cache.put(str(path), stamp, table, frame)
        return frame

    def get_metadata(self, context: dg.OutputContext, obj: pd.DataFrame
                     ) -> dict[str, Any]:
        return {
            "dagster/row_count": dg.MetadataValue.int(len(obj)),
            "dagster/column_schema": frame_schema(obj),
        }

    def handle_output(self, context: dg.OutputContext, obj: pd.DataFrame | Frames) -> None:
        if not context.has_asset_partitions:
            super().handle_output(context, obj)
            return
        keys = list(context.asset_partition_keys)
        frames = by_partition(obj, keys, context.asset_key.to_user_string())
        paths = self._get_paths_for_partitions(context)
        metadata: dict[str, dict[str, Any]] = {}
        written: dict[str, tuple[pa.Table, FileStamp | None]] = {}
        for key in keys:
            path = paths[key]
            written[key] = self._dump(context, frames[key], path)
            metadata[key] = {"path": dg.MetadataValue.path(str(path)),
                             **self.get_metadata(context, frames[key])}
        if len(keys) == 1:
            context.add_output_metadata(metadata[keys[0]])
        else:  # output metadata would land on every partition's materialization alike
            add_batches_metadata(context.step_context, metadata, context.asset_key, keys)
        reference = (context.definition_metadata or {}).get(INDEXER)
        if reference:  # once per run, after every partition's own file is written
            indexer = resolve_indexer(str(reference))
            derived = {}
            for key, (table, _stamp) in written.items():
                present = [c for c in indexer.columns if c in table.column_names]
                # what a reader of those columns gets, as the report read it before
                derived[key] = indexer.derive(frame_from_arrow(table.select(present)), key)
            update_index(self.index_dir(context.asset_key), indexer, derived,
                         {k: stamp for k, (_table, stamp) in written.items()}, paths)

    def index_dir(self, key: dg.AssetKey) -> UPath:
        """``<base>/_index/<asset key path>/``: one Parquet per index table."""
        return self._base_path.joinpath("_index", *key.path)

    def _load_indexed(self, context: dg.InputContext, indexer: PartitionIndexer
                      ) -> IndexedPartitions:
        """The upstream partitions' index: what the index answers for, and the tables of
        the others (not indexed, or written since) derived from their files, which go into
        the index too, so the next report finds them there (#12.5)."""
        keys = list(context.asset_partition_keys)
        paths = self._get_paths_for_partitions(context)
        index_dir = self.index_dir(context.asset_key)
        found = read_index(index_dir, indexer, keys, paths)
        derived: dict[str, Mapping[str, pd.DataFrame]] = {}
        stamps: dict[str, FileStamp | None] = {}
        allow_missing = bool((context.definition_metadata or {}).get(
            "allow_missing_partitions"))
        for key in found.stale:
            try:
                frame, stamps[key] = _read_columns(paths[key], indexer.columns)
            except FileNotFoundError:
                if allow_missing:
                    continue  # a batch whose summaries are gone is left out, as before
                raise
            derived[key] = indexer.derive(frame, key)
        if derived:
            update_index(index_dir, indexer, derived, stamps, paths)
        present = [k for k in keys if k in found.answered or k in derived]
        tables = {}
        for name in indexer.tables:
            parts = [table_with_partition(d[name], k) for k, d in derived.items()]
            if name in found.tables:
                parts.insert(0, found.tables[name])
            tables[name] = (pd.concat(parts, ignore_index=True) if len(parts) > 1
                            else parts[0] if parts else pd.DataFrame({PARTITION: []}))
        return IndexedPartitions(present, tables, set(present), list(derived))

    def load_input(self, context: dg.InputContext
                   ) -> pd.DataFrame | Frames | IndexedPartitions | None:
        """An input typed ``dict[str, DataFrame]`` always gets a dict keyed by batch; one
        with ``from_index`` metadata gets the upstream asset's index.

        Dagster's loader hands a bare DataFrame when exactly one partition is loaded, which
        loses the batch name; asking for the dict keeps it.
        """
        reference = (context.definition_metadata or {}).get(FROM_INDEX)
        if reference and context.has_asset_partitions:
            return self._load_indexed(context, resolve_indexer(str(reference)))
        loaded = super().load_input(context)
        if not (context.has_asset_partitions
                and is_dict_type(context.dagster_type.typing_type)):
            return loaded
        if loaded is None:
            return {}
        if isinstance(loaded, pd.DataFrame):
            return {context.asset_partition_keys[0]: loaded}
        return dict(loaded)


@lru_cache(maxsize=256)
def column_schema(columns: tuple[tuple[str, str], ...]) -> dg.TableSchema:
    """One schema object per set of columns and types (every batch of an asset has the
    same; building it per batch was a tenth of the writes' CPU)."""
    return dg.TableSchema(columns=[dg.TableColumn(name, dtype) for name, dtype in columns])


_FRAME_SCHEMAS: dict[tuple[object, ...], dg.TableSchema] = {}


def frame_schema(frame: pd.DataFrame) -> dg.TableSchema:
    """:func:`column_schema` of the frame's column names and dtypes as text, looked up by
    the names and dtype objects themselves: naming every dtype of every table (a Series of
    dtypes, then ``str`` of each) was most of the schema's cost, some 0.2 s of CPU in a
    corpora run (#12.4). Equal dtypes have the same text, so a frame whose columns or
    dtypes differ gets its own schema (``test_io_manager_metadata.py``)."""
    try:
        key: tuple[object, ...] = (tuple(frame.columns), tuple(frame._mgr.get_dtypes()))
        found = _FRAME_SCHEMAS.get(key)
    except (AttributeError, TypeError):  # another pandas internals, an unhashable dtype
        return column_schema(tuple((str(c), str(t)) for c, t in frame.dtypes.items()))
    if found is None:
        found = column_schema(tuple((str(c), str(t)) for c, t in frame.dtypes.items()))
        if len(_FRAME_SCHEMAS) < _MAX_SCHEMAS:
            _FRAME_SCHEMAS[key] = found
    return found


def _read_columns(path: UPath, columns: Sequence[str]) -> tuple[pd.DataFrame, FileStamp | None]:
    """``columns`` (those present) of a table, as ``pd.read_parquet`` gives them, and the
    file's identity as read (local stores)."""
    local = _local(path)
    if local is None:
        return read_parquet(path, columns), None
    with local.open("rb") as fh:
        stamp = FileStamp.of(os.fstat(fh.fileno()))
        present = set(pq.read_schema(fh).names)
        fh.seek(0)
        table = pq.read_table(fh, columns=[c for c in columns if c in present],
                              use_pandas_metadata=True)
    return frame_from_arrow(table), stamp


def read_parquet(path: UPath, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A table of the store, local or under any fsspec URL: opened through fsspec and read
    from the handle (pandas and pyarrow given a ``memory://`` or ``s3://`` path object
    cannot open it themselves). ``columns``: only those present in the file. Converted as
    ``pd.read_parquet`` converts, but for the ``steps`` column, which stays Arrow
    (:func:`~eval_pipeline.defs.pipeline.table_cache.frame_from_arrow`)."""
    with path.open("rb") as fh:
        if not columns:
            return frame_from_arrow(pq.read_table(fh, use_pandas_metadata=True))
        present = set(pq.read_schema(fh).names)
        fh.seek(0)
        return frame_from_arrow(pq.read_table(fh, columns=[c for c in columns if c in present],
                                              use_pandas_metadata=True))


def by_partition(obj: pd.DataFrame | Mapping[str, pd.DataFrame], keys: list[str],
                 asset: str) -> Frames:
    """The per-batch tables of an output; a bare DataFrame is accepted for a single batch."""
    if isinstance(obj, pd.DataFrame):
        if len(keys) != 1:
            raise TypeError(f"{asset}: a run over {len(keys)} batches must return "
                            "dict[batch, DataFrame], got one DataFrame")
        return {keys[0]: obj}
    if not isinstance(obj, Mapping) or set(obj) != set(keys):
        got = sorted(obj) if isinstance(obj, Mapping) else type(obj).__name__
        raise TypeError(f"{asset}: expected one DataFrame per batch of the run {keys}, "
                        f"got {got}")
    return dict(obj)


class ParquetIOManager(dg.ConfigurableIOManagerFactory):
    """Parquet files at ``<base_path>/<asset key path>/<partition>.parquet``."""

    base_path: str | None = None
    """A folder or any fsspec URL (``s3://bucket/prefix``, ``file:///...``, ``memory://``).
    Default: the store's assets location (see :mod:`eval_pipeline.store`)."""
    cache_mb: int = DEFAULT_BUDGET_MB
    """At most this many MB of the run's tables kept in memory for its later steps in the
    same process (local stores; 0: none). See :mod:`eval_pipeline.defs.pipeline.table_cache`."""

    def create_io_manager(self, context: dg.InitResourceContext) -> ParquetUPathIOManager:
        base = self.base_path or resolve_store().assets
        cache = None
        if self.cache_mb > 0:
            cache = TABLE_CACHE
            cache.begin_run(context.run_id, self.cache_mb * 2**20)
        return ParquetUPathIOManager(base_path=UPath(os.path.expanduser(base)), cache=cache)
