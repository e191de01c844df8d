"""One store per instance: what the CLI materialized, the UI's code location re-materializes,
and a batch whose file is gone is a named state, not a daily failure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline.definitions import defs
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION
from eval_pipeline.store import STORE_ENV, STORE_RECORD, resolve_store
from eval_pipeline_tests.dagster_helpers import build_definitions_for


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def test_store_resolution_order(tmp_path, monkeypatch, dagster_home):
    dagster_home.mkdir()
    (dagster_home / STORE_RECORD).write_text(str(tmp_path / "recorded") + "\n")
    assert resolve_store(tmp_path / "explicit").root == tmp_path / "explicit"
    assert resolve_store().root == tmp_path / "store"  # the environment variable
    monkeypatch.delenv(STORE_ENV)
    assert resolve_store().root == tmp_path / "recorded"  # what the instance remembers
    (dagster_home / STORE_RECORD).unlink()
    assert resolve_store().root.name == "data"  # run from the project: its data/ folder


@pytest.mark.slow
def test_the_ui_location_rematerializes_what_the_cli_made(
        project_root, tmp_path, monkeypatch, dagster_home, capsys):
    store = tmp_path / "shared_store"
    out = tmp_path / "out"
    assert main(["run", str(project_root / "data"), "--output", str(out),
                 "--store", str(store)]) == 0
    assert f"store (batches, asset Parquet): {store}" in capsys.readouterr().out
    # The store holds the batches and Parquet; --output only this run's exports.
    assert (store / "batches").is_dir() and (store / "assets" / "averaged_scores").is_dir()
    assert not (out / "batches").exists() and not (out / "assets").exists()
    assert (out / "evaluated.jsonl").is_file()

    # The UI: the same DAGSTER_HOME, no store setting; the instance remembers the store.
    monkeypatch.delenv(STORE_ENV)
    location = defs()
    with dg.DagsterInstance.get() as instance:
        keys = instance.get_dynamic_partitions(BATCHES_PARTITION)
        assert "sample_agent_runs01" in keys
        before = instance.get_latest_materialization_event(
            dg.AssetKey("averaged_scores")).asset_materialization
        # a downstream asset alone, its inputs read from the CLI's Parquet
        downstream = location.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, partition_key="sample_agent_runs01",
            asset_selection=[dg.AssetKey("averaged_scores")])
        assert downstream.success
        # and a whole batch, as "Materialize all" for one partition launches it
        whole = location.resolve_job_def("evaluate_batch").execute_in_process(
            instance=instance, partition_key=keys[-1])
        assert whole.success
        after = instance.get_latest_materialization_event(
            dg.AssetKey("averaged_scores")).asset_materialization
    assert after.partition == keys[-1] and before is not None
    path = Path(after.metadata["path"].value)
    assert path.is_relative_to(store / "assets") and len(pd.read_parquet(path)) > 0
    assert len(pd.read_parquet(store / "assets" / "averaged_scores"
                               / "sample_agent_runs01.parquet")) > 0

    # The next CLI run works on the same store and instance, UI materializations included.
    again = tmp_path / "again"
    assert main(["run", str(project_root / "data" / "incoming" / "sample_agent_runs.jsonl"),
                 "--output", str(again)]) == 0
    assert f"store (batches, asset Parquet): {store}" in capsys.readouterr().out
    summaries = pd.read_parquet(again / "trajectory_summaries.parquet")
    # only this run's batches are exported, though the store holds sample_malformed's too
    assert {b.rstrip("0123456789") for b in summaries["batch"]} == {"sample_agent_runs"}
    assert (store / "assets" / "trajectory_summaries" / "sample_malformed01.parquet").exists()


def test_a_batch_whose_file_is_gone_fails_in_one_line_and_is_not_rerun_daily(
        tmp_path, instance):
    location = build_definitions_for(tmp_path)
    instance.add_dynamic_partitions(BATCHES_PARTITION, ["ghost01"])
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(1)
    first = dg.evaluate_automation_conditions(defs=location, instance=instance,
                                              evaluation_time=day.replace(hour=2))
    # The daily catch-up tries a missing batch once: nothing says its file is gone yet.
    due = dg.evaluate_automation_conditions(defs=location, instance=instance,
                                            evaluation_time=day.replace(hour=3, minute=1),
                                            cursor=first.cursor)
    assert due.get_requested_partitions(dg.AssetKey("raw_trajectories")) == {"ghost01"}
    result = location.resolve_job_def("evaluate_batch").execute_in_process(
        partition_key="ghost01", instance=instance, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    error = failure.step_failure_data.error
    assert error is not None
    message = error.message.strip()
    assert "\n" not in message and "ghost01" in message
    assert str(tmp_path / "batches") in message and "incoming folder" in message

    # Its run failed where the batch file is read: the next days do not request it again
    # (the report, never made, is requested; it reads the batches it finds).
    later = dg.evaluate_automation_conditions(
        defs=location, instance=instance, cursor=due.cursor,
        evaluation_time=day + timedelta(days=1, hours=3, minutes=1))
    keys = location.resolve_asset_graph().get_all_asset_keys()
    assert not any("ghost01" in later.get_requested_partitions(k) for k in keys)


def test_forget_unregisters_batches(dagster_home, capsys):
    dagster_home.mkdir()
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(BATCHES_PARTITION, ["a01", "a02"])
    assert main(["forget", "a01", "nope01"]) == 1
    printed = capsys.readouterr().out
    assert "forgot: a01" in printed and "not registered: nope01" in printed
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions(BATCHES_PARTITION) == ["a02"]



def test_the_shipped_instance_template_is_what_a_new_home_gets_and_is_valid(
        dagster_home, tmp_path):
    from eval_pipeline.local_run import INSTANCE_TEMPLATE, ensure_dagster_home, instance_yaml

    assert ensure_dagster_home() == dagster_home
    written = (dagster_home / "dagster.yaml").read_text("utf-8")
    assert written == instance_yaml(dagster_home)
    # The template plus the event log's folder, absolute (#12.4c).
    folder = dagster_home.resolve() / "history" / "runs"
    assert written.replace(f'  config:\n    base_dir: "{folder}"\n', "") == (
        INSTANCE_TEMPLATE.read_text("utf-8"))
    # Its commented settings are valid Dagster instance config once a user enables them
    # (Postgres aside: it needs dagster-postgres).
    lines = written.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# storage:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("# "))
    enabled = "\n".join(
        line.removeprefix("# ") if line.startswith(("# run_queue", "#   max_concurrent",
                                                    "# run_retries", "#   enabled",
                                                    "#   max_retries")) else line
        for i, line in enumerate(lines) if not start <= i < end)
    assert "max_concurrent_runs: 2" in enabled and "\nrun_retries:" in enabled
    home = tmp_path / "edited"
    home.mkdir()
    (home / "dagster.yaml").write_text(enabled, "utf-8")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_retries_max_retries == 1
        assert instance.get_settings("telemetry") == {"enabled": False}
    # A file the user edited is theirs.
    (dagster_home / "dagster.yaml").write_text(enabled, "utf-8")
    ensure_dagster_home()
    assert (dagster_home / "dagster.yaml").read_text("utf-8") == enabled


@pytest.mark.parametrize("turn", [1, 2])
def test_the_home_the_cli_sets_does_not_leak_into_the_next_test(
        turn: int, tmp_path: Path, isolated_dagster_home: Path) -> None:
    """``ensure_dagster_home`` sets ``os.environ["DAGSTER_HOME"]`` for the process, as the
    CLI must; the test suite's fixture gives every test its own home back (the second turn
    fails if the first one's home leaked)."""
    import os

    from eval_pipeline.local_run import ensure_dagster_home

    assert os.environ["DAGSTER_HOME"] == str(isolated_dagster_home)
    os.environ["DAGSTER_HOME"] = str(tmp_path / f"cli_home_{turn}")  # not monkeypatched
    assert ensure_dagster_home() == (tmp_path / f"cli_home_{turn}").resolve()
    assert os.environ["DAGSTER_HOME"] == str((tmp_path / f"cli_home_{turn}").resolve())
