"""#12.4: the event log the CLI's instance uses stores what Dagster's own class reads."""


import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from eval_pipeline.defs.pipeline.event_log import FastSqliteEventLogStorage
from eval_pipeline.local_run import ensure_dagster_home


@dg.asset(partitions_def=dg.StaticPartitionsDefinition(["a", "b"]))
def numbers(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"n": len(context.partition_key)})



def test_cli_instance_writes_history_that_dagsters_own_storage_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    ensure_dagster_home()
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        inner = getattr(storage, "_storage", storage)
        assert isinstance(inner, FastSqliteEventLogStorage)
        for key in ("a", "b"):
            assert dg.materialize([numbers], instance=instance, partition_key=key).success
        assert set(instance.get_materialized_partitions(dg.AssetKey("numbers"))) == {"a", "b"}
    plain = tmp_path / "plain"
    shutil.copytree(home, plain)
    config = plain / "dagster.yaml"
    config.write_text(re.sub(
        r"event_log_storage:\n  module: eval_pipeline.defs.pipeline.event_log\n"
        r"  class: FastSqliteEventLogStorage\n  config:\n    base_dir: .*\n", "",
        config.read_text("utf-8")), "utf-8")
    assert "FastSqliteEventLogStorage" not in config.read_text("utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(plain))
    with dg.DagsterInstance.get() as instance:
        inner = getattr(instance.event_log_storage, "_storage", instance.event_log_storage)
        assert type(inner).__name__ == "SqliteEventLogStorage"
        assert set(instance.get_materialized_partitions(dg.AssetKey("numbers"))) == {"a", "b"}
        event = instance.get_latest_materialization_event(dg.AssetKey("numbers"))
        assert event is not None and event.asset_materialization is not None


def test_an_instance_file_the_previous_cli_wrote_is_brought_up_to_date(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from eval_pipeline.local_run import INSTANCE_TEMPLATE, instance_yaml

    home = tmp_path / "home"
    home.mkdir()
    previous = subprocess.run(
        ["git", "show", "0972e0e7:eval_pipeline/dagster.yaml"], capture_output=True,
        text=True, cwd=INSTANCE_TEMPLATE.parents[1])
    if previous.returncode != 0:
        pytest.skip("the previous template is not in this checkout's history")
    (home / "dagster.yaml").write_text(previous.stdout, "utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    ensure_dagster_home()
    assert (home / "dagster.yaml").read_text("utf-8") == instance_yaml(home)
    (home / "dagster.yaml").write_text(previous.stdout + "# mine\n", "utf-8")
    ensure_dagster_home()  # a file the user changed stays theirs
    assert (home / "dagster.yaml").read_text("utf-8").endswith("# mine\n")


def test_a_watcher_in_another_storage_sees_events_as_they_are_stored(tmp_path: Path) -> None:
    """The UI follows a running run by watching its database file (another process)."""
    import threading
    import time

    from dagster._core.events.log import EventLogEntry

    def entry(message: str) -> EventLogEntry:
        return EventLogEntry(error_info=None, level="INFO", user_message=message,
                             run_id="run1", timestamp=time.time(), step_key=None,
                             job_name=None, dagster_event=None)

    writer = FastSqliteEventLogStorage(str(tmp_path))
    reader = FastSqliteEventLogStorage(str(tmp_path))
    writer.store_event(entry("first"))
    seen: list[str] = []
    arrived = threading.Event()

    def callback(event: EventLogEntry, _cursor: str) -> None:
        seen.append(event.user_message)
        if event.user_message == "second":
            arrived.set()

    reader.watch("run1", None, callback)
    try:
        time.sleep(0.5)
        writer.store_event(entry("second"))
        assert arrived.wait(10), seen
    finally:
        reader.end_watch("run1", callback)
        reader.dispose()
        writer.dispose()


def _materialize_numbers_once(instance: dg.DagsterInstance) -> None:
    for key in ("a", "b"):
        assert dg.materialize([numbers], instance=instance, partition_key=key).success


@pytest.mark.parametrize("written_by", ["cli", "template"])
def test_an_instance_opened_from_its_folder_reads_its_own_history(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written_by: str) -> None:
    """#12.4c: the storage found its folder through $DAGSTER_HOME, so an instance opened
    with from_config(folder) under another DAGSTER_HOME read (and wrote) the other one's
    event log. The CLI's file names the folder; a file without it (the shipped template,
    copied by hand) means the instance's own folder."""
    from eval_pipeline.local_run import INSTANCE_TEMPLATE

    mine = tmp_path / "mine"
    monkeypatch.setenv("DAGSTER_HOME", str(mine))
    ensure_dagster_home()
    if written_by == "template":
        (mine / "dagster.yaml").write_text(INSTANCE_TEMPLATE.read_text("utf-8"), "utf-8")
    else:
        assert f'base_dir: "{mine.resolve() / "history" / "runs"}"' in (
            mine / "dagster.yaml").read_text("utf-8")
    other = tmp_path / "other"
    monkeypatch.setenv("DAGSTER_HOME", str(other))
    ensure_dagster_home()
    with dg.DagsterInstance.from_config(str(mine)) as instance:
        _materialize_numbers_once(instance)
    with dg.DagsterInstance.get() as instance:  # $DAGSTER_HOME: the other instance
        assert instance.get_materialized_partitions(dg.AssetKey("numbers")) == set()
    assert not (other / "history" / "runs" / "index.db").exists() or not any(
        (other / "history" / "runs").glob("*-*.db"))
    with dg.DagsterInstance.from_config(str(mine)) as instance:
        assert instance.get_materialized_partitions(dg.AssetKey("numbers")) == {"a", "b"}
        inner = instance.event_log_storage
        assert isinstance(inner, FastSqliteEventLogStorage)
        assert Path(inner._base_dir) == mine.resolve() / "history" / "runs"


def test_a_file_the_cli_wrote_for_another_folder_names_this_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home copied or moved elsewhere: its event log folder follows on the next CLI run
    (the file is the CLI's), so the copy does not write into the original's history."""
    from eval_pipeline.local_run import instance_yaml

    old, new = tmp_path / "old", tmp_path / "new"
    monkeypatch.setenv("DAGSTER_HOME", str(old))
    ensure_dagster_home()
    shutil.copytree(old, new)
    monkeypatch.setenv("DAGSTER_HOME", str(new))
    ensure_dagster_home()
    assert (new / "dagster.yaml").read_text("utf-8") == instance_yaml(new)
    assert str(old) not in (new / "dagster.yaml").read_text("utf-8")


CHECKED = dg.AssetCheckSpec("positive", asset="tables")


@dg.asset(partitions_def=dg.StaticPartitionsDefinition(["a", "b", "c", "d"]),
          backfill_policy=dg.BackfillPolicy.single_run(), check_specs=[CHECKED],
          code_version="1")
def tables(context: dg.AssetExecutionContext):
    import pandas as pd

    yield dg.Output({k: pd.DataFrame({"x": [i]}) for i, k in
                     enumerate(context.partition_keys)})
    yield dg.AssetCheckResult(check_name="positive", passed=True)


def _index_rows(home: Path) -> dict[str, list[tuple]]:
    """The index database's asset rows, without ids, times and run ids."""
    import sqlite3

    with sqlite3.connect(home / "history" / "runs" / "index.db") as db:
        return {
            "event_logs": sorted(db.execute(
                "select dagster_event_type, asset_key, partition from event_logs")),
            "tags": sorted(db.execute("select asset_key, key, value from asset_event_tags")),
            # each tag on its own event's row (the ids a batch insert returns, in order)
            "tagged_events": sorted(db.execute(
                "select e.partition, e.dagster_event_type, t.key, t.value, "
                "t.event_timestamp = e.timestamp from asset_event_tags t "
                "join event_logs e on e.id = t.event_id")),
            "asset_keys": sorted(db.execute(
                "select asset_key, last_materialization is not null, last_run_id is not null,"
                " last_materialization_timestamp is not null from asset_keys")),
            "checks": sorted(db.execute(
                "select asset_key, check_name, partition, execution_status "
                "from asset_check_executions")),
        }


def _run_tables(home: Path, monkeypatch: pytest.MonkeyPatch, batch_size: str
                ) -> tuple[dict[str, list[tuple]], dict[str, object], list[int]]:
    from eval_pipeline.defs.pipeline.io_manager import ParquetIOManager

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", batch_size)
    ensure_dagster_home()
    batches: list[int] = []
    original = FastSqliteEventLogStorage.store_event_batch

    def spy(self: FastSqliteEventLogStorage, events) -> None:
        batches.append(len(events))
        original(self, events)

    monkeypatch.setattr(FastSqliteEventLogStorage, "store_event_batch", spy)
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize(
            [tables], instance=instance, resources={"io_manager": ParquetIOManager(
                base_path=str(home.parent / "assets"))},
            tags={"dagster/asset_partition_range_start": "a",
                  "dagster/asset_partition_range_end": "d"})
        assert result.success
        key = dg.AssetKey("tables")
        record = instance.get_asset_records([key])[0].asset_entry
        last = record.last_materialization_record
        seen = {
            "materialized": instance.get_materialized_partitions(key),
            "last_partition": last.event_log_entry.dagster_event.partition if last else None,
            "last_run_is_the_run": record.last_run_id == result.run_id,
            "data_versions": {p: instance.get_latest_data_version_record(
                key, partition_key=p) is not None for p in "abcd"},
            "metadata": {r.partition_key: sorted(r.asset_materialization.metadata)
                         for r in instance.fetch_materializations(key, limit=10).records},
            "planned": sorted(
                r.partition_key or "" for r in instance.fetch_planned_materializations(
                    key, limit=10).records),
        }
    monkeypatch.undo()  # the spy and the variables; the fixture's home comes back next
    return _index_rows(home), seen, batches


def test_a_batch_of_asset_events_is_stored_as_dagster_stores_them_one_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """store_event_batch leaves the rows, tags, asset entries and check plans that one
    store_event per event leaves; and the instance hands the storage batches when this
    storage sets DAGSTER_EVENT_BATCH_SIZE (one per output, one for the planned events)."""
    one_rows, one_seen, one_batches = _run_tables(tmp_path / "one", monkeypatch, "0")
    rows, seen, batches = _run_tables(tmp_path / "batched", monkeypatch, "1000")
    assert one_batches == [] and sorted(batches) == [4, 5]  # 4 materializations; 4 + 1 plans
    assert rows == one_rows
    assert {row[0] for row in rows["tagged_events"]} == set("abcd")  # every batch's tags
    assert all(row[-1] for row in rows["tagged_events"])  # on their own events
    assert seen == one_seen
    assert seen["last_partition"] in set("abcd") and seen["last_run_is_the_run"]
    assert set(seen["materialized"]) == set("abcd")  # type: ignore[call-overload]
    assert [row[0] for row in rows["asset_keys"]] == ['["tables"]']


def test_the_storage_turns_batching_on_unless_the_user_chose(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from eval_pipeline.defs.pipeline.event_log import BATCH_SIZE_ENV, EVENT_BATCH_SIZE

    FastSqliteEventLogStorage(str(tmp_path / "a")).dispose()
    assert os.environ[BATCH_SIZE_ENV] == EVENT_BATCH_SIZE
    monkeypatch.setenv(BATCH_SIZE_ENV, "0")
    FastSqliteEventLogStorage(str(tmp_path / "b")).dispose()
    assert os.environ[BATCH_SIZE_ENV] == "0"
