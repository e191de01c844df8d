"""How the UI's runs execute their steps, chosen by configuration (``$EVAL_PIPELINE_EXECUTOR``).

- ``multiprocess`` (default): a process per step on the machine that runs the run; judges of
  one batch range run beside each other. ``max_concurrent`` is a run config setting
  (Launchpad: ``execution: config: max_concurrent: 2``), else the number of CPUs.
- ``in_process``: every step in the run's process (a small machine, debugging).
- ``k8s``: a Kubernetes Job per step (``dagster-k8s``, the ``deploy`` extra). Under the
  Helm chart's ``K8sRunLauncher`` it inherits image, namespace and secrets from the launcher;
  anything else per run: ``execution: config: {job_namespace, env_secrets, max_concurrent,
  step_k8s_config, ...}``.

The CLI and the tests run in-process whatever is set here (``execute_in_process``,
``materialize``): the choice matters for runs the UI, the sensors and the daemon launch.
"""

from __future__ import annotations

import os

import dagster as dg

EXECUTOR_ENV = "EVAL_PIPELINE_EXECUTOR"
EXECUTORS = ("multiprocess", "in_process", "k8s")


def executor_from_env() -> dg.ExecutorDefinition:
    choice = (os.environ.get(EXECUTOR_ENV) or "multiprocess").strip().lower()
    if choice == "multiprocess":
        return dg.multiprocess_executor
    if choice == "in_process":
        return dg.in_process_executor
    if choice == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError:
            raise dg.DagsterInvalidDefinitionError(
                f"{EXECUTOR_ENV}=k8s needs dagster-k8s: pip install -e '.[deploy]'") from None
        return k8s_job_executor
    raise dg.DagsterInvalidDefinitionError(
        f"{EXECUTOR_ENV}={choice!r}: expected one of {', '.join(EXECUTORS)}")
