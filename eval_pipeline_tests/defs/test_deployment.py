"""Growing past one machine by configuration only: the UI's executor, and the deployment
configuration of the README (Postgres instance, Kubernetes executor, Parquet in an object
store) validated by Dagster's own `dagster definitions validate`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from eval_pipeline.definitions import defs
from eval_pipeline.defs.pipeline.executor import EXECUTOR_ENV, executor_from_env
from eval_pipeline_tests.postgres_server import missing_reason, postgres_server

POSTGRES_TEMPLATE = (Path(__file__).resolve().parents[2] / "eval_pipeline"
                     / "dagster.postgres.yaml")


def test_the_ui_runs_steps_in_processes_by_default(monkeypatch):
    monkeypatch.delenv(EXECUTOR_ENV, raising=False)
    loaded = defs()
    assert loaded.executor is not None and loaded.executor.name == "multiprocess"
    job = loaded.resolve_job_def("evaluate_batch")
    assert job.executor_def.name == "multiprocess"
    # Steps at once is a run setting (Launchpad), not code.
    assert dg.validate_run_config(job, {"execution": {"config": {"max_concurrent": 2}}})
    monkeypatch.setenv(EXECUTOR_ENV, "in_process")
    assert defs().resolve_job_def("evaluate_batch").executor_def.name == "in_process"
    monkeypatch.setenv(EXECUTOR_ENV, "celery")
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="multiprocess, in_process, k8s"):
        executor_from_env()


def test_the_kubernetes_executor_takes_its_per_run_settings(monkeypatch):
    pytest.importorskip("dagster_k8s", reason="the deploy extra is not installed")
    monkeypatch.setenv(EXECUTOR_ENV, "k8s")
    job = defs().resolve_job_def("evaluate_batch")
    assert job.executor_def.name == "k8s"
    assert dg.validate_run_config(job, {"execution": {"config": {
        "job_namespace": "eval", "max_concurrent": 4, "env_secrets": ["judge-keys"],
        "step_k8s_config": {"container_config": {
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}}}}})
    with pytest.raises(dg.DagsterInvalidConfigError):
        dg.validate_run_config(job, {"execution": {"config": {"no_such_setting": 1}}})


@pytest.mark.slow
@pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")
def test_dagster_validates_the_deployment_configuration(project_root, tmp_path):
    """The README's deployment, as environment: the Postgres instance config, the Kubernetes
    executor, the Parquet in an object store. `dagster definitions validate` loads the code
    location against that instance (it creates the instance's tables in the database)."""
    pytest.importorskip("dagster_k8s", reason="the deploy extra is not installed")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(POSTGRES_TEMPLATE, home / "dagster.yaml")
    with postgres_server() as server:
        env = {**os.environ, **server.env(), "DAGSTER_HOME": str(home),
               EXECUTOR_ENV: "k8s", "EVAL_PIPELINE_ASSETS": "s3://eval-bucket/assets",
               "EVAL_PIPELINE_STORE": str(tmp_path / "store")}
        result = subprocess.run(
            [sys.executable, "-m", "dagster", "definitions", "validate", "-w",
             "workspace.yaml"], cwd=project_root, env=env, capture_output=True, text=True,
            timeout=300)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output
        assert "Validation successful" in output
        assert server.password not in output
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM information_schema.tables "
                        "WHERE table_name IN ('runs', 'event_logs', 'dynamic_partitions')")
            row = cur.fetchone()
        conn.close()
    assert row == (3,)  # the validation ran against the Postgres instance
    assert not (home / "history").exists()
