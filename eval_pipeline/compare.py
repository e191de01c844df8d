"""Is run B better than run A? Paired per-task differences with a bootstrap interval.

Two runs (two drops of the same tasks, or two agent versions in one run) are compared on
their ``trajectory_summaries`` tables, task by task: a difference of means over two
unpaired samples would bury a real shift under the spread between tasks (an easy task is
easy for both agents), so each metric's difference is taken per task id and the paired
differences are resampled by task.

Pairing, and what is never silently dropped:

- A task id present on one side only is *unpaired*: counted and named in the result,
  left out of every difference (there is nothing to subtract it from).
- A task id met more than once on one side (the same task run twice in a drop) is a
  *duplicate*: its trajectories' values are averaged, so the task stays one unit of the
  bootstrap and weighs as much as any other task; the task ids and row counts are reported.
- A paired task with no value for a metric on either side (a trajectory nothing was scored
  in has no overall score; no routing expectations, no ``routing_passed``) is left out of
  that metric only, and counted as ``missing`` for it.

Verdict per metric (every metric here is higher-is-better): ``better`` when the 95%
percentile interval of the mean difference B - A lies entirely above 0, ``worse`` when
entirely below, otherwise ``no evidence``. Below :data:`MIN_PAIRS` paired tasks no
interval is drawn and the verdict is ``no evidence``: a bootstrap over two or three tasks
would call a shift certain from almost nothing. The resampling uses a seeded
``numpy.random.Generator``, fresh per metric, so a result does not depend on which other
metrics were asked for. No Dagster here: the CLI's ``compare`` verb runs it on exported
Parquet without an instance.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

SUMMARIES_FILE = "trajectory_summaries.parquet"
TRAJECTORIES_FILE = "preprocessed_trajectories.parquet"
"""Where ``--by-agent-version`` finds ``agent_version`` when the summaries lack it."""

SCORE_COLUMNS = ("overall_trajectory_score", "success_rate", "thought_to_tool_accuracy",
                 "query_to_thought_accuracy", "sequence_optimality", "routing_passed",
                 "trajectory_assessment_score")
"""The summaries' per-trajectory figures, in the order they are reported."""
TOOL_PREFIX = "tool:"
"""Per-tool averages (``evaluation_metadata.tool_averages[tool].overall_average``)."""

RESAMPLES = 10_000
CONFIDENCE = 0.95
MIN_PAIRS = 5
TOP_MOVERS = 5
DEFAULT_SEED = 0
_CHUNK_CELLS = 4_000_000
"""Resampled indices drawn at once (32 MB of int64), so a big corpus does not need
resamples x tasks of memory."""

Verdict = Literal["better", "worse", "no evidence"]


class CompareError(ValueError):
    """A comparison that cannot be made (a missing file, an unknown metric or version)."""


class Mover(BaseModel):
    """One task whose metric moved: the value on each side and the change B - A."""

    task_id: str
    trajectories_a: list[str]
    trajectories_b: list[str]
    a: float
    b: float
    change: float


class MetricComparison(BaseModel):
    """One metric: mean difference B - A over the paired tasks, its interval and verdict."""

    metric: str
    pairs: int
    """Paired tasks with a value on both sides."""
    missing: int
    """Paired tasks left out of this metric: no value on one side or both."""
    mean_a: float | None
    mean_b: float | None
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: Verdict
    movers: list[Mover] = Field(default_factory=list)


class Pairing(BaseModel):
    """How the two tables' rows became paired tasks; every row is accounted for here."""

    rows_a: int
    rows_b: int
    paired_tasks: int
    unpaired_a: list[str]
    """Task ids only A has (left out of every difference)."""
    unpaired_b: list[str]
    duplicates_a: dict[str, int]
    """Task id -> rows in A, for task ids A has more than once (averaged per task)."""
    duplicates_b: dict[str, int]
    missing_task_id_a: int = 0
    """Rows with no task id (cannot be paired; counted, not compared)."""
    missing_task_id_b: int = 0


class Comparison(BaseModel):
    """The whole comparison, as written to ``compare.json``."""

    label_a: str
    label_b: str
    seed: int
    resamples: int
    confidence: float
    pairing: Pairing
    metrics: list[MetricComparison]


def metric_table(summaries: pd.DataFrame) -> pd.DataFrame:
    """One numeric column per metric, one row per summary row (same index).

    ``routing_passed`` becomes 1.0 / 0.0 (missing where the trajectory had no
    expectations); each tool type in ``evaluation_metadata.tool_averages`` becomes a
    ``tool:<type>`` column with that tool's overall average in the trajectory.
    """
    out = pd.DataFrame(index=summaries.index)
    for column in SCORE_COLUMNS:
        if column in summaries.columns:
            out[column] = [math.nan if v is None or pd.isna(v) else float(v)
                           for v in summaries[column]]
    if "evaluation_metadata" in summaries.columns:
        tools: dict[str, list[float]] = {}
        for i, text in enumerate(summaries["evaluation_metadata"]):
            meta = json.loads(text) if isinstance(text, str) and text else {}
            for tool, figures in (meta.get("tool_averages") or {}).items():
                value = figures.get("overall_average") if isinstance(figures, dict) else None
                values = tools.setdefault(f"{TOOL_PREFIX}{tool}", [math.nan] * len(summaries))
                values[i] = math.nan if value is None else float(value)
        for name in sorted(tools):
            out[name] = tools[name]
    return out


def _per_task(summaries: pd.DataFrame, metrics: pd.DataFrame
              ) -> tuple[pd.DataFrame, dict[str, list[str]], dict[str, int], int]:
    """Metrics averaged per task id (NaN ignored), trajectory ids per task, duplicate task
    ids with their row counts, and the rows without a task id."""
    task = summaries["task_id"]
    has_task = task.notna() & (task.astype(str) != "")
    keys = task[has_task].astype(str)
    frame = metrics[has_task].copy()
    frame.index = keys.to_numpy()
    means = frame.groupby(level=0, sort=True).mean()
    ids = (summaries.loc[has_task, "trajectory_id"].astype(str)
           if "trajectory_id" in summaries.columns else keys)
    trajectories: dict[str, list[str]] = {}
    for key, trajectory in zip(keys, ids, strict=True):
        trajectories.setdefault(key, []).append(trajectory)
    counts = keys.value_counts()
    duplicates = {str(k): int(v) for k, v in sorted(counts[counts > 1].items())}
    return means, trajectories, duplicates, int((~has_task).sum())


def bootstrap_interval(differences: np.ndarray, seed: int, resamples: int = RESAMPLES,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile interval of the mean of ``differences`` over resamples of the tasks with
    replacement (the paired bootstrap: each task keeps its A and B together)."""
    rng = np.random.default_rng(seed)
    n = len(differences)
    means = np.empty(resamples)
    step = max(1, _CHUNK_CELLS // max(n, 1))
    for start in range(0, resamples, step):
        size = min(step, resamples - start)
        idx = rng.integers(0, n, size=(size, n))
        means[start:start + size] = differences[idx].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def verdict(low: float | None, high: float | None) -> Verdict:
    """``better`` only if the whole interval is above 0, ``worse`` if below."""
    if low is None or high is None:
        return "no evidence"
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "no evidence"


def _round(value: float) -> float:
    return round(value, 6)


def compare_tables(a: pd.DataFrame, b: pd.DataFrame, metrics: Sequence[str] | None = None,
                   seed: int = DEFAULT_SEED, resamples: int = RESAMPLES, top: int = TOP_MOVERS,
                   label_a: str = "A", label_b: str = "B") -> Comparison:
    """Compare two ``trajectory_summaries`` tables task by task (see the module docstring).

    ``metrics``: the metric names to compare (default: every metric either side has);
    an unknown name is an error that lists the known ones.
    """
    for name, table in ((label_a, a), (label_b, b)):
        if "task_id" not in table.columns:
            raise CompareError(f"{name}: no task_id column (is it a trajectory_summaries "
                               "table?)")
    values_a, values_b = metric_table(a), metric_table(b)
    known = list(dict.fromkeys([*values_a.columns, *values_b.columns]))
    wanted = list(metrics) if metrics else known
    unknown = [m for m in wanted if m not in known]
    if unknown:
        raise CompareError(f"unknown metric {', '.join(unknown)}; known: {', '.join(known)}")
    for frame in (values_a, values_b):
        for m in wanted:
            if m not in frame.columns:
                frame[m] = math.nan
    tasks_a, traj_a, dup_a, no_id_a = _per_task(a, values_a[wanted])
    tasks_b, traj_b, dup_b, no_id_b = _per_task(b, values_b[wanted])
    paired = tasks_a.index.intersection(tasks_b.index).sort_values()
    pairing = Pairing(
        rows_a=len(a), rows_b=len(b), paired_tasks=len(paired),
        unpaired_a=sorted(str(t) for t in tasks_a.index.difference(tasks_b.index)),
        unpaired_b=sorted(str(t) for t in tasks_b.index.difference(tasks_a.index)),
        duplicates_a=dup_a, duplicates_b=dup_b,
        missing_task_id_a=no_id_a, missing_task_id_b=no_id_b,
    )
    results = []
    for metric in wanted:
        left = tasks_a.loc[paired, metric]
        right = tasks_b.loc[paired, metric]
        both = left.notna() & right.notna()
        left, right = left[both], right[both]
        change = right - left
        n = len(change)
        low = high = None
        if n >= MIN_PAIRS:
            low, high = bootstrap_interval(change.to_numpy(dtype=float), seed, resamples)
        order = sorted(change.index, key=lambda t: (-abs(float(change[t])), str(t)))[:top]
        results.append(MetricComparison(
            metric=metric, pairs=n, missing=len(paired) - n,
            mean_a=_round(float(left.mean())) if n else None,
            mean_b=_round(float(right.mean())) if n else None,
            difference=_round(float(change.mean())) if n else None,
            ci_low=None if low is None else _round(low),
            ci_high=None if high is None else _round(high),
            verdict=verdict(low, high),
            movers=[Mover(task_id=str(t), trajectories_a=traj_a[t], trajectories_b=traj_b[t],
                          a=_round(float(left[t])), b=_round(float(right[t])),
                          change=_round(float(change[t])))
                    for t in order if change[t] != 0],
        ))
    return Comparison(label_a=label_a, label_b=label_b, seed=seed, resamples=resamples,
                      confidence=CONFIDENCE, pairing=pairing, metrics=results)


READ_COLUMNS = ("task_id", "trajectory_id", "agent_version", "evaluation_metadata",
                *SCORE_COLUMNS)
"""The summary columns a comparison reads: not the responses with their evaluations, nearly
all of a summaries file's bytes (#12.3: a big run's file is compared without them)."""


def read_summaries(path: Path) -> pd.DataFrame:
    """A run's output folder (its ``trajectory_summaries.parquet``) or a Parquet file:
    the :data:`READ_COLUMNS` it has."""
    file = path / SUMMARIES_FILE if path.is_dir() else path
    if not file.is_file():
        raise CompareError(f"no trajectory summaries at {file} (give a run's --output "
                           "folder or a trajectory_summaries Parquet file)")
    present = set(pq.read_schema(file).names)
    return pd.read_parquet(file, columns=[c for c in READ_COLUMNS if c in present])


def split_by_agent_version(path: Path, version_a: str, version_b: str
                           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One run's summaries split into two agent versions.

    ``agent_version`` is taken from the summaries when they carry it, else joined by
    trajectory id from the run's ``preprocessed_trajectories.parquet`` (the summaries
    asset does not copy it).
    """
    table = read_summaries(path)
    if "agent_version" not in table.columns:
        folder = path if path.is_dir() else path.parent
        source = folder / TRAJECTORIES_FILE
        if not source.is_file():
            raise CompareError(f"{path} has no agent_version column and no {TRAJECTORIES_FILE}"
                               " beside it to take it from")
        versions = pd.read_parquet(source, columns=["trajectory_id", "agent_version"])
        lookup = dict(zip(versions["trajectory_id"], versions["agent_version"], strict=True))
        table = table.assign(agent_version=pd.Series(
            [lookup.get(t) for t in table["trajectory_id"]], index=table.index, dtype=object))
    present = sorted({str(v) for v in table["agent_version"].dropna()})
    for version in (version_a, version_b):
        if version not in present:
            raise CompareError(f"agent version {version!r} not in {path}; present: "
                               f"{', '.join(present) or 'none'}")
    column = table["agent_version"].astype("string")
    return (table[(column == version_a).fillna(False)].reset_index(drop=True),
            table[(column == version_b).fillna(False)].reset_index(drop=True))


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def metrics_rows(result: Comparison) -> list[list[object]]:
    return [[m.metric, m.pairs, _fmt(m.mean_a), _fmt(m.mean_b), _fmt(m.difference, True),
             f"[{_fmt(m.ci_low, True)}, {_fmt(m.ci_high, True)}]", m.verdict]
            for m in result.metrics]


METRIC_HEADERS = ["metric", "pairs", "mean A", "mean B", "B - A", "95% CI", "verdict"]
MOVER_HEADERS = ["task_id", "A", "B", "change"]


def pairing_lines(result: Comparison) -> list[str]:
    """What the pairing kept out or merged, one line each (nothing when all paired 1:1)."""
    p = result.pairing
    lines = [f"A: {result.label_a} ({p.rows_a} rows); B: {result.label_b} ({p.rows_b} rows); "
             f"{p.paired_tasks} paired tasks"]
    for side, unpaired in (("A", p.unpaired_a), ("B", p.unpaired_b)):
        if unpaired:
            shown = ", ".join(unpaired[:10]) + (" ..." if len(unpaired) > 10 else "")
            lines.append(f"only in {side} (not compared): {len(unpaired)} tasks: {shown}")
    for side, dups in (("A", p.duplicates_a), ("B", p.duplicates_b)):
        if dups:
            shown = ", ".join(f"{k} x{v}" for k, v in list(dups.items())[:10])
            lines.append(f"duplicate task ids in {side} (averaged per task): {len(dups)}: "
                         f"{shown}")
    for side, n in (("A", p.missing_task_id_a), ("B", p.missing_task_id_b)):
        if n:
            lines.append(f"rows without a task id in {side} (not compared): {n}")
    return lines


def render_text(result: Comparison, fmt: str = "simple") -> str:
    """The printed (``simple``) or Markdown (``github``) report: pairing, the metrics,
    then the movers of each metric that has any."""
    from tabulate import tabulate

    parts = ["\n".join(pairing_lines(result)),
             tabulate(metrics_rows(result), headers=METRIC_HEADERS, tablefmt=fmt,
                      disable_numparse=True)]
    for m in result.metrics:
        if m.movers:
            rows = [[v.task_id, _fmt(v.a), _fmt(v.b), _fmt(v.change, True)] for v in m.movers]
            parts.append(f"moved most: {m.metric}\n"
                         + tabulate(rows, headers=MOVER_HEADERS, tablefmt=fmt,
                                    disable_numparse=True))
    return "\n\n".join(parts)


def write_outputs(result: Comparison, folder: Path) -> list[Path]:
    """``compare.json`` (every figure) and ``compare.md`` (the tables) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / "compare.json", folder / "compare.md"
    json_path.write_text(result.model_dump_json(indent=2) + "\n", "utf-8")
    md_path.write_text(f"# {result.label_b} vs {result.label_a}\n\n"
                       + render_text(result, "github") + "\n", "utf-8")
    return [json_path, md_path]


# --- the CLI verb (parsing lives here so cli.py only registers it) -----------------------


EXIT_WORSE = 4  # 1 is an error, 2 bad arguments, 3 failed judgments (run)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``eval-pipeline compare A B`` or ``eval-pipeline compare RUN --by-agent-version VA VB``."""
    parser = sub.add_parser(
        "compare", help="is run B better than run A? per-metric paired bootstrap over tasks")
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                        help="two runs (A then B): --output folders of earlier runs or "
                        "trajectory_summaries Parquet files; one run with --by-agent-version")
    parser.add_argument("--by-agent-version", nargs=2, default=None,
                        metavar=("VERSION_A", "VERSION_B"),
                        help="compare two agent versions within one run")
    parser.add_argument("--metric", action="append", default=None,
                        help="a metric to compare (repeatable; default every metric)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"bootstrap seed (default {DEFAULT_SEED})")
    parser.add_argument("--resamples", type=int, default=RESAMPLES,
                        help=f"bootstrap resamples (default {RESAMPLES})")
    parser.add_argument("--top", type=int, default=TOP_MOVERS,
                        help=f"tasks listed as moved most per metric (default {TOP_MOVERS})")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="write compare.json and compare.md to this folder")
    parser.add_argument("--fail-on-worse", action="store_true",
                        help=f"exit {EXIT_WORSE} when a compared metric is worse in B (a CI "
                        "gate: a regression the bootstrap can tell from noise)")


def run(args: argparse.Namespace) -> Comparison:
    """The comparison the parsed arguments ask for; :class:`CompareError` on bad input."""
    if args.resamples < 1 or args.top < 0:
        raise CompareError("--resamples must be at least 1 and --top 0 or more")
    if args.by_agent_version is not None:
        if len(args.runs) != 1:
            raise CompareError("--by-agent-version compares within one run: give one RUN")
        version_a, version_b = args.by_agent_version
        a, b = split_by_agent_version(args.runs[0], version_a, version_b)
        labels = (f"{args.runs[0]} [{version_a}]", f"{args.runs[0]} [{version_b}]")
    else:
        if len(args.runs) != 2:
            raise CompareError("compare takes two runs, A then B (or one with "
                               "--by-agent-version VERSION_A VERSION_B)")
        a, b = read_summaries(args.runs[0]), read_summaries(args.runs[1])
        labels = (str(args.runs[0]), str(args.runs[1]))
    return compare_tables(a, b, metrics=args.metric, seed=args.seed,
                          resamples=args.resamples, top=args.top,
                          label_a=labels[0], label_b=labels[1])


def command(args: argparse.Namespace) -> int:
    """Print the comparison (and write it under ``--output``); 1 with a one-line error."""
    import sys

    try:
        result = run(args)
    except (CompareError, OSError) as exc:
        print(f"eval-pipeline: error: {exc}", file=sys.stderr)
        return 1
    print(render_text(result))
    if not result.pairing.paired_tasks:
        print("eval-pipeline: warning: no task id is in both runs; nothing was compared "
              "(are they runs of the same tasks?)", file=sys.stderr)
    if args.output is not None:
        written = write_outputs(result, args.output)
        print(f"\nwrote {', '.join(str(p) for p in written)}")
    worse = [m.metric for m in result.metrics if m.verdict == "worse"]
    if args.fail_on_worse and worse:
        print(f"eval-pipeline: worse in B: {', '.join(worse)}", file=sys.stderr)
        return EXIT_WORSE
    return 0
