"""Dagster's SQLite event log, with connections kept open, commits not synced to disk, and
batches of asset events stored in one transaction.

Dagster's ``SqliteEventLogStorage`` opens a new engine and connection for every event it
stores, commits with a full ``fsync`` and closes the connection, which checkpoints the
WAL: three disk waits per event. A run over many batches stores two events per asset and
batch (planned, materialized), and pyinstrument put most of a CLI run on the corpora in
those commits and closes (#12.4). This storage keeps the same files, tables and layout
(``<instance>/history/runs/<run>.db`` and ``index.db``; an existing instance's history
reads as before, and Dagster's own class reads what this one writes), and changes only how
they are written:

- one connection per database, kept open (the index and the few most recent runs' files),
  used under the storage's lock as Dagster's own connections are;
- after each stored event (or batch of events) the run's database file is touched, so the
  UI's watcher of a running run (which watches that file) sees it, as it saw Dagster's
  checkpoints;
- a table or column found once is not looked up again (Dagster checks before every asset
  event);
- ``PRAGMA synchronous=NORMAL``: in WAL mode a commit is written to the log without an
  ``fsync``; the database stays consistent, and a power loss (not a crashed process) can
  lose the last events, which for run history is the trade SQLite documents as the usual
  one for WAL;
- :meth:`store_event_batch`: the events Dagster hands over as one batch (every batch's
  materialization of one asset output, a run's planned events) go into the run's database
  in one statement and into the index in one transaction, and the asset's row in the
  ``asset_keys`` table is written once per asset and kind of event instead of once per event
  (each write replaced the previous one's columns). The instance hands over batches only
  when ``DAGSTER_EVENT_BATCH_SIZE`` is set, so this storage sets it for its process when it
  is not set (see :data:`EVENT_BATCH_SIZE`).

The instance uses it through ``event_log_storage`` in the ``dagster.yaml`` the CLI writes.
Its folder is the ``base_dir`` given there (the CLI writes the instance's own
``history/runs``, an absolute path); without one, the instance's own directory, as Dagster's
default storage does, never ``$DAGSTER_HOME`` (an instance opened with
``DagsterInstance.from_config(folder)`` must not read another one's history).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.events import ASSET_EVENTS
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import create_db_conn_string
from dagster._serdes import ConfigurableClassData
from sqlalchemy import event as sqlalchemy_event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from eval_pipeline.defs.pipeline.event_serdes import serialize_event

if TYPE_CHECKING:
    from dagster._core.instance import DagsterInstance

#: Run databases kept open besides the index (older ones are closed as new runs start).
OPEN_RUN_SHARDS = 4
_BUSY_TIMEOUT_SECONDS = 30.0
BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"
EVENT_BATCH_SIZE = "1000"
"""What this storage sets ``DAGSTER_EVENT_BATCH_SIZE`` to in its process when it is unset.
Dagster's instance reads that variable on every event: above 0 it hands the events a step
emits together (one output's per-batch materializations, a run's planned events) to
:meth:`FastSqliteEventLogStorage.store_event_batch` at the end of the group, at most this
many at a time; a user's own value (0 turns batching off) is kept."""


def events_directory(instance_root: str) -> str:
    """Where Dagster's default SQLite storage keeps an instance's event logs."""
    return os.path.join(instance_root, "history", "runs")


def _synchronous_normal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _entry_kind(event: EventLogEntry) -> str:
    """The columns of the ``asset_keys`` row an asset event writes depend only on its
    kind: a later event of the same kind and asset rewrites every column an earlier one
    wrote."""
    dagster_event = event.get_dagster_event()
    if dagster_event.is_step_materialization:
        return "materialization"
    if dagster_event.is_asset_materialization_planned:
        return "planned"
    if dagster_event.is_asset_observation:
        return "observation"
    return dagster_event.event_type_value


class FastSqliteEventLogStorage(SqliteEventLogStorage):
    """:class:`SqliteEventLogStorage` with kept-open connections, WAL commits without
    ``fsync`` and batched asset events (see the module docstring)."""

    def __init__(self, base_dir: str | None = None,
                 inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        self._tables: set[str] = set()
        self._asset_key_index_cols = False
        self._deferred_inst_data = inst_data
        self._ready = False
        os.environ.setdefault(BATCH_SIZE_ENV, EVENT_BATCH_SIZE)
        if base_dir:
            self._open(base_dir, inst_data)
        else:  # the instance's own folder, known once the instance registers
            super(SqliteEventLogStorage, self).__init__()

    def _open(self, base_dir: str, inst_data: ConfigurableClassData | None) -> None:
        super().__init__(base_dir, inst_data)
        self._ready = True

    def register_instance(self, instance: DagsterInstance) -> None:
        if not self._ready:
            self._open(events_directory(instance.root_directory), self._deferred_inst_data)
        super().register_instance(instance)

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {"base_dir": dg.Field(dg.StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,
                          config_value: Mapping[str, Any]) -> FastSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is not None:
                self._engines.move_to_end(shard)
                return engine
            engine = create_engine(
                create_db_conn_string(self._base_dir, shard), poolclass=StaticPool,
                connect_args={"timeout": _BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
            sqlalchemy_event.listen(engine, "connect", _synchronous_normal)
            self._engines[shard] = engine
            runs = [s for s in self._engines if s != "index"]
            for old in runs[:-OPEN_RUN_SHARDS]:
                self._engines.pop(old).dispose()
            return engine

    def _touch(self, run_id: str) -> None:
        """The UI follows a running run by watching its database file, which Dagster's own
        class modifies by checkpointing the WAL as it closes each connection; a kept-open
        connection leaves the events in the WAL, so the file's mtime is what tells the
        watcher."""
        if run_id:
            with contextlib.suppress(OSError):
                os.utime(self.path_for_shard(run_id))

    def _event_to_row(self, event: EventLogEntry) -> dict[str, Any]:
        """The row Dagster's storage writes for ``event`` (the same columns and values),
        the event serialized by :func:`serialize_event`: the same text, each table schema
        packed once per process instead of once per event (#12.4)."""
        dagster_event_type = asset_key = partition = None
        step_key = event.step_key
        if event.is_dagster_event:
            dagster_event = event.get_dagster_event()
            dagster_event_type = dagster_event.event_type_value
            step_key = dagster_event.step_key
            if dagster_event.asset_key:
                asset_key = dagster_event.asset_key.to_string()
            if dagster_event.partition:
                partition = dagster_event.partition
        return {
            "run_id": event.run_id,
            "event": serialize_event(event),
            "dagster_event_type": dagster_event_type,
            "timestamp": self._event_insert_timestamp(event),
            "step_key": step_key,
            "asset_key": asset_key,
            "partition": partition,
        }

    def store_event(self, event: EventLogEntry) -> None:
        """Stored as Dagster stores it, then the run's database file is touched."""
        super().store_event(event)
        self._touch(event.run_id)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """The same rows as :meth:`store_event` for each event, in fewer transactions.

        Each event is serialized once, the run's rows inserted in one statement, and the
        asset events mirrored into the index in one transaction: their rows and tags as
        one by one, and the ``asset_keys`` row of each asset written by the last event of
        each kind only, which leaves it as writing it once per event did. Events other
        than asset events (asset check plans) take the one-by-one path after the rest.
        """
        indexed = [e for e in events if e.is_dagster_event and e.dagster_event_type
                   in ASSET_EVENTS and e.get_dagster_event().asset_key is not None]
        chosen = {id(e) for e in indexed}
        others = [e for e in events if id(e) not in chosen]
        rows = [(e, self._event_to_row(e)) for e in indexed]
        by_run: dict[str, list[dict[str, Any]]] = {}
        for e, row in rows:
            by_run.setdefault(e.run_id, []).append(row)
        for run_id, run_rows in by_run.items():
            with self.run_connection(run_id) as conn:
                conn.execute(SqlEventLogStorageTable.insert(), run_rows)
        if rows:
            last: dict[tuple[str, str], int] = {}
            for position, (e, _row) in enumerate(rows):
                key = e.get_dagster_event().asset_key
                assert key is not None
                last[(key.to_string(), _entry_kind(e))] = position
            with self.index_transaction() as conn:
                # one executemany, the ids returned in the rows' order (a statement
                # compiled and run per row was a third of storing the events)
                inserted = conn.execute(
                    SqlEventLogStorageTable.insert().returning(
                        SqlEventLogStorageTable.c.id, sort_by_parameter_order=True),
                    [row for _event, row in rows]).all()
                ids = [int(found[0]) for found in inserted if found[0] is not None]
                if len(ids) != len(rows):
                    raise dg.DagsterInvariantViolationError(
                        "Cannot store asset event tags for null event id.")
                self._store_asset_event_tags(conn, [e for e, _row in rows], ids)
                for position in sorted(last.values()):
                    self._store_asset_event(conn, rows[position][0], ids[position])
        for e in others:
            super().store_event(e)
        for run_id in dict.fromkeys(e.run_id for e in events):
            self._touch(run_id)

    def has_table(self, table_name: str) -> bool:
        """Dagster asks before every tagged materialization, each time through a new
        engine; a table once found stays (migrations add tables, never drop them)."""
        if table_name in self._tables:
            return True
        found = super().has_table(table_name)
        if found:
            self._tables.add(table_name)
        return found

    def _has_asset_key_index_cols_on_connection(self, conn: Connection) -> bool:
        """Dagster reflects the asset_keys table's columns before every asset event; once
        there, the column stays."""
        if not self._asset_key_index_cols:
            self._asset_key_index_cols = super()._has_asset_key_index_cols_on_connection(conn)
        return self._asset_key_index_cols

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def dispose(self) -> None:
        with self._engines_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()
        if self._ready:
            super().dispose()
