"""Throughput and memory of each stage, and of the whole graph through Dagster.

Run: ``.venv/bin/python bench/bench_pipeline.py [FILE_OR_FOLDER ...]``
(default: the XML-format corpora in ../shared/corpora, else data/incoming). Prints figures;
asserts nothing. Stages are timed in plain Python (the domain modules) and then end to end
through the CLI's Dagster path, so the orchestration overhead per batch is visible.
"""

from __future__ import annotations

import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from eval_pipeline import ingest
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.tool_registry import default_registry

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT.parent / "shared" / "corpora"


def default_inputs() -> list[Path]:
    xml = [*sorted((CORPORA / "agent_data_platform").glob("*.jsonl")),
           CORPORA / "dataeva" / "demo02.jsonl"]
    found = [p for p in xml if p.exists()]
    return found or sorted((ROOT / "data" / "incoming").glob("*.jsonl"))


def stage_figures(paths: list[Path]) -> list[list[object]]:
    import pandas as pd

    registry = default_registry()
    timings: dict[str, float] = {}
    counts: dict[str, int] = {}

    def timed(name: str, fn, n_of):
        start = time.perf_counter()
        value = fn()
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
        counts[name] = counts.get(name, 0) + n_of(value)
        return value

    for path in paths:
        raw, _q = timed("parse", lambda p=path: ingest.read_batch(p, None, p.stem),
                        lambda v: len(v[0]) + len(v[1]))
        kept, _r, _s = timed("preprocess",
                             lambda raw=raw: ingest.preprocess_batch(raw, PreprocessConfig(),
                                                                     registry),
                             lambda _v, raw=raw: len(raw))
        clips = timed("clips", lambda kept=kept: ingest.clips_table(kept), len)
        tasks = ingest.clip_tasks(clips, kept)
        rows = timed("judge (heuristic)",
                      lambda tasks=tasks: asyncio.run(run_judge(
                          make_judge(JudgeConfig(name="heuristic")), tasks)), len)
        table = pd.DataFrame([r.model_dump() for r in rows])
        avg = timed("average", lambda table=table: average_judgments({"heuristic": table}), len)
        timed("summaries", lambda kept=kept, clips=clips, avg=avg: summarize_trajectories(
            kept, clips, avg, ["heuristic"]), len)
    rows = [[name, counts[name], f"{timings[name]:.3f}",
             f"{counts[name] / timings[name]:.0f}" if timings[name] else "-"]
            for name in timings]
    return rows


def dagster_figures(paths: list[Path]) -> list[list[object]]:
    from eval_pipeline.local_run import run_pipeline

    rows = []
    for path in paths[:2]:
        with tempfile.TemporaryDirectory() as tmp:
            import os

            os.environ["DAGSTER_HOME"] = str(Path(tmp) / "home")
            start = time.perf_counter()
            tables = run_pipeline(path, Path(tmp) / "out",
                                  [JudgeConfig(name="heuristic")], split_size=10)
            elapsed = time.perf_counter() - start
            batches = tables["raw_trajectories"]["batch"].nunique()
            records = len(tables["raw_trajectories"]) + len(tables["quarantine"])
            rows.append([path.name, records, batches, f"{elapsed:.2f}",
                         f"{elapsed / max(batches, 1):.2f}"])
    return rows


def main() -> None:
    paths = [Path(a) for a in sys.argv[1:]] or default_inputs()
    files = [p for x in paths for p in (sorted(x.glob("*.jsonl")) if x.is_dir() else [x])]
    size = sum(p.stat().st_size for p in files) / 2**20
    print(f"inputs: {len(files)} file(s), {size:.1f} MiB")
    print(tabulate(stage_figures(files), headers=["stage", "rows in", "seconds", "rows/s"]))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"max RSS after the plain stages: {rss:.0f} MiB")
    print()
    print(tabulate(dagster_figures(files),
                   headers=["whole graph via Dagster", "records", "batches", "seconds",
                            "s/batch"]))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nmax RSS of this process: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
