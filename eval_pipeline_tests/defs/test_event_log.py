"""#12.4: the event log the CLI's instance uses stores what Dagster's own class reads."""


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
    config.write_text(config.read_text("utf-8").replace(
        "event_log_storage:\n  module: eval_pipeline.defs.pipeline.event_log\n"
        "  class: FastSqliteEventLogStorage\n", ""), "utf-8")
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

    from eval_pipeline.local_run import INSTANCE_TEMPLATE

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
    assert (home / "dagster.yaml").read_text("utf-8") == INSTANCE_TEMPLATE.read_text("utf-8")
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
