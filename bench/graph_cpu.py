"""Where a CLI run's CPU time goes, by kind of work (#12.4): a child of bench_pipeline.py.

Run: ``PYTHONPATH=<checkout> python bench/graph_cpu.py INPUT HOME OUT [--detail] [--workers=N]``
(the checkout's
eval_pipeline is the one measured: this file only wraps its functions by name, skipping
those a checkout lacks). Runs ``run_pipeline`` in this process with the heuristic judge and
prints one JSON object: CPU seconds (``time.process_time``, steadier than wall time on a
shared machine) spent inside each kind of work, each counted once however deeply nested:

- ``graph``: the Dagster runs (``local_run._execute``), everything below is inside it;
- ``events``: the instance storing events (``DagsterInstance.handle_new_event``);
- ``writes`` / ``loads``: the IO manager's ``handle_output`` / ``load_input``;
- ``metadata``: the assets' metadata helpers (previews, counts, score statistics, score
  changes, per-asset metadata builders);
- ``stages``: the stage functions the assets call (parse, preprocess, clips, routing, the
  judge, judgment table, averaging, summaries, agreement).

``graph`` minus the others is the assets' own glue and Dagster's step machinery. ``gc``:
the CPU of Python's garbage collections in this process (all of them, wherever they ran;
they are also inside the categories above), ``gc_full`` the number of full collections.

With ``--workers=N`` (N > 1) the runs execute in N spawned processes (the CLI's ``workers``),
where these wrappers do not reach: then only ``cli_cpu`` (this process) and
``children_cpu`` (the workers, user + system, imports included) are meaningful. With
``--no-exports`` the CLI's exports (not orchestration, and most of a CLI run's time) are
skipped, so a benchmark round takes less than half as long.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

CATEGORIES: dict[str, list[str]] = {
    "graph": ["eval_pipeline.local_run:_execute"],
    "events": ["dagster._core.instance.instance:DagsterInstance.handle_new_event"],
    "writes": ["eval_pipeline.defs.pipeline.io_manager:ParquetUPathIOManager.handle_output"],
    "loads": ["eval_pipeline.defs.pipeline.io_manager:ParquetUPathIOManager.load_input"],
    "metadata": [
        *(f"eval_pipeline.defs.pipeline.assets.{m}:preview"
          for m in ("ingest", "routing", "judging", "summaries")),
        "eval_pipeline.defs.pipeline.assets.ingest:counts",
        "eval_pipeline.defs.pipeline.assets.ingest:prefetch",
        "eval_pipeline.defs.pipeline.assets.judging:judgment_metadata",
        "eval_pipeline.defs.pipeline.assets.judging:judgment_changes",
        "eval_pipeline.defs.pipeline.assets.judging:averaged_metadata",
        "eval_pipeline.defs.pipeline.assets.judging:averaged_changes",
        "eval_pipeline.defs.pipeline.assets.judging:prefetch",
        "eval_pipeline.defs.pipeline.assets.judging:upstream_versions",
        "eval_pipeline.defs.pipeline.assets.summaries:summary_metadata",
        "eval_pipeline.defs.pipeline.assets.summaries:summary_changes",
        "eval_pipeline.defs.pipeline.assets.routing:_routing_metadata",
        "eval_pipeline.defs.pipeline.assets.agreement:agreement_markdown",
    ],
    "stages": [
        "eval_pipeline.ingest:read_batch",
        "eval_pipeline.ingest:preprocess_batch",
        "eval_pipeline.ingest:clips_table",
        "eval_pipeline.ingest:clip_tasks",
        "eval_pipeline.defs.pipeline.assets.routing:routing_table",
        "eval_pipeline.defs.pipeline.resources:LLMJudgeResource.run_result",
        "eval_pipeline.defs.pipeline.assets.judging:judgment_table",
        "eval_pipeline.defs.pipeline.assets.judging:average_judgments",
        "eval_pipeline.defs.pipeline.assets.summaries:summarize_trajectories",
        "eval_pipeline.defs.pipeline.assets.agreement:build_agreement",
    ],
}

DETAIL: dict[str, list[str]] = {
    # inside "writes"
    "writes.to_arrow": ["eval_pipeline.defs.pipeline.io_manager:to_arrow"],
    "writes.parquet": ["eval_pipeline.defs.pipeline.io_manager:write_table"],
    "writes.index": ["eval_pipeline.defs.pipeline.io_manager:update_index",
                     "eval_pipeline.defs.pipeline.io_manager:frame_from_arrow"],
    "writes.index_rows": ["eval_pipeline.defs.pipeline.report_index:batch_report"],
    "writes.column_schema": [
        "eval_pipeline.defs.pipeline.io_manager:ParquetUPathIOManager.get_metadata"],
    # inside "metadata"
    "metadata.preview": [f"eval_pipeline.defs.pipeline.assets.{m}:preview"
                         for m in ("ingest", "routing", "judging", "summaries")],
    "metadata.changes": [f"eval_pipeline.defs.pipeline.assets.{m}:{f}_changes"
                         for m, f in (("judging", "judgment"), ("judging", "averaged"),
                                      ("summaries", "summary"))],
    # inside "events"
    "events.serialize": ["dagster._core.storage.event_log.sql_event_log:"
                         "SqlEventLogStorage._event_to_row"],
}
"""With ``--detail``: parts of the categories above, each counted on its own."""

totals: dict[str, float] = defaultdict(float)
_gc: dict[str, float] = {"gc": 0.0, "gc_full": 0, "started": 0.0}


def _collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc["started"] = time.process_time()
        return
    _gc["gc"] += time.process_time() - _gc["started"]
    _gc["gc_full"] += info["generation"] == 2
depth: dict[str, int] = defaultdict(int)


def _wrap(category: str, fn: Any) -> Any:
    if asyncio.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            depth[category] += 1
            start = time.process_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                depth[category] -= 1
                if not depth[category]:
                    totals[category] += time.process_time() - start
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth[category] += 1
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[category] -= 1
            if not depth[category]:
                totals[category] += time.process_time() - start
    return wrapper


def patch(detail: bool = False) -> list[str]:
    missing = []
    for category, targets in {**CATEGORIES, **(DETAIL if detail else {})}.items():
        for target in targets:
            module_name, _, path = target.partition(":")
            try:
                owner: Any = importlib.import_module(module_name)
                *parents, name = path.split(".")
                for parent in parents:
                    owner = getattr(owner, parent)
                setattr(owner, name, _wrap(category, getattr(owner, name)))
            except (ImportError, AttributeError):
                missing.append(target)
    return missing


def main() -> None:
    source, home, out = (Path(a) for a in sys.argv[1:4])
    import os

    os.environ["DAGSTER_HOME"] = str(home)
    from eval_pipeline.judges.config import JudgeConfig
    from eval_pipeline.local_run import run_pipeline

    workers = next((int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--workers=")),
                   1)
    if "--no-exports" in sys.argv:
        import types

        import eval_pipeline.local_run as local_run

        def no_exports(*args: Any, **kwargs: Any) -> Any:
            return types.SimpleNamespace(figures=None, per_batch=[])

        local_run.export_run = no_exports  # type: ignore[assignment]
    missing = patch(detail="--detail" in sys.argv)
    import gc

    gc.callbacks.append(_collection)
    start, wall = time.process_time(), time.perf_counter()
    run_pipeline(source, out, [JudgeConfig(name="heuristic")], split_size=10,
                 store=home / "store", workers=workers)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"cli_cpu": time.process_time() - start,
                      "cli_wall": time.perf_counter() - wall, **totals,
                      "children_cpu": children.ru_utime + children.ru_stime,
                      "gc": _gc["gc"], "gc_full": _gc["gc_full"],
                      "not_found": missing}))


if __name__ == "__main__":
    main()
