"""``eval-pipeline run INPUT --output DIR``: the whole asset graph, in-process, through Dagster.

The CLI is not a second code path: it splits the drop into batches, registers them as
dynamic partitions of the same Definitions the UI loads, executes the batch job per
partition and the report job, all recorded in the Dagster instance under DAGSTER_HOME, so
the runs, metadata and lineage show up in ``dagster dev``. Then it exports one Parquet
file per asset, ``evaluated.jsonl`` in the original tool's layout, and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from eval_pipeline.ingest import ReadOptions
from eval_pipeline.judges.config import JudgeConfig, load_judges
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.splitting import DROP_SUFFIXES, BatchManifest, split_drop, unique_bases
from eval_pipeline.tool_registry import load_registry

DAGSTER_HOME_DIRNAME = ".dagster_home"
_SKIP_DIRS = {"batches", "assets", "output", DAGSTER_HOME_DIRNAME, "__pycache__"}
EVALUATED_FIELDS = ["timestamp", "task_id", "task_description", "duration", "success",
                    "final_result", "raw_response"]


class CliError(Exception):
    """A problem the user can fix; printed without a traceback, exit code 1."""


def collect_inputs(path: Path, exclude: Path | None = None) -> list[Path]:
    """Input files under ``path``; never the pipeline's own output folder or hidden files."""
    if not path.exists():
        raise CliError(f"input not found: {path}")
    if path.is_file():
        return [path]
    skip = exclude.resolve() if exclude is not None else None
    found = sorted(
        p for p in path.rglob("*")
        if p.is_file() and p.suffix.lower() in DROP_SUFFIXES
        and not any(part in _SKIP_DIRS or part.startswith(".")
                    for part in p.relative_to(path).parts[:-1])
        and not p.name.startswith(".")
        and not (skip is not None and p.resolve().is_relative_to(skip))
    )
    if not found:
        raise CliError(f"no input files ({', '.join(sorted(DROP_SUFFIXES))}) under {path}")
    return found


def default_dagster_home() -> Path:
    """Inside the project when run from it (git-ignored), else in the user's home."""
    cwd = Path.cwd()
    if (cwd / "workspace.yaml").exists():
        return cwd / DAGSTER_HOME_DIRNAME
    project = Path(__file__).resolve().parents[1]
    if (project / "workspace.yaml").exists():
        return project / DAGSTER_HOME_DIRNAME
    return Path.home() / ".eval_pipeline" / "dagster_home"


def ensure_dagster_home() -> Path:
    home = Path(os.environ.get("DAGSTER_HOME") or default_dagster_home()).resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\n", "utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def split_inputs(inputs: Sequence[Path], batches_dir: Path, split_size: int,
                 read: ReadOptions) -> list[BatchManifest]:
    manifests: list[BatchManifest] = []
    bases = unique_bases(list(inputs))
    for drop in inputs:
        for manifest in split_drop(drop, batches_dir, split_size, read.format_for(drop),
                                   base=bases[drop]):
            if any(m.partition_key == manifest.partition_key for m in manifests):
                raise CliError(f"two inputs map to batch {manifest.partition_key!r}: rename one "
                               f"of the files named {drop.name!r}")
            manifests.append(manifest)
    return manifests


def export_tables(assets_dir: Path, output: Path) -> dict[str, pd.DataFrame]:
    """One Parquet per asset at the top of DIR, all batches concatenated."""
    tables: dict[str, pd.DataFrame] = {}
    for single in sorted(assets_dir.rglob("*.parquet")):
        rel = single.relative_to(assets_dir)
        if len(rel.parts) == 1:  # unpartitioned asset: <base>/<name>.parquet
            tables[rel.stem] = pd.read_parquet(single)
    for folder in sorted(p for p in assets_dir.rglob("*") if p.is_dir()):
        files = sorted(folder.glob("*.parquet"))
        if not files or any(p.is_dir() for p in folder.iterdir()):
            continue
        name = "__".join(folder.relative_to(assets_dir).parts)
        frames = [pd.read_parquet(f) for f in files]
        nonempty = [f for f in frames if len(f)]
        tables[name] = pd.concat(nonempty, ignore_index=True) if nonempty else frames[0]
    for name, table in tables.items():
        table.to_parquet(output / f"{name}.parquet", index=False)
    return tables


def write_evaluated(summaries: pd.DataFrame, path: Path) -> int:
    """The original tool's output records: the input fields plus the evaluations."""
    ordered = summaries.sort_values(["batch", "source_line"]) if len(summaries) else summaries
    with path.open("w", encoding="utf-8") as fh:
        for row in ordered.to_dict("records"):
            record = {k: (None if isinstance(row.get(k), float) and pd.isna(row.get(k))
                          else row.get(k)) for k in EVALUATED_FIELDS}
            record["full_response_with_evaluations"] = row["full_response_with_evaluations"]
            record["evaluation_metadata"] = json.loads(row["evaluation_metadata"])
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(ordered)


def summary_lines(tables: dict[str, pd.DataFrame], batches: int,
                  judges: Sequence[JudgeConfig]) -> list[tuple[str, object]]:
    def rows(name: str) -> int:
        return len(tables.get(name, ()))

    raw, quarantined = rows("raw_trajectories"), rows("quarantine")
    kept, removed = rows("preprocessed_trajectories"), rows("preprocess_report")
    summaries = tables.get("trajectory_summaries", pd.DataFrame())
    scored = summaries["overall_trajectory_score"].dropna() if len(summaries) else pd.Series()
    lines: list[tuple[str, object]] = [
        ("batches", batches),
        ("records read", raw + quarantined),
        ("kept", kept),
        ("removed (preprocessing)", removed),
        ("quarantined", quarantined),
        ("clips", rows("clips")),
    ]
    for name, label in (("preprocess_report", "removed"), ("quarantine", "quarantined")):
        table = tables.get(name)
        if table is not None and len(table):
            for reason, n in table["reason"].value_counts().items():
                lines.append((f"  {label}: {reason}", int(n)))
    raw_table = tables.get("raw_trajectories")
    if raw_table is not None and len(raw_table):
        for fmt, n in raw_table["source_format"].value_counts().items():
            lines.append((f"  format: {fmt}", int(n)))
    for judge in judges:
        table = tables.get(f"judgments__{judge.name}", pd.DataFrame())
        status = table["status"].value_counts().to_dict() if len(table) else {}
        detail = ", ".join(f"{k} {v}" for k, v in sorted(status.items())) or "none"
        cost = float(table["cost_usd"].sum()) if len(table) else 0.0
        cached = int(table["cached"].sum()) if len(table) else 0
        tokens = (int(table["tokens_in"].sum()), int(table["tokens_out"].sum())) if len(
            table) else (0, 0)
        lines.append((f"judgments [{judge.name}]",
                      f"{len(table)} ({detail}; cached {cached}; tokens {tokens[0]} in "
                      f"/ {tokens[1]} out; ${cost:.4f})"))
    routing = tables.get("routing_checks")
    if routing is not None and len(routing):
        lines.append(("routing checks", f"{int(routing['passed'].sum())}/{len(routing)} passed"))
    lines.append(("mean overall score",
                  f"{scored.mean():.3f} over {len(scored)} trajectories" if len(scored)
                  else "n/a (nothing scored)"))
    report = tables.get("evaluation_report")
    if report is not None and len(report) and (report["batch"] == "ALL").any():
        overall = report[report["batch"] == "ALL"].iloc[0]
        for column, label in (("thought_to_tool_accuracy", "thought-to-tool accuracy"),
                              ("query_to_thought_accuracy", "query-to-thought accuracy"),
                              ("sequence_optimality_accuracy", "sequence optimality")):
            value = overall.get(column)
            if value is not None and pd.notna(value):
                lines.append((label, f"{float(value):.3f}"))
    clips = tables.get("clips")
    if clips is not None and len(clips):
        for tool, n in clips["tool_type"].value_counts().items():
            lines.append((f"  clips: {tool}", int(n)))
    return lines


@dataclass(frozen=True)
class BatchRunSpec:
    """Everything a worker process needs to rebuild the same Definitions (picklable)."""

    judges: tuple[JudgeConfig, ...]
    pipeline: dict[str, object]
    assets_dir: str
    log_level: str

    def definitions(self):
        from eval_pipeline.definitions import build_definitions
        from eval_pipeline.settings import PipelineSettings

        return build_definitions(self.judges, pipeline=PipelineSettings(**self.pipeline),
                                 assets_dir=self.assets_dir)

    @property
    def run_config(self) -> dict:
        return {"loggers": {"console": {"config": {"log_level": self.log_level}}}}


def _execute(job, instance, run_config: dict, partition_key: str | None = None) -> str | None:
    """Run one job in-process; the first step failure's message, or None on success."""
    result = job.execute_in_process(partition_key=partition_key, instance=instance,
                                    run_config=run_config, raise_on_error=False,
                                    tags={"eval_pipeline/source": "cli"})
    return None if result.success else _first_failure(result)


def _run_batches_in_worker(spec: BatchRunSpec, keys: list[str]) -> tuple[str, str] | None:
    """A worker process: its own Definitions and instance handle, the same DAGSTER_HOME."""
    import dagster as dg

    job = spec.definitions().resolve_job_def("evaluate_batch")
    with dg.DagsterInstance.get() as instance:
        for key in keys:
            print(f"evaluating batch {key}", file=sys.stderr)
            error = _execute(job, instance, spec.run_config, key)
            if error:
                return key, error
    return None


def run_pipeline(input_path: Path, output: Path, judges: Sequence[JudgeConfig],
                 split_size: int = 10, preprocess: PreprocessConfig | None = None,
                 read: ReadOptions | None = None, log_level: str = "WARNING",
                 workers: int = 1) -> dict[str, pd.DataFrame]:
    """Run every stage for every batch through Dagster and export the results.

    With ``workers > 1`` batches run in that many processes at once, each recording into
    the same instance; the orchestration cost per batch is mostly event-log writes, so this
    scales with cores.
    """
    import dagster as dg

    from eval_pipeline.partitions import BATCHES_PARTITION

    inputs = collect_inputs(input_path, exclude=output)
    output.mkdir(parents=True, exist_ok=True)
    batches_dir, assets_dir = output / "batches", output / "assets"
    for folder in (batches_dir, assets_dir):
        if folder.exists():
            shutil.rmtree(folder)
    read = read or ReadOptions()
    manifests = split_inputs(inputs, batches_dir, split_size, read)
    ensure_dagster_home()
    preprocess = preprocess or PreprocessConfig()
    spec = BatchRunSpec(
        judges=tuple(judges),
        pipeline={"batches_dir": str(batches_dir.resolve()), "split_size": split_size,
                  **read.model_dump(), **preprocess.model_dump()},
        assets_dir=str(assets_dir.resolve()),
        log_level=log_level,
    )
    keys = [m.partition_key for m in manifests]
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(BATCHES_PARTITION, keys)
    shares = [keys[i::workers] for i in range(workers)] if workers > 1 else [keys]
    if len(shares) == 1:
        failures = [_run_batches_in_worker(spec, keys)]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=len(shares), mp_context=context) as pool:
            failures = list(pool.map(_run_batches_in_worker, [spec] * len(shares), shares))
    for failure in failures:
        if failure:
            raise CliError(f"batch {failure[0]} failed: {failure[1]}")
    defs = spec.definitions()
    with dg.DagsterInstance.get() as instance:
        error = _execute(defs.resolve_job_def("evaluation_report_job"), instance,
                         spec.run_config)
    if error:
        raise CliError(f"evaluation report failed: {error}")
    tables = export_tables(assets_dir, output)
    write_evaluated(tables.get("trajectory_summaries", pd.DataFrame()),
                    output / "evaluated.jsonl")
    return tables


def _first_failure(result) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            return event.step_failure_data.error.message.strip()
    return "unknown failure (see the run in the Dagster UI)"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eval-pipeline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the whole pipeline on a file or a folder")
    run.add_argument("input", type=Path, help="a trajectory file or a folder of them")
    run.add_argument("--output", "-o", type=Path, required=True, help="output folder")
    run.add_argument("--judges", type=Path, default=None,
                     help="judges YAML file (default: the offline heuristic judge)")
    run.add_argument("--split-size", type=_positive, default=10,
                     help="records per batch (default 10)")
    run.add_argument("--beta-threshold", type=_non_negative, default=15,
                     help="drop trajectories with more tool calls than this (default 15)")
    run.add_argument("--frequency-filter", choices=["remove", "flag"], default="remove",
                     help="over the beta threshold: remove the trajectory or only flag it")
    run.add_argument("--duplicate-filter", choices=["remove", "flag"], default="remove",
                     help="consecutive identical calls: remove the trajectory or only flag it")
    run.add_argument("--format", dest="input_format", default=None,
                     help="force an input format instead of detecting it per file")
    run.add_argument("--format-for", action="append", default=[], metavar="GLOB=FORMAT",
                     help="the format of files matching GLOB (repeatable)")
    run.add_argument("--tools", type=Path, default=None,
                     help="a tools.yaml mapping tags and tool names to tool types")
    run.add_argument("--workers", type=_positive, default=1,
                     help="batches evaluated at once, each in its own process (default 1)")
    run.add_argument("--verbose", "-v", action="store_true", help="show Dagster's run logs")
    run.add_argument("--dry-run", action="store_true",
                     help="print the judge calls, tokens and cost the run would make; "
                     "call nothing")
    return parser


def read_options(args: argparse.Namespace) -> ReadOptions:
    from eval_pipeline.formats import PARSERS

    overrides: dict[str, str] = {}
    for item in args.format_for:
        pattern, sep, name = item.partition("=")
        if not sep or not pattern or not name:
            raise CliError(f"--format-for takes GLOB=FORMAT, got {item!r}")
        overrides[pattern] = name
    for name in [args.input_format, *overrides.values()]:
        if name is not None and name not in PARSERS:
            raise CliError(f"unknown format {name!r}; known: {', '.join(sorted(PARSERS))}")
    if args.tools is not None:
        if not args.tools.is_file():
            raise CliError(f"tools file not found: {args.tools}")
        try:
            load_registry(args.tools)
        except (ValidationError, ValueError, OSError) as exc:
            raise CliError(f"invalid tools file {args.tools}: {exc}") from exc
    return ReadOptions(input_format=args.input_format, format_overrides=overrides,
                       tools_file=str(args.tools.resolve()) if args.tools else None)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.judges is not None and not args.judges.is_file():
            raise CliError(f"judges file not found: {args.judges}")
        try:
            judges = load_judges(args.judges)
        except (ValidationError, ValueError, OSError) as exc:
            raise CliError(f"invalid judges file {args.judges}: {exc}") from exc
        preprocess = PreprocessConfig(beta_threshold=args.beta_threshold,
                                      frequency_filter=args.frequency_filter,
                                      duplicate_filter=args.duplicate_filter)
        read = read_options(args)
        if args.dry_run:
            from eval_pipeline.dry_run import dry_run

            ensure_dagster_home()  # the judge cache lives under DAGSTER_HOME
            print(dry_run(collect_inputs(args.input), judges, preprocess=preprocess,
                          read=read).to_table())
            return 0
        tables = run_pipeline(args.input, args.output, judges, args.split_size,
                              preprocess, read,
                              "DEBUG" if args.verbose else "WARNING", args.workers)
    except CliError as exc:
        print(f"eval-pipeline: error: {exc}", file=sys.stderr)
        return 1
    from tabulate import tabulate

    batches = len(list((args.output / "batches").glob("*/*.manifest.json")))
    lines = summary_lines(tables, batches, judges)
    print(tabulate(lines, headers=["", "value"], tablefmt="simple"))
    print(f"\nwrote {args.output / 'evaluated.jsonl'} and "
          f"{len(tables)} asset tables to {args.output}/")
    print(f"Dagster instance: {os.environ['DAGSTER_HOME']} (open it with dagster dev)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
