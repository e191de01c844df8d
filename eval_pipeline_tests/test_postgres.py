"""The Dagster instance on a real PostgreSQL server, configured only by the shipped
``dagster.postgres.yaml`` and environment variables: several CLI workers record their batch
runs into it at once, and the event log is in the database, not in SQLite files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg
import pytest

from eval_pipeline.cli import main
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION
from eval_pipeline_tests.postgres_server import missing_reason, postgres_server

POSTGRES_TEMPLATE = Path(__file__).resolve().parents[1] / "eval_pipeline" / "dagster.postgres.yaml"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(missing_reason() is not None,
                                 reason=missing_reason() or "")]


@pytest.fixture
def postgres_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """DAGSTER_HOME with the shipped Postgres config, a server, and its variables set."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(POSTGRES_TEMPLATE, home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with postgres_server() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield home, server


def test_the_shipped_config_reads_every_connection_setting_from_the_environment(
        postgres_home):
    home, server = postgres_home
    text = (home / "dagster.yaml").read_text("utf-8")
    assert server.password not in text and str(server.port) not in text
    with dg.DagsterInstance.get() as instance:
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        instance.add_dynamic_partitions(BATCHES_PARTITION, ["probe01"])
        # The instance's own view of its settings names the variable, not the password.
        assert server.password not in repr(instance.get_settings("storage"))
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT partition FROM dynamic_partitions WHERE partitions_def_name = %s",
                    (BATCHES_PARTITION,))
        assert cur.fetchall() == [("probe01",)]
    conn.close()


def test_parallel_workers_evaluate_every_batch_into_one_postgres_instance(
        postgres_home, project_root, tmp_path, capsys):
    home, server = postgres_home
    out = tmp_path / "out"
    assert main(["run", str(project_root / "data"), "--output", str(out),
                 "--workers", "3"]) == 0
    printed = capsys.readouterr()
    assert server.password not in printed.out + printed.err

    with dg.DagsterInstance.get() as instance:
        keys = set(instance.get_dynamic_partitions(BATCHES_PARTITION))
        assert len(keys) == 4  # sample_agent_runs01..03, sample_malformed01
        for asset in ("raw_trajectories", "averaged_scores", "trajectory_summaries"):
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == keys, asset
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"eval_pipeline/source": "cli"}))
        batch_runs = [r for r in runs if r.job_name == "evaluate_batch"]
        pids = set()
        for run in batch_runs:
            (start,) = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_START)
            assert start.dagster_event is not None
            pids.add(start.dagster_event.pid)
    # The batch runs happened in the worker processes (at most three, each taking the next
    # run as it finished one), none of them this one.
    assert len(batch_runs) >= 2 and 1 <= len(pids) <= 3
    assert os.getpid() not in pids

    # The event log is in the database: every batch's summaries materialization is a row.
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT DISTINCT partition FROM event_logs "
                    "WHERE dagster_event_type = 'ASSET_MATERIALIZATION' AND asset_key = %s",
                    (dg.AssetKey("trajectory_summaries").to_string(),))
        assert {row[0] for row in cur.fetchall()} == keys
        cur.execute("SELECT count(*) FROM runs")
        row = cur.fetchone()
        assert row is not None and row[0] == len(runs)
    conn.close()
    # ... and not in SQLite files beside the instance config.
    assert not (home / "history" / "runs.db").exists()
    assert not list((home / "storage").glob("*.db"))
    assert (out / "evaluated.jsonl").is_file()
