"""Throughput and memory of the data stages, and of the whole graph through Dagster.

Run: ``.venv/bin/python bench/bench_pipeline.py [--sections stages,drop,memory,repair,dagster]
[--drop-mb 200] [FILE_OR_FOLDER ...]`` (default inputs: the XML-format corpora in
../shared/corpora, else data/incoming). Prints figures; asserts nothing.

- ``stages``: each domain stage on the inputs, timed in plain Python; the median of
  interleaved repeats after a warm-up (first calls pay imports and pandas set-up), in wall
  and CPU seconds. With ``--code DIR`` (repeatable), averaging and the summaries of each
  checkout's ``eval_pipeline/scoring`` run too, interleaved with this one's in the same
  process (loaded under another package name; the rest of ``eval_pipeline`` is this
  checkout's), for a before/after on the same inputs and load.
- ``drop``: parse + preprocess + clips of a generated drop (``--drop-mb``, the corpora's
  XML-tag records copied with new task ids, written to a temporary folder) against bare
  ``json.loads`` of the same lines, as a ratio measured in the same run, in one process and
  in a pool of one process per core (wall and CPU seconds, CPU per stage). ``--code DIR``
  (repeatable) times other checkouts on the same batches in turn (``drop_child.py``, a
  process per checkout and repeat), e.g. ``--code ../main --code .`` for before and after.
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
- ``report`` (#12.5): evaluation_report with 50, 200 and 450 batches (10 trajectories each),
  before (every batch's row recomputed from the index of every trajectory's columns) and now
  (cached rows, the ALL row from compact figures), CPU time; and indexing one batch.
- ``dagster``: the CLI's Dagster path end to end, so orchestration cost per batch shows.
- ``orchestration`` (#12.4): the CLI's engine (a fresh process and DAGSTER_HOME, runs of
  up to 16 MB of batch files as the CLI makes them) on the inputs (``--orch-input``, default
  the whole corpora) against the sum of the stage functions' own times on the same batches
  in plain Python (parse, preprocess, clips, routing, heuristic judge, averaging, summaries,
  report), wall and CPU, ``--orch-repeats`` interleaved rounds, medians; the runs' CPU by
  kind of work (``graph_cpu.py``); then ``--orch-rounds`` CLI calls on demo02 with one run
  per batch into one instance, to show whether the cost per batch grows with the runs
  already recorded. ``--code DIR`` (repeatable) runs the CLI from other checkouts too (e.g.
  the main branch, for a before/after in one run); the drop section takes ``--code`` too.
  ``--orch-workers 1 2`` runs each checkout's CLI with one and with two worker processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
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
                warm_up: bool = True, cpu: dict[str, float] | None = None
                ) -> dict[str, float]:
    """Median seconds of each job, the jobs run in turn each round (noise hits all alike).
    ``cpu``, when given, receives each job's median CPU seconds of this process."""
    for job in jobs.values() if warm_up else ():
        job()  # first calls pay imports and pandas set-up
    times: dict[str, list[float]] = {name: [] for name in jobs}
    cpu_times: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            job()
            times[name].append(time.perf_counter() - start)
            cpu_times[name].append(time.process_time() - start_cpu)
    if cpu is not None:
        cpu.update({name: statistics.median(t) for name, t in cpu_times.items()})
    return {name: statistics.median(t) for name, t in times.items()}


def _disagreeing(table: pd.DataFrame, factor: float) -> pd.DataFrame:
    """A second judge for the averaging figures: other scores, every 7th row failed."""
    other = table.copy()
    other["scores"] = [json.dumps({k: round(v * factor, 3) for k, v in json.loads(s).items()})
                       for s in table["scores"]]
    other.loc[other.index % 7 == 0, "status"] = "failed"
    return other


class _AliasedScoring(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports another checkout's ``eval_pipeline/scoring`` as package ``alias``: each
    module's source with ``eval_pipeline.scoring`` renamed, compiled in memory (never
    through that checkout's bytecode cache, which holds its unrenamed code)."""

    def __init__(self, alias: str, folder: Path) -> None:
        self.alias, self.folder = alias, folder

    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.alias:
            return importlib.util.spec_from_file_location(
                fullname, self.folder / "__init__.py", loader=self,
                submodule_search_locations=[str(self.folder)])
        if fullname.startswith(self.alias + "."):
            name = fullname.removeprefix(self.alias + ".")
            return importlib.util.spec_from_file_location(
                fullname, self.folder / f"{name}.py", loader=self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        origin = str(module.__spec__.origin) if module.__spec__ else ""
        source = Path(origin).read_text("utf-8").replace("eval_pipeline.scoring", self.alias)
        exec(compile(source, origin, "exec", dont_inherit=True), module.__dict__)


def scoring_of(code: Path) -> types.ModuleType:
    """``eval_pipeline.scoring`` of the checkout at ``code`` (this one's for this checkout)."""
    if code.resolve() == ROOT:
        return importlib.import_module("eval_pipeline.scoring")
    alias = f"_bench_scoring_{len([m for m in sys.meta_path if isinstance(m, _AliasedScoring)])}"
    sys.meta_path.insert(0, _AliasedScoring(alias, code.resolve() / "eval_pipeline" / "scoring"))
    return importlib.import_module(alias)


def stage_section(files: list[Path], repeats: int, codes: list[Path] | None = None) -> None:
    registry = default_registry()
    config = PreprocessConfig()
    judge = make_judge(JudgeConfig(name="heuristic"))
    prepared = []
    for path in files:
        raw, _q = ingest.read_batch(path, None, path.stem)
        kept, _r, _s = ingest.preprocess_batch(raw, config, registry)
        clips = ingest.clips_table(kept)
        rows = asyncio.run(run_judge(judge, ingest.clip_tasks(clips, kept)))
        one = pd.DataFrame([r.model_dump() for r in rows])
        three = {"a": one, "b": _disagreeing(one, 0.9), "c": _disagreeing(one, 0.7)}
        prepared.append((path, raw, kept, clips, one, three))

    def each(fn: Callable[..., Any]) -> Callable[[], None]:
        return lambda: [fn(*p) for p in prepared] and None

    # The same trajectories in batches of 10, the CLI's default --split-size: each call's
    # fixed cost (pandas columns in and out) weighs more than in the files' big batches.
    small = []
    for _path, _raw, kept, clips, one, _three in prepared:
        for start in range(0, len(kept), 10):
            part = kept.iloc[start:start + 10].reset_index(drop=True)
            ids = set(part["trajectory_id"])
            small.append((part, clips[clips["trajectory_id"].isin(ids)].reset_index(drop=True),
                          one[one["trajectory_id"].isin(ids)].reset_index(drop=True)))

    jobs = {
        "parse": each(lambda path, *_: ingest.read_batch(path, None, path.stem)),
        "preprocess": each(lambda _p, raw, *_: ingest.preprocess_batch(raw, config, registry)),
        "clips": each(lambda _p, _r, kept, *_: ingest.clips_table(kept)),
    }
    counts = {
        "parse": sum(len(p[1]) for p in prepared),
        "preprocess": sum(len(p[1]) for p in prepared),
        "clips": sum(len(p[2]) for p in prepared),
    }
    units = {"parse": "records", "preprocess": "records", "clips": "trajectories"}
    for code in codes or [ROOT]:
        scoring = scoring_of(code)
        average, summarize = scoring.average_judgments, scoring.summarize_trajectories
        averaged = {p[0]: average({"heuristic": p[4]}) for p in prepared}
        tag = f" [{code}]" if codes else ""
        jobs |= {
            f"average (1 judge){tag}": each(
                lambda *p, average=average: average({"heuristic": p[4]})),
            f"average (3 judges){tag}": each(lambda *p, average=average: average(p[5])),
            f"summaries{tag}": each(
                lambda _p, _r, kept, clips, one, _t, average=average, summarize=summarize:
                summarize(kept, clips, average({"heuristic": one}), ["heuristic"])),
            f"summaries alone{tag}": each(
                lambda path, _r, kept, clips, _o, _t, summarize=summarize, averaged=averaged:
                summarize(kept, clips, averaged[path], ["heuristic"])),
            f"summaries, batches of 10{tag}":
                lambda average=average, summarize=summarize: [
                    summarize(k, c, average({"heuristic": o}), ["heuristic"])
                    for k, c, o in small] and None,
        }
        counts |= {
            f"average (1 judge){tag}": sum(len(p[4]) for p in prepared),
            f"average (3 judges){tag}": sum(3 * len(p[4]) for p in prepared),
            f"summaries{tag}": sum(len(p[2]) for p in prepared),
            f"summaries alone{tag}": sum(len(p[2]) for p in prepared),
            f"summaries, batches of 10{tag}": sum(len(b[0]) for b in small),
        }
        units |= {f"summaries{tag}": "trajectories", f"summaries alone{tag}": "trajectories",
                  f"summaries, batches of 10{tag}": "trajectories"}
    cpu: dict[str, float] = {}
    medians = interleaved(jobs, repeats, cpu=cpu)
    table = [[name, counts[name], units.get(name, "judgment rows"), f"{medians[name]:.3f}",
              f"{counts[name] / medians[name]:,.0f}", f"{cpu[name]:.3f}",
              f"{counts[name] / cpu[name]:,.0f}"] for name in jobs]
    print(tabulate(table, headers=[f"stage (median of {repeats})", "in", "unit", "seconds",
                                   "per s", "CPU s", "per CPU s"]))
    print("(summaries: with their averaging, from the heuristic judge's rows; summaries "
          "alone: from the averaged table; batches of 10: with their averaging, the same "
          f"trajectories in {len(small)} calls)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def _batch_stages(path: Path) -> tuple[int, int]:
    """One batch through parse, preprocess and clips, as the three assets run them."""
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


def drop_section(megabytes: float, split_size: int, repeats: int, codes: list[Path]) -> None:
    """The three stages over a generated drop's batches against bare ``json.loads`` of the
    same lines, per checkout in ``codes`` (each timed in a child process, ``drop_child.py``,
    the checkouts in turn each repeat, so load from other work hits them alike)."""
    workers = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        drop = Path(tmp) / "generated.jsonl"
        lines = write_corpus_drop(drop, megabytes, CORPORA)
        size = drop.stat().st_size / 1e6
        manifests = split_drop(drop, Path(tmp) / "batches", split_size)
        folder = Path(tmp) / "batches" / "generated"
        batches = [folder / m.batch_file for m in manifests]
        loads = [_json_only(b) for b in batches]  # warm the page cache
        load_start = os.getloadavg()[0]
        base_wall: list[float] = []
        base_cpu: list[float] = []
        runs: dict[Path, list[dict[str, float]]] = {code: [] for code in codes}
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            loads = [_json_only(b) for b in batches]
            base_wall.append(time.perf_counter() - wall)
            base_cpu.append(time.process_time() - cpu)
            for code in codes:
                done = subprocess.run(
                    [sys.executable, str(Path(__file__).with_name("drop_child.py")),
                     str(folder), str(workers)],
                    env={**os.environ, "PYTHONPATH": str(code)}, check=True,
                    capture_output=True, text=True)
                runs[code].append(json.loads(done.stdout.strip().splitlines()[-1]))
        assert sum(loads) == lines
    median = statistics.median
    json_wall, json_cpu = median(base_wall), median(base_cpu)
    print(f"generated drop: {size:.0f} MB, {lines} lines, {len(batches)} batches of "
          f"{split_size}; load average {load_start:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end; medians of {repeats}")
    rows = [["json.loads, 1 process", "", f"{json_wall:.2f}", f"{json_cpu:.2f}", "", "", "",
             f"{size / json_wall:.0f}", "1", "1"]]
    for code, got in runs.items():
        m = {k: median(r[k] for r in got) for k in got[0]}
        rows.append(["stages, 1 process", str(code), f"{m['wall']:.2f}", f"{m['cpu']:.2f}",
                     f"{m['parse']:.2f}", f"{m['preprocess']:.2f}", f"{m['clips']:.2f}",
                     f"{size / m['wall']:.1f}", f"{json_wall / m['wall']:.2f}",
                     f"{json_cpu / m['cpu']:.2f}"])
        rows.append([f"stages, {workers} processes", str(code), f"{m['pool_wall']:.2f}", "",
                     "", "", "", f"{size / m['pool_wall']:.1f}",
                     f"{json_wall / m['pool_wall']:.2f}", ""])
    print(tabulate(rows, headers=["parse+preprocess+clips", "code", "wall s", "CPU s",
                                  "parse CPU", "preprocess CPU", "clips CPU", "MB/s",
                                  "x json.loads (wall)", "x json.loads (CPU)"]))


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


def stage_seconds(inputs: Path, split_size: int) -> tuple[float, float, int]:
    """The stage functions' own time over every batch of ``inputs``, as the assets call them
    (no Dagster, no Parquet): wall and CPU seconds, and the number of batches."""
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
        wall = cpu = 0.0
        summaries = {}
        for key in (m.partition_key for m in manifests):
            path, m = find_batch(Path(tmp), key)
            start, start_cpu = time.perf_counter(), time.process_time()
            raw, _q = ingest.read_batch(path, m, m.partition_key)
            kept, _r, _s = ingest.preprocess_batch(raw, PreprocessConfig(), registry)
            clips = ingest.clips_table(kept)
            routing, _results = routing_table(kept, "subset")
            rows = asyncio.run(run_judge(judge, ingest.clip_tasks(clips, kept)))
            judged = pd.DataFrame([r.model_dump() for r in rows])
            averaged = average_judgments({"heuristic": judged})
            summaries[m.partition_key] = summarize_trajectories(kept, clips, averaged,
                                                                ["heuristic"], routing)
            wall += time.perf_counter() - start
            cpu += time.process_time() - start_cpu
        start, start_cpu = time.perf_counter(), time.process_time()
        build_report(summaries)
        return (wall + time.perf_counter() - start, cpu + time.process_time() - start_cpu,
                len(manifests))


def cli_run(code: Path, inputs: Path, home: Path, out: Path, *extra: str) -> float:
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(code)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "eval_pipeline.cli", "run", str(inputs),
                    "--output", str(out), "--store", str(home / "store"), *extra],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def runs_seconds(home: Path) -> tuple[float, float]:
    """The graph's own wall time in a CLI run, read from the instance (the CLI's start-up,
    splitting and exports left out): the sum of its Dagster runs' start-to-end times, and
    the batch runs' span (first start to last end, which counts runs executed at once by
    ``workers`` once, and the gaps between runs) plus the other runs' (the report's) times."""
    code = ("import dagster as dg\n"
            "with dg.DagsterInstance.get() as i:\n"
            "    rs = [r for r in i.get_run_records() if r.start_time and r.end_time]\n"
            "    b = [r for r in rs if r.dagster_run.job_name == 'evaluate_batch']\n"
            "    span = (max(r.end_time for r in b) - min(r.start_time for r in b)) if b else 0\n"
            "    print(sum(r.end_time - r.start_time for r in rs),\n"
            "          span + sum(r.end_time - r.start_time for r in rs if r not in b))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "DAGSTER_HOME": str(home)}, check=True)
    total, span = done.stdout.strip().splitlines()[-1].split()
    return float(total), float(span)


def graph_cpu_run(code: Path, inputs: Path, home: Path, out: Path, workers: int = 1
                  ) -> dict[str, float]:
    """One CLI run (its engine, ``run_pipeline``, without the exports) from ``code`` in a
    fresh process and DAGSTER_HOME, with ``workers`` processes, the CPU seconds by kind of
    work (``graph_cpu.py``; one worker only), and the graph's wall time from the instance."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("graph_cpu.py")),
                           str(inputs), str(home), str(out), f"--workers={workers}",
                           "--no-exports"],
                          env=env, check=True, capture_output=True, text=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["runs"], figures["span"] = runs_seconds(home)
    figures["total_cpu"] = figures["cli_cpu"] + figures.get("children_cpu", 0.0)
    return {k: v for k, v in figures.items() if isinstance(v, int | float)}


def orchestration_section(inputs: Path, codes: list[Path], rounds: int,
                          repeats: int = 3, workers: tuple[int, ...] = (1,)) -> None:
    """The graph against the stage functions, ``repeats`` times, the checkouts (each with
    each of ``workers``) and the stage measurement interleaved in each round (a shared
    machine's load hits all alike); medians.
    Wall: the runs' start-to-end times over the stage functions' wall time (with several
    workers, the batch runs' span: runs at once count once). CPU: the CPU spent inside the
    runs over the stage functions' CPU (what the wall ratio is on an idle machine, as the
    graph runs in one thread; one worker only: the others' runs are in child processes,
    whose CPU shows in the CLI's total CPU, imports included)."""
    stage_walls, stage_cpus = [], []
    configs = [(code, w) for code in codes for w in workers]

    def label(config: tuple[Path, int]) -> str:
        return f"{config[0]}, workers={config[1]}"

    results: dict[str, list[dict[str, float]]] = {label(c): [] for c in configs}
    loads = []
    batches = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            wall, cpu, batches = stage_seconds(inputs, 10)
            stage_walls.append(wall)
            stage_cpus.append(cpu)
            for i, config in enumerate(configs):
                results[label(config)].append(graph_cpu_run(
                    config[0], inputs, Path(tmp) / f"h{r}_{i}", Path(tmp) / f"o{r}_{i}",
                    config[1]))
                shutil.rmtree(Path(tmp) / f"h{r}_{i}", ignore_errors=True)
                loads.append(os.getloadavg()[0])
                got = {k: round(v, 2) for k, v in results[label(config)][-1].items()}
                print(f"  round {r + 1} {label(config)}: {json.dumps(got)} "
                      f"(load {loads[-1]:.1f})", flush=True)
    stage_wall, stage_cpu = statistics.median(stage_walls), statistics.median(stage_cpus)

    def median(config: tuple[Path, int], key: str) -> float:
        return statistics.median(f.get(key, 0.0) for f in results[label(config)])

    print(f"{inputs}: {batches} batches of 10, heuristic judge, one run per 16 MB of batch "
          f"files (as the CLI does); medians of {repeats} interleaved rounds; load average "
          f"{min(loads):.1f} to {max(loads):.1f}")
    print(f"stage functions: {stage_wall:.1f} s wall, {stage_cpu:.1f} s CPU")
    print(tabulate([[label(c), f"{median(c, 'cli_wall'):.1f}", f"{median(c, 'total_cpu'):.1f}",
                     f"{median(c, 'runs'):.1f}", f"{median(c, 'span'):.1f}",
                     f"{median(c, 'graph'):.1f}" if c[1] == 1 else "",
                     f"{median(c, 'span') / stage_wall:.2f}",
                     f"{median(c, 'graph') / stage_cpu:.2f}" if c[1] == 1 else ""]
                    for c in configs],
                   headers=["CLI from", "CLI wall s", "CLI CPU s (all processes)",
                            "runs wall s (sum)", "runs wall s (span)", "runs CPU s",
                            "runs span / stages (wall)", "runs / stages (CPU)"]))
    kinds = ["stages", "writes", "loads", "events", "metadata"]
    print("\nCPU seconds inside the runs by kind of work (graph_cpu.py, one worker; 'stages': "
          "the stage functions the assets call, the agreement tables too; 'rest': Dagster's "
          "step machinery and the assets' glue; 'gc': Python's garbage collections in the "
          "process, also counted in the kinds they interrupted, and how many were full)")
    print(tabulate([[str(c), *(f"{median((c, 1), k):.1f}" for k in kinds),
                     f"{median((c, 1), 'graph') - sum(median((c, 1), k) for k in kinds):.1f}",
                     f"{median((c, 1), 'gc'):.1f} ({median((c, 1), 'gc_full'):.0f} full)"]
                    for c in codes if 1 in workers],
                   headers=["CLI from", *kinds, "rest", "gc"]))
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
    """#12.5: what evaluation_report costs with N batches, before and now.

    Before: the summaries' index held the report's input columns of every trajectory (the
    whole metadata too); the report read it, split it per batch and recomputed every batch's
    row and the ALL row (``build_report`` as it was, kept in the tests). Now: the index holds
    each batch's row and compact figures; the report reads them and computes the ALL row
    only. Also what a run writing k batches pays to index them into an index of N."""
    from upath import UPath

    from eval_pipeline.defs.pipeline.partition_index import read_index, update_index
    from eval_pipeline.defs.pipeline.report_index import REPORT_INDEXER, report_from_index
    from eval_pipeline.defs.pipeline.table_cache import file_stamp
    from eval_pipeline.report import REPORT_INPUT_COLUMNS

    sys.path.insert(0, str(ROOT))
    from eval_pipeline_tests.report_reference import reference_build_report

    judge = make_judge(JudgeConfig(name="heuristic"))
    path = files[-1]
    raw, _q = ingest.read_batch(path, None, path.stem)
    kept, _r, _s = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
    clips = ingest.clips_table(kept)
    rows = asyncio.run(run_judge(judge, ingest.clip_tasks(clips, kept)))
    averaged = average_judgments({"heuristic": pd.DataFrame([r.model_dump() for r in rows])})
    summary = summarize_trajectories(kept, clips, averaged, ["heuristic"]).head(10)
    columns = [c for c in REPORT_INPUT_COLUMNS if c in summary.columns]
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (50, 200, 450):
            folder = Path(tmp) / str(n)
            folder.mkdir()
            keys = [f"batch{i:04d}" for i in range(n)]
            paths = {k: UPath(folder / f"{k}.parquet") for k in keys}
            for k in keys:
                summary.to_parquet(paths[k].path, index=False)
            stamps = {k: file_stamp(paths[k].path) for k in keys}
            old_index = folder / "old_index.parquet"
            pd.concat([summary[columns].assign(_partition=k) for k in keys],
                      ignore_index=True).to_parquet(old_index, index=False)
            index = UPath(folder / "_index")
            view = pd.read_parquet(paths[keys[0]].path, columns=columns)
            update_index(index, REPORT_INDEXER,
                         {k: REPORT_INDEXER.derive(view, k) for k in keys}, stamps, paths)

            def before(keys: list[str] = keys, old_index: Path = old_index) -> pd.DataFrame:
                every = pd.read_parquet(old_index)
                at = every.groupby("_partition", sort=False).indices
                return reference_build_report({k: every.iloc[at[k]][columns].reset_index(
                    drop=True) for k in keys})

            def now(keys: list[str] = keys, index: UPath = index,
                    paths: dict = paths) -> pd.DataFrame:
                return report_from_index(read_index(index, REPORT_INDEXER, keys, paths))

            def write_one(keys: list[str] = keys, index: UPath = index, paths: dict = paths,
                          stamps: dict = stamps, view: pd.DataFrame = view) -> None:
                k = keys[len(keys) // 2]
                update_index(index, REPORT_INDEXER, {k: REPORT_INDEXER.derive(view, k)},
                             {k: stamps[k]}, paths)

            assert now().equals(before())
            medians: dict[str, float] = {}  # CPU seconds
            interleaved({"before": before, "now": now, "write": write_one}, repeats,
                        cpu=medians)
            table.append([n, n * len(summary), f"{medians['before']:.3f}",
                          f"{medians['now']:.3f}",
                          f"{medians['before'] / medians['now']:.1f} x",
                          f"{medians['write']:.3f}"])
    print(tabulate(table, headers=["batches", "trajectories", "report before (CPU s)",
                                   "report now (CPU s)", "speed-up",
                                   "indexing 1 batch now (CPU s)"]))


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
    parser.add_argument("--orch-repeats", type=int, default=3)
    parser.add_argument("--orch-workers", type=int, nargs="+", default=[1],
                        help="orchestration: run the CLI with each of these worker counts")
    parser.add_argument("--code", type=Path, action="append",
                        help="a checkout to run the CLI from, or (stages) whose scoring "
                        "to time beside this one's (repeatable; default this one)")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    files = [p for x in (args.inputs or default_inputs())
             for p in (sorted(x.glob("*.jsonl")) if x.is_dir() else [x])]
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"pandas {pd.__version__}; load average {os.getloadavg()[0]:.1f}")
    if "stages" in sections:
        size = sum(p.stat().st_size for p in files) / 2**20
        print(f"\ninputs: {len(files)} file(s), {size:.1f} MiB")
        stage_section(files, args.repeats, args.code)
    if "drop" in sections:
        print()
        drop_section(args.drop_mb, args.split_size, min(args.repeats, 3),
                     args.code or [ROOT])
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
        orchestration_section(args.orch_input, args.code or [ROOT], args.orch_rounds,
                              args.orch_repeats, tuple(args.orch_workers))
    if "report" in sections:
        print()
        report_index_section(files, args.repeats)
    if "dagster" in sections:
        print()
        dagster_section(files)


if __name__ == "__main__":
    main()
