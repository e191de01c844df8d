"""Throughput and memory of the data stages, and of the whole graph through Dagster.

Run: ``.venv/bin/python bench/bench_pipeline.py [--sections stages,drop,memory,repair,dagster]
[--drop-mb 200] [FILE_OR_FOLDER ...]`` (default inputs: the XML-format corpora in
../shared/corpora, else data/incoming). Prints figures; asserts nothing.

- ``stages``: each domain stage on the inputs, timed in plain Python; the median of
  interleaved repeats after a warm-up (first calls pay imports and pandas set-up).
- ``drop``: parse + preprocess + clips of a generated drop (``--drop-mb``, the corpora's
  XML-tag records copied with new task ids, written to a temporary folder) against bare
  ``json.loads`` of the same lines, as a ratio measured in the same run, in one process and
  in a pool of one process per core.
- ``memory``: peak RSS of splitting generated 50 MB and 500 MB drops and running each batch
  through parse, preprocess and clips, each drop in a fresh process.
- ``cli-memory`` (#12.3): peak RSS and CPU seconds of the whole CLI (``eval-pipeline run``,
  heuristic judge, a fresh process, DAGSTER_HOME and store) on generated drops of
  ``--cli-memory-mb`` sizes (default 10, 50 and 100 MB), from ``/usr/bin/time -v``: flat
  when memory is bounded by the run size and not the drop. ``--code DIR`` (repeatable) runs
  each drop with each checkout in turn (e.g. the main branch, for a before/after).
- ``exports`` (#12.3): the CLI's exports alone on the store a CLI run made (drops of
  ``--exports-mb``, default 20 and 60 MB): the previous whole-table code (kept in the
  tests) against the streamed export, each in a fresh process without Dagster, peak RSS
  and CPU seconds, medians of interleaved repeats.
- ``repair``: tag repair of one record whose every ``<result>`` is left unclosed, at 5k,
  10k and 20k tool calls, against the previous (quadratic) implementation kept in the tests.
- ``report`` (#12.5): evaluation_report's input with 50, 200 and 450 batches, read one
  Parquet per batch against the summaries' index, and build_report on it.
- ``dagster``: the CLI's Dagster path end to end, so orchestration cost per batch shows.
- ``orchestration`` (#12.4): the CLI (a fresh process and DAGSTER_HOME, one run for all
  batches) on the inputs (``--orch-input``, default the whole corpora) against the sum of the
  stage functions' own times on the same batches in plain Python (parse, preprocess, clips,
  routing, heuristic judge, averaging, summaries, report); then ``--orch-rounds`` CLI calls
  on demo02 with one run per batch into one instance, to show whether the cost per batch
  grows with the runs already recorded. ``--code DIR`` (repeatable) runs the CLI from other
  checkouts too (e.g. the main branch, for a before/after in one run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from eval_pipeline import ingest
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.splitting import split_drop
from eval_pipeline.tool_registry import default_registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drops import write_corpus_drop

ROOT = Path(__file__).resolve().parents[1]
CORPORA = Path(os.environ.get("EVAL_PIPELINE_CORPORA", ROOT.parent / "shared" / "corpora"))
REPEATS = 5


def default_inputs() -> list[Path]:
    xml = [*sorted((CORPORA / "agent_data_platform").glob("*.jsonl")),
           CORPORA / "dataeva" / "demo02.jsonl"]
    found = [p for p in xml if p.exists()]
    return found or sorted((ROOT / "data" / "incoming").glob("*.jsonl"))


def interleaved(jobs: dict[str, Callable[[], Any]], repeats: int = REPEATS,
                warm_up: bool = True) -> dict[str, float]:
    """Median seconds of each job, the jobs run in turn each round (noise hits all alike)."""
    for job in jobs.values() if warm_up else ():
        job()  # first calls pay imports and pandas set-up
    times: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            start = time.perf_counter()
            job()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _disagreeing(table: pd.DataFrame, factor: float) -> pd.DataFrame:
    """A second judge for the averaging figures: other scores, every 7th row failed."""
    other = table.copy()
    other["scores"] = [json.dumps({k: round(v * factor, 3) for k, v in json.loads(s).items()})
                       for s in table["scores"]]
    other.loc[other.index % 7 == 0, "status"] = "failed"
    return other


def stage_section(files: list[Path], repeats: int) -> None:
    registry = default_registry()
    config = PreprocessConfig()
    judge = make_judge(JudgeConfig(name="heuristic"))
    prepared = []
    averaged: dict[Path, pd.DataFrame] = {}
    for path in files:
        raw, _q = ingest.read_batch(path, None, path.stem)
        kept, _r, _s = ingest.preprocess_batch(raw, config, registry)
        clips = ingest.clips_table(kept)
        rows = asyncio.run(run_judge(judge, ingest.clip_tasks(clips, kept)))
        one = pd.DataFrame([r.model_dump() for r in rows])
        three = {"a": one, "b": _disagreeing(one, 0.9), "c": _disagreeing(one, 0.7)}
        prepared.append((path, raw, kept, clips, one, three))
        averaged[path] = average_judgments({"heuristic": one})

    def each(fn: Callable[..., Any]) -> Callable[[], None]:
        return lambda: [fn(*p) for p in prepared] and None

    jobs = {
        "parse": each(lambda path, *_: ingest.read_batch(path, None, path.stem)),
        "preprocess": each(lambda _p, raw, *_: ingest.preprocess_batch(raw, config, registry)),
        "clips": each(lambda _p, _r, kept, *_: ingest.clips_table(kept)),
        "average (1 judge)": each(lambda *p: average_judgments({"heuristic": p[4]})),
        "average (3 judges)": each(lambda *p: average_judgments(p[5])),
        "summaries": each(lambda _p, _r, kept, clips, one, _t: summarize_trajectories(
            kept, clips, average_judgments({"heuristic": one}), ["heuristic"])),
        "summaries alone": each(lambda path, _r, kept, clips, _o, _t: summarize_trajectories(
            kept, clips, averaged[path], ["heuristic"])),
    }
    counts = {
        "parse": sum(len(p[1]) for p in prepared),
        "preprocess": sum(len(p[1]) for p in prepared),
        "clips": sum(len(p[2]) for p in prepared),
        "average (1 judge)": sum(len(p[4]) for p in prepared),
        "average (3 judges)": sum(3 * len(p[4]) for p in prepared),
        "summaries": sum(len(p[2]) for p in prepared),
        "summaries alone": sum(len(p[2]) for p in prepared),
    }
    medians = interleaved(jobs, repeats)
    units = {"parse": "records", "preprocess": "records", "clips": "trajectories",
             "summaries": "trajectories", "summaries alone": "trajectories"}
    table = [[name, counts[name], units.get(name, "judgment rows"), f"{medians[name]:.3f}",
              f"{counts[name] / medians[name]:,.0f}"] for name in jobs]
    print(tabulate(table, headers=[f"stage (median of {repeats})", "in", "unit", "seconds",
                                   "per s"]))
    print("(summaries: with their averaging, from the heuristic judge's rows; summaries "
          "alone: from the averaged table)")


def _batch_stages(path: Path) -> tuple[int, int]:
    """One batch through parse, preprocess and clips, as the three assets run it."""
    raw, quarantined = ingest.read_batch(path, None, path.stem)
    kept, _removed, _stats = ingest.preprocess_batch(raw, PreprocessConfig(),
                                                     default_registry())
    clips = ingest.clips_table(kept)
    return len(raw) + len(quarantined), len(clips)


def _json_only(path: Path) -> int:
    n = 0
    for line in path.read_bytes().split(b"\n"):
        if line.strip():
            with contextlib.suppress(ValueError):
                json.loads(line)
            n += 1
    return n


def drop_section(megabytes: float, split_size: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        drop = Path(tmp) / "generated.jsonl"
        lines = write_corpus_drop(drop, megabytes, CORPORA)
        size = drop.stat().st_size / 1e6
        manifests = split_drop(drop, Path(tmp) / "batches", split_size)
        batches = [Path(tmp) / "batches" / "generated" / m.batch_file for m in manifests]
        workers = os.cpu_count() or 1
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(_json_only, batches[:workers]))  # start the workers
            jobs = {
                "json.loads, 1 process": lambda: [_json_only(b) for b in batches],
                "stages, 1 process": lambda: [_batch_stages(b) for b in batches],
                f"stages, {workers} processes": lambda: list(pool.map(_batch_stages,
                                                                      batches)),
            }
            medians = interleaved(jobs, repeats, warm_up=False)
        base = medians["json.loads, 1 process"]
        print(f"generated drop: {size:.0f} MB, {lines} lines, {len(batches)} batches of "
              f"{split_size}")
        print(tabulate([[name, f"{s:.2f}", f"{size / s:.1f}", f"{base / s:.2f}"]
                        for name, s in medians.items()],
                       headers=[f"parse+preprocess+clips (median of {repeats})", "seconds", "MB/s",
                                "x json.loads"]))


def _child_split_parse(drop: Path, out: Path, split_size: int) -> None:
    """Split a drop and run every batch through parse, preprocess and clips (as the CLI's
    data stages do, one batch at a time), then print this process's peak RSS in MiB."""
    for manifest in split_drop(drop, out, split_size):
        path = out / drop.stem / manifest.batch_file
        _batch_stages(path)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def memory_section(split_size: int) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for megabytes in (50, 500):
            drop = Path(tmp) / f"drop{megabytes}.jsonl"
            write_corpus_drop(drop, megabytes, CORPORA)
            done = subprocess.run(
                [sys.executable, __file__, "--child-split", str(drop), str(Path(tmp) / "b"),
                 str(split_size)], check=True, capture_output=True, text=True)
            rows.append([f"{megabytes} MB", split_size, f"{float(done.stdout):.0f}"])
            drop.unlink()
    print(tabulate(rows, headers=["split + parse/preprocess/clips", "batch size",
                                  "peak RSS (MiB)"]))


def unclosed_results(calls: int) -> str:
    """One response of ``calls`` tool calls whose results are all left open."""
    call = ("<think>step {i}</think><microsandbox><microsandbox_execute>print({i})"
            "</microsandbox_execute></microsandbox>\n<result>out {i}")
    return "".join(call.format(i=i) for i in range(calls)) + "\n<answer>done"


def repair_section(repeats: int) -> None:
    sys.path.insert(0, str(ROOT))
    from eval_pipeline.preprocess import repair_tags
    from eval_pipeline_tests.repair_reference import reference_repair_tags

    tools = list(default_registry().tool_tags)
    rows = []
    for calls in (5_000, 10_000, 20_000):
        text = unclosed_results(calls)
        medians = interleaved({
            "before": partial(reference_repair_tags, text, tools),
            "now": partial(repair_tags, text, tools),
        }, max(1, min(repeats, 3)), warm_up=False)
        rows.append([calls, f"{len(text) / 1e6:.1f}", f"{medians['before']:.3f}",
                     f"{medians['now']:.4f}", f"{medians['before'] / medians['now']:.0f} x"])
    print(tabulate(rows, headers=["unclosed <result> (tool calls)", "MB", "before s", "now s",
                                  "speed-up"]))


def stage_seconds(inputs: Path, split_size: int) -> tuple[float, int]:
    """The stage functions' own time over every batch of ``inputs``, as the assets call them
    (no Dagster, no Parquet), and the number of batches."""
    from eval_pipeline.ingest import ReadOptions
    from eval_pipeline.local_run import collect_inputs, split_inputs
    from eval_pipeline.report import build_report
    from eval_pipeline.routing import routing_table
    from eval_pipeline.splitting import find_batch

    judge = make_judge(JudgeConfig(name="heuristic"))
    registry = default_registry()
    with tempfile.TemporaryDirectory() as tmp:
        manifests, _ = split_inputs(collect_inputs(inputs), Path(tmp), split_size,
                                    ReadOptions())
        total = 0.0
        summaries = {}
        for key in (m.partition_key for m in manifests):
            path, m = find_batch(Path(tmp), key)
            start = time.perf_counter()
            raw, _q = ingest.read_batch(path, m, m.partition_key)
            kept, _r, _s = ingest.preprocess_batch(raw, PreprocessConfig(), registry)
            clips = ingest.clips_table(kept)
            routing, _results = routing_table(kept, "subset")
            rows = asyncio.run(run_judge(judge, ingest.clip_tasks(clips, kept)))
            judged = pd.DataFrame([r.model_dump() for r in rows])
            averaged = average_judgments({"heuristic": judged})
            summaries[m.partition_key] = summarize_trajectories(kept, clips, averaged,
                                                                ["heuristic"], routing)
            total += time.perf_counter() - start
        start = time.perf_counter()
        build_report(summaries)
        return total + time.perf_counter() - start, len(manifests)


def cli_run(code: Path, inputs: Path, home: Path, out: Path, *extra: str) -> float:
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(code)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "eval_pipeline.cli", "run", str(inputs),
                    "--output", str(out), "--store", str(home / "store"), *extra],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def runs_seconds(home: Path) -> float:
    """The graph's own wall time in a CLI run: the sum of its Dagster runs' start-to-end
    times, read from the instance (the CLI's start-up, splitting and exports left out)."""
    code = ("import dagster as dg\n"
            "with dg.DagsterInstance.get() as i:\n"
            "    print(sum(r.end_time - r.start_time for r in i.get_run_records()\n"
            "              if r.start_time and r.end_time))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "DAGSTER_HOME": str(home)}, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def orchestration_section(inputs: Path, codes: list[Path], rounds: int) -> None:
    stages, batches = stage_seconds(inputs, 10)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, code in enumerate(codes):
            wall = cli_run(code, inputs, Path(tmp) / f"h{i}", Path(tmp) / f"o{i}")
            graph = runs_seconds(Path(tmp) / f"h{i}")
            rows.append([str(code), f"{wall:.1f}", f"{graph:.1f}", f"{stages:.1f}",
                         f"{wall / stages:.2f}", f"{graph / stages:.2f}"])
    print(f"{inputs}: {batches} batches of 10, heuristic judge, one run for all batches; "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(tabulate(rows, headers=["CLI from", "CLI wall s", "runs s", "stage functions s",
                                  "CLI wall / stages", "runs / stages"]))
    demo = CORPORA / "dataeva" / "demo02.jsonl"
    if not demo.exists() or rounds < 1:
        return
    growth = []
    with tempfile.TemporaryDirectory() as tmp:
        times: dict[str, list[float]] = {str(c): [] for c in codes}
        for r in range(rounds):  # interleaved: each checkout's instance gains runs alike
            for i, code in enumerate(codes):
                times[str(code)].append(cli_run(code, demo, Path(tmp) / f"g{i}",
                                                Path(tmp) / f"o{i}_{r}",
                                                "--batches-per-run", "1") / 10)
        for code, per_batch in times.items():
            growth.append([code, *(f"{t:.2f}" for t in per_batch),
                           f"{per_batch[-1] / per_batch[0]:.2f}"])
    print(f"\ndemo02 (10 batches, one run per batch), {rounds} CLI calls into one instance: "
          "seconds per batch")
    print(tabulate(growth, headers=["CLI from", *(f"call {r + 1} (runs before: {11 * r})"
                                                  for r in range(rounds)), "last / first"]))


def report_index_section(files: list[Path], repeats: int) -> None:
    """#12.5: what evaluation_report's input costs with N batches: one Parquet read per
    batch (the IO manager before) against the summaries' index (one file, a stat per
    batch), both with the report's columns only; then build_report on what was read."""
    from upath import UPath

    from eval_pipeline.defs.pipeline.partition_index import read_index, update_index
    from eval_pipeline.report import REPORT_INPUT_COLUMNS, build_report

    judge = make_judge(JudgeConfig(name="heuristic"))
    path = files[-1]
    raw, _q = ingest.read_batch(path, None, path.stem)
    kept, _r, _s = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
    clips = ingest.clips_table(kept)
    rows = asyncio.run(run_judge(judge, ingest.clip_tasks(clips, kept)))
    averaged = average_judgments({"heuristic": pd.DataFrame([r.model_dump() for r in rows])})
    summary = summarize_trajectories(kept, clips, averaged, ["heuristic"]).head(10)
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (50, 200, 450):
            folder = Path(tmp) / str(n)
            folder.mkdir()
            keys = [f"batch{i:04d}" for i in range(n)]
            paths = {k: UPath(folder / f"{k}.parquet") for k in keys}
            for k in keys:
                summary.to_parquet(paths[k].path, index=False)
            index = UPath(folder / "_index" / "trajectory_summaries.parquet")
            update_index(index, dict.fromkeys(keys, summary), REPORT_INPUT_COLUMNS, paths)

            def files_read(keys: list[str] = keys, paths: dict = paths) -> dict:
                return {k: pd.read_parquet(paths[k].path, columns=REPORT_INPUT_COLUMNS)
                        for k in keys}

            def index_read(keys: list[str] = keys, paths: dict = paths,
                           index: UPath = index) -> dict:
                return read_index(index, keys, paths, REPORT_INPUT_COLUMNS)[0]

            loaded = files_read()
            medians = interleaved({"files": files_read, "index": index_read,
                                   "report": lambda loaded=loaded: build_report(loaded)},
                                  repeats)
            table.append([n, n * len(summary), f"{medians['files']:.3f}",
                          f"{medians['index']:.3f}",
                          f"{medians['files'] / medians['index']:.1f} x",
                          f"{medians['report']:.3f}"])
    print(tabulate(table, headers=["batches", "trajectories", "per-batch files s", "index s",
                                   "speed-up", "build_report s"]))


def dagster_section(files: list[Path]) -> None:
    from eval_pipeline.local_run import run_pipeline

    rows = []
    for path in files[:2]:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["DAGSTER_HOME"] = str(Path(tmp) / "home")
            start = time.perf_counter()
            result = run_pipeline(path, Path(tmp) / "out", [JudgeConfig(name="heuristic")],
                                  split_size=10, store=Path(tmp) / "store")
            elapsed = time.perf_counter() - start
            batches = len(result.batches)
            rows = result.figures.rows
            records = rows["raw_trajectories"] + rows["quarantine"]
            rows.append([path.name, records, batches, f"{elapsed:.2f}",
                         f"{elapsed / max(batches, 1):.2f}"])
    print(tabulate(rows, headers=["whole graph via Dagster", "records", "batches", "seconds",
                                  "s/batch"]))


def _peak_and_cpu(stderr: str) -> tuple[float, float]:
    """Peak RSS (MiB) and CPU seconds (user + system) from ``/usr/bin/time -v``."""
    fields = {}
    for line in stderr.splitlines():
        name, _, value = line.strip().rpartition(": ")
        fields[name] = value
    return (int(fields["Maximum resident set size (kbytes)"]) / 1024,
            float(fields["User time (seconds)"]) + float(fields["System time (seconds)"]))


def cli_memory_section(sizes: list[float], codes: list[Path]) -> None:
    """The whole CLI's peak RSS against the drop size (#12.3); with several ``--code``
    checkouts, each size's drop is run by each, one after the other."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for megabytes in sizes:
            drop = Path(tmp) / f"drop{megabytes:g}mb.jsonl"
            records = write_corpus_drop(drop, megabytes, CORPORA)
            for i, code in enumerate(codes):
                home = Path(tmp) / f"home{megabytes:g}_{i}"
                store = Path(tmp) / f"store{megabytes:g}_{i}"
                env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(code),
                       "EVAL_PIPELINE_STORE": str(store)}
                start = time.perf_counter()
                done = subprocess.run(
                    ["/usr/bin/time", "-v", sys.executable, "-m", "eval_pipeline.cli", "run",
                     str(drop), "--output", str(Path(tmp) / f"out{megabytes:g}_{i}"),
                     "--quiet"], env=env, cwd=tmp, capture_output=True, text=True,
                    check=False)
                seconds = time.perf_counter() - start
                if done.returncode != 0 or "Maximum resident set size" not in done.stderr:
                    raise SystemExit(f"CLI on {megabytes} MB exited {done.returncode}:\n"
                                     f"{done.stderr[-2000:]}")
                peak, cpu = _peak_and_cpu(done.stderr)
                rows.append([f"{megabytes:g} MB", records, str(code), f"{seconds:.0f}",
                             f"{cpu:.0f}", f"{peak:.0f}", f"{os.getloadavg()[0]:.1f}"])
                print(f"  {rows[-1]}", flush=True)
                shutil.rmtree(home, ignore_errors=True)
                shutil.rmtree(store, ignore_errors=True)
                shutil.rmtree(Path(tmp) / f"out{megabytes:g}_{i}", ignore_errors=True)
            drop.unlink()
    print(tabulate(rows, headers=["whole CLI, heuristic judge", "records", "code", "wall s",
                                  "CPU s", "peak RSS (MiB)", "load"]))


def _child_export(kind: str, spec: Path) -> None:
    """One export of a store in this process (no Dagster imported): ``new`` is the
    streamed export, ``old`` the previous whole-table code kept in the tests."""
    job = json.loads(spec.read_text("utf-8"))
    assets, out, keys = job["assets"], Path(job["out"]), job["keys"]
    paths = [tuple(p) for p in job["paths"]]
    if kind == "new":
        from upath import UPath

        from eval_pipeline.exports.run import export_run

        export_run(UPath(assets), out, keys, paths)
        return
    from eval_pipeline_tests.exports import reference_exports as old

    out.mkdir(parents=True, exist_ok=True)
    tables = old.export_tables(assets, out, keys, sorted(paths))
    old.write_evaluated(tables.get("trajectory_summaries", pd.DataFrame()),
                        out / "evaluated.jsonl")
    old.write_exports(tables, out)


def exports_section(sizes: list[float], repeats: int) -> None:
    """#12.3: the CLI's exports on their own, after a CLI run made the store: the previous
    whole-table code against the streamed export, each in a fresh process without Dagster
    (peak RSS and CPU seconds from ``/usr/bin/time -v``; medians of interleaved repeats)."""
    import dagster as dg

    from eval_pipeline.defs.pipeline.definitions import build_definitions
    from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for megabytes in sizes:
            drop = Path(tmp) / f"drop{megabytes:g}mb.jsonl"
            records = write_corpus_drop(drop, megabytes, CORPORA)
            home = Path(tmp) / f"home{megabytes:g}"
            cli_run(ROOT, drop, home, Path(tmp) / f"cli{megabytes:g}", "--quiet")
            os.environ["DAGSTER_HOME"] = str(home)
            with dg.DagsterInstance.get() as instance:
                keys = list(instance.get_dynamic_partitions(BATCHES_PARTITION))
            assets = str(home / "store" / "assets")
            graph = build_definitions([JudgeConfig(name="heuristic")], assets_dir=assets)
            paths = sorted(k.path for k in graph.resolve_asset_graph().get_all_asset_keys()
                           if k != dg.AssetKey("evaluation_report"))
            figures: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
            for r in range(repeats):
                for kind in ("old", "new"):
                    spec = Path(tmp) / "spec.json"
                    spec.write_text(json.dumps({"assets": assets, "keys": keys, "paths": paths,
                                                "out": str(Path(tmp) / f"{kind}{r}")}))
                    done = subprocess.run(
                        ["/usr/bin/time", "-v", sys.executable, str(Path(__file__).resolve()),
                         "--child-export", kind, str(spec)], capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
                    if done.returncode != 0:
                        raise SystemExit(f"{kind} export failed:\n{done.stderr[-2000:]}")
                    figures[kind].append(_peak_and_cpu(done.stderr))
                    shutil.rmtree(Path(tmp) / f"{kind}{r}", ignore_errors=True)
            old_rss, old_cpu = (statistics.median(x) for x in zip(*figures["old"], strict=True))
            new_rss, new_cpu = (statistics.median(x) for x in zip(*figures["new"], strict=True))
            rows.append([f"{megabytes:g} MB", records, len(keys), f"{old_rss:.0f}",
                         f"{new_rss:.0f}", f"{old_cpu:.1f}", f"{new_cpu:.1f}"])
            print(f"  {rows[-1]} (load {os.getloadavg()[0]:.1f})", flush=True)
            shutil.rmtree(home, ignore_errors=True)
            drop.unlink()
    print(tabulate(rows, headers=["exports only", "records", "batches", "old peak MiB",
                                  "new peak MiB", "old CPU s", "new CPU s"]))


def main() -> None:
    if sys.argv[1:2] == ["--child-split"]:
        _child_split_parse(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
        return
    if sys.argv[1:2] == ["--child-export"]:
        _child_export(sys.argv[2], Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="*", type=Path)
    parser.add_argument("--sections", default="stages,drop,memory")
    parser.add_argument("--drop-mb", type=float, default=200.0)
    parser.add_argument("--split-size", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help="interleaved repeats per figure (the drop: at most 3)")
    parser.add_argument("--orch-input", type=Path, default=CORPORA)
    parser.add_argument("--cli-memory-mb", type=float, nargs="+", default=[10, 50, 100])
    parser.add_argument("--exports-mb", type=float, nargs="+", default=[20, 60])
    parser.add_argument("--orch-rounds", type=int, default=4)
    parser.add_argument("--code", type=Path, action="append",
                        help="a checkout to run the CLI from (repeatable; default this one)")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    files = [p for x in (args.inputs or default_inputs())
             for p in (sorted(x.glob("*.jsonl")) if x.is_dir() else [x])]
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"pandas {pd.__version__}; load average {os.getloadavg()[0]:.1f}")
    if "stages" in sections:
        size = sum(p.stat().st_size for p in files) / 2**20
        print(f"\ninputs: {len(files)} file(s), {size:.1f} MiB")
        stage_section(files, args.repeats)
    if "drop" in sections:
        print()
        drop_section(args.drop_mb, args.split_size, min(args.repeats, 3))
    if "memory" in sections:
        print()
        memory_section(args.split_size)
    if "cli-memory" in sections:
        print()
        cli_memory_section(args.cli_memory_mb, args.code or [ROOT])
    if "exports" in sections:
        print()
        exports_section(args.exports_mb, min(args.repeats, 3))
    if "repair" in sections:
        print()
        repair_section(args.repeats)
    if "orchestration" in sections:
        print()
        orchestration_section(args.orch_input, args.code or [ROOT], args.orch_rounds)
    if "report" in sections:
        print()
        report_index_section(files, args.repeats)
    if "dagster" in sections:
        print()
        dagster_section(files)


if __name__ == "__main__":
    main()
