"""``eval-pipeline run INPUT --output DIR``: the whole asset graph, in-process, through Dagster.

``eval-pipeline compare A B`` compares two earlier runs (:mod:`eval_pipeline.compare`).

Argument parsing and the printed summary; :mod:`eval_pipeline.local_run` does the work
(the same Definitions and jobs the UI runs, recorded in the instance under DAGSTER_HOME).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from eval_pipeline import compare, progress
from eval_pipeline.exports.run_figures import RunFigures
from eval_pipeline.exports.tables import value_counts
from eval_pipeline.ingest import ReadOptions
from eval_pipeline.judges.config import (
    JudgeConfig,
    load_judges,
    parse_judges,
    without_assessments,
)
from eval_pipeline.local_run import (
    PipelineInputError,
    check_judge_keys,
    collect_inputs,
    ensure_dagster_home,
    forget_batches,
    hide_beta_warnings,
    run_pipeline,
    run_preprocess_only,
)
from eval_pipeline.preprocess import PreprocessConfig, PreprocessStats
from eval_pipeline.routing import ARGUMENT_MODES, TRAJECTORY_MODES
from eval_pipeline.routing_suite import command as routing_suite_command
from eval_pipeline.tool_registry import load_registry


class CliError(PipelineInputError):
    """A bad argument value found after parsing; printed without a traceback, exit 1."""


def summary_lines(figures: RunFigures, batches: int,
                  judges: Sequence[JudgeConfig]) -> list[tuple[str, object]]:
    """The run's summary table, from the figures its export added up batch by batch."""
    rows = figures.rows
    raw, quarantined = rows["raw_trajectories"], rows["quarantine"]
    lines: list[tuple[str, object]] = [
        ("batches", batches),
        ("records read", raw + quarantined),
        ("kept", rows["preprocessed_trajectories"]),
        ("removed (preprocessing)", rows["preprocess_report"]),
        ("quarantined", quarantined),
        ("clips", rows["clips"]),
    ]
    for name, label in (("preprocess_report", "removed"), ("quarantine", "quarantined")):
        for reason, n in value_counts(figures.reasons.get(name, {})):
            lines.append((f"  {label}: {reason}", int(n)))
    for fmt, n in value_counts(figures.formats):
        lines.append((f"  format: {fmt}", int(n)))
    for judge in judges:
        table = figures.judge(judge.name)
        detail = ", ".join(f"{k} {v}" for k, v in sorted(table.status.items())) or "none"
        mode = f", {judge.mode} mode" if judge.provider != "heuristic" else ""
        lines.append((f"judgments [{judge.name}]",
                      f"{table.rows} ({detail}; cached {table.cached}; tokens "
                      f"{table.tokens_in} in / {table.tokens_out} out; ${table.cost:.4f}"
                      f"{mode})"))
    if rows["routing_checks"]:
        lines.append(("routing checks",
                      f"{figures.routing_passed}/{rows['routing_checks']} passed"))
        credit = figures.mean_partial_credit
        if credit is not None:
            lines.append(("  routing partial credit", f"{credit:.3f}"))
    scored = figures.mean_score
    lines.append(("mean overall score",
                  f"{scored[0]:.3f} over {scored[1]} trajectories" if scored
                  else "n/a (nothing scored)"))
    overall = figures.report_overall
    if overall is not None:
        for column, label in (("thought_to_tool_accuracy", "thought-to-tool accuracy"),
                              ("query_to_thought_accuracy", "query-to-thought accuracy"),
                              ("sequence_optimality_accuracy", "sequence optimality"),
                              ("trajectory_assessment_mean", "trajectory assessment")):
            value = overall.get(column)
            if value is not None and pd.notna(value):
                lines.append((label, f"{float(value):.3f}"))
    for tool, n in value_counts(figures.clip_tools):
        lines.append((f"  clips: {tool}", int(n)))
    return lines


ROUTING_REPORT_MAX_CASES = 40


def print_routing_report(figures: RunFigures, output: Path) -> None:
    """The eval-suite report (routing evals' format) goes to ``routing_report.txt``; it is
    printed too when it is short enough to read in a terminal."""
    cases = figures.rows["routing_checks"]
    if not cases or figures.routing_text is None:
        return
    text = figures.routing_text
    (output / "routing_report.txt").write_text(text + "\n", "utf-8")
    if cases <= ROUTING_REPORT_MAX_CASES:
        print(f"\n{text}")
    else:
        print(f"\nrouting report ({cases} cases): {output / 'routing_report.txt'}")


JUDGMENTS_FAILED = 3


def failed_judges(figures: RunFigures, judges: Sequence[JudgeConfig]) -> dict[str, str]:
    """Judge name -> one line, for each judge that gave nothing usable: every judgment
    failed, or its breaker opened. Its rows are still in the tables; the other judges'
    averages stand."""
    lines: dict[str, str] = {}
    for judge in judges:
        table = figures.judge(judge.name)
        if not table.rows:
            continue
        breaker = table.first_breaker
        if table.ok and breaker is None:
            continue
        first = breaker or table.first_error or "no error recorded"
        lines[judge.name] = (f"judge {judge.name!r} failed: {table.ok} of {table.rows} "
                             f"judgments ok; {' '.join(first.split())[:300]}")
    return lines


def preprocessing_statistics(figures: RunFigures) -> PreprocessStats:
    """The original tool's PREPROCESSING STATISTICS figures, from this run's tables.

    Total: the records that parsed (the quarantined ones never reached preprocessing, as
    the original's loader never handed it a line it could not read); valid: the kept ones;
    removed: ``preprocess_report`` by reason; format issues fixed: kept trajectories whose
    tags were repaired (the original repairs only the samples that passed both filters).
    """
    return figures.preprocessing()


# The original tool's provider names that are presets here (its "google" is Gemini).
PROVIDER_ALIASES = {"google": "gemini", "vertex_ai": "vertex"}
_JUDGE_PROVIDERS = ("heuristic", "openai", "openai_compatible", "anthropic")


def shortcut_entry(provider: str, model: str | None = None, api_key_env: str | None = None,
                   base_url: str | None = None, batch_size: int | None = None,
                   rate_limit: float | None = None) -> dict[str, object]:
    """``--provider/--model/--api-key-env/...`` as the one entry of a judges file.

    The original tool's ``--batch-size`` (concurrent evaluations) is ``concurrency``; its
    ``--rate-limit`` (seconds between API requests) is ``requests_per_minute`` = 60 /
    seconds (0: no pacing). A provider that is a preset here (deepseek, kimi, google ->
    gemini, vertex_ai, vllm, ollama, llamacpp) becomes ``openai_compatible`` with that
    preset, so its base URL, reply mode, prices and key variable are the preset's.
    """
    from eval_pipeline.judges.presets import PRESETS

    wanted = provider.strip().lower()
    preset = PROVIDER_ALIASES.get(wanted, wanted)
    name = re.sub(r"[^a-z0-9_]+", "_", wanted).strip("_")
    entry: dict[str, object] = {"name": name if re.match(r"^[a-z]", name) else f"judge_{name}"}
    if preset in _JUDGE_PROVIDERS:
        entry["provider"] = preset
    elif preset in PRESETS:
        entry["provider"] = "openai_compatible"
        entry["preset"] = preset
    else:
        entry["provider"] = provider  # refused by validation, naming the known providers
    optional = {"model": model, "api_key_env": api_key_env, "base_url": base_url,
                "concurrency": batch_size,
                "requests_per_minute": 60.0 / rate_limit if rate_limit else None}
    entry.update({k: v for k, v in optional.items() if v is not None})
    return entry


def judges_from_args(args: argparse.Namespace) -> list[JudgeConfig]:
    """The judges of this run: a judges file, the one-judge shortcut, or the heuristic.

    The shortcut goes through the judges file's own validation (:func:`parse_judges`):
    the same preset defaults, the same one-line errors, the same refusal of a key value.
    """
    pacing = [flag for flag, value in (("--batch-size", args.batch_size),
                                       ("--rate-limit", args.rate_limit),
                                       ("--model", args.model),
                                       ("--api-key-env", args.api_key_env),
                                       ("--base-url", args.base_url)) if value is not None]
    if args.provider is None:
        if pacing:
            where = ("set them per judge in the judges file (concurrency, "
                     "requests_per_minute, model, api_key_env, base_url)"
                     if args.judges is not None else "add --provider NAME")
            raise CliError(f"{', '.join(pacing)} configure the --provider judge; {where}")
        if args.judges is not None and not args.judges.is_file():
            raise CliError(f"judges file not found: {args.judges}")
        try:
            return load_judges(args.judges)
        except (ValidationError, ValueError, OSError) as exc:
            raise CliError(f"invalid judges file {args.judges}: {exc}") from exc
    entry = shortcut_entry(args.provider, args.model, args.api_key_env, args.base_url,
                           args.batch_size, args.rate_limit)
    try:
        return parse_judges({"judges": [entry]})
    except ValueError as exc:
        raise CliError(f"invalid --provider judge: {exc}") from exc


class _RefuseKeyValue(argparse.Action):
    """``--api-key VALUE`` (the original's flag) is refused without repeating the value:
    a key on the command line lands in shell history and process listings."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        parser.error("--api-key is not accepted (the value is not shown): put the key in "
                     "an environment variable and name it with --api-key-env NAME")


def _seconds(value: str) -> float:
    number = float(value)
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {value}")
    return number


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
    run.add_argument("--output", "-o", type=Path, required=True,
                     help="where this run's exports go: evaluated.jsonl, one Parquet per "
                          "asset, the report")
    run.add_argument("--store", type=Path, default=None,
                     help="the instance's store of batch files and asset Parquet, shared "
                          "with the UI (default: $EVAL_PIPELINE_STORE, else the folder this "
                          "instance used last, else the project's data/)")
    judges = run.add_mutually_exclusive_group()
    judges.add_argument("--judges", type=Path, default=None,
                        help="judges YAML file (default: the offline heuristic judge)")
    judges.add_argument("--provider", default=None,
                        help="one judge without a judges file, as the original tool: "
                        "openai, anthropic, google (Gemini), deepseek, kimi, vertex_ai, vllm, "
                        "ollama, llamacpp, openai_compatible (with --base-url) or heuristic")
    run.add_argument("--model", default=None,
                     help="the --provider judge's model (default: the preset's)")
    run.add_argument("--api-key-env", default=None, metavar="NAME",
                     help="the environment variable holding the --provider judge's key "
                     "(default: the preset's, e.g. OPENAI_API_KEY); never the key itself")
    run.add_argument("--api-key", action=_RefuseKeyValue, help=argparse.SUPPRESS)
    run.add_argument("--base-url", default=None,
                     help="the --provider judge's endpoint (default: the preset's)")
    run.add_argument("--batch-size", type=_positive, default=None, metavar="N",
                     help="the --provider judge's concurrent requests (its concurrency; "
                     "default 4)")
    run.add_argument("--rate-limit", type=_seconds, default=None, metavar="SECONDS",
                     help="seconds between the --provider judge's requests, as the original "
                     "tool (requests_per_minute = 60 / SECONDS; default: no pacing)")
    run.add_argument("--preprocess-only", action="store_true",
                     help="only parse and preprocess: print the PREPROCESSING STATISTICS and "
                     "write the kept records as JSONL (--output X.jsonl: that file; a folder: "
                     "<drop>_preprocessed.jsonl per input)")
    run.add_argument("--batch-folder", action="store_true",
                     help="INPUT is a folder already split into batch files: each file is one "
                     "batch named after it (not split again), results also per batch as "
                     "<batch>_eva.jsonl")
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
    run.add_argument("--routing-mode", choices=list(TRAJECTORY_MODES), default="superset",
                     help="routing checks' trajectory match mode, as LangChain agentevals "
                     "(default superset: every expected call was made); a case's "
                     "match_mode overrides it")
    run.add_argument("--argument-mode", choices=list(ARGUMENT_MODES), default="exact",
                     help="routing checks' argument match mode, as agentevals (default "
                     "exact); a case's argument_mode overrides it")
    run.add_argument("--disagreement-threshold", type=float, default=0.5, metavar="X",
                     help="judges whose scores for a clip differ by more than X disagree "
                     "(flagged in averaged_scores, listed in judge_disagreements)")
    run.add_argument("--batches-per-run", type=_positive, default=None, metavar="N",
                     help="batches per Dagster run (default: all batches in one run, up to "
                     "about 16 MB of batch files per run; 1 gives one run per batch)")
    run.add_argument("--workers", type=_positive, default=None,
                     help="Dagster runs executed at once, each in its own process (default: "
                     "2 on two or more cores when every judge is the offline heuristic and "
                     "the batches hold 8 MB or more, else 1; an LLM judge's concurrency and "
                     "rate limits are shared between the workers)")
    talk = run.add_mutually_exclusive_group()
    talk.add_argument("--verbose", "-v", action="store_true", help="show Dagster's run logs")
    talk.add_argument("--quiet", "-q", action="store_true",
                      help="no progress lines or bars; the statistics, summary and errors "
                      "still print")
    run.add_argument("--check-judges", action="store_true",
                     help="before any batch, send each LLM judge one 1-token request: an "
                     "unreachable base_url or a refused key stops the run in one line")
    run.add_argument("--no-wait", action="store_true",
                     help="with a judge in mode: batch, submit its provider batch and exit "
                     "(default: wait, polling with a progress line); the same command "
                     "later, or the UI's batch_results_sensor, picks the results up")
    run.add_argument("--no-assessments", action="store_true",
                     help="this run makes no category or trajectory assessments (every "
                     "judge as with assessments: false)")
    run.add_argument("--dry-run", action="store_true",
                     help="print the judge calls, tokens and cost the run would make; "
                     "call nothing")
    forget = sub.add_parser(
        "forget", help="unregister batch partitions from the instance (e.g. whose batch "
        "file is gone); their Parquet stays in the store")
    forget.add_argument("batches", nargs="+", help="batch partition keys")
    compare.add_parser(sub)
    routing_suite_command.add_parser(sub)
    report = sub.add_parser(
        "report", help="rewrite report.md, report.html and plots/ from a run's --output "
        "folder (no Dagster run)")
    report.add_argument("folder", type=Path, help="an earlier run's --output folder")
    report.add_argument("--compare", type=Path, default=None,
                        help="a compare.md, or the compare verb's --output folder, to "
                        "include (default: compare.md in the folder, if there)")
    return parser


def report_command(folder: Path, compare_md: Path | None) -> int:
    """``eval-pipeline report OUT``: the document again, e.g. after ``compare``."""
    from eval_pipeline.exports.report_document import write_report

    if not (folder / "evaluation_report.parquet").is_file():
        print(f"eval-pipeline: error: no evaluation_report.parquet in {folder}",
              file=sys.stderr)
        return 1
    for name in write_report(folder, compare_md):
        print(folder / name)
    return 0


def forget_command(batches: Sequence[str]) -> int:
    ensure_dagster_home()
    unknown = forget_batches(batches)
    for key in batches:
        print(f"{'not registered' if key in unknown else 'forgot'}: {key}")
    return 1 if unknown else 0


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


def check_endpoints(judges: Sequence[JudgeConfig]) -> None:
    """``--check-judges``: the key variables first (naming an unset variable beats a 401),
    then one cheap request per LLM judge, all before the input is split."""
    from eval_pipeline.judges.check import JudgeCheckError, check_judges

    check_judge_keys(judges)
    try:
        check_judges(judges)
    except JudgeCheckError as exc:
        raise CliError(str(exc)) from None


def preprocess_only(args: argparse.Namespace, preprocess: PreprocessConfig,
                    read: ReadOptions) -> int:
    """``--preprocess-only``: the ingest assets through Dagster, the statistics block, the
    preprocessed JSONL; no judge is built or called."""
    with progress.using(progress.reporter_for(args.quiet)):
        result = run_preprocess_only(args.input, args.output, args.split_size, preprocess,
                                     read, "DEBUG" if args.verbose else "WARNING",
                                     args.store, batch_folder=args.batch_folder)
    print(preprocessing_statistics(result.figures).render())
    kept = result.figures.rows["preprocessed_trajectories"]
    print(f"\nwrote {kept} preprocessed records to "
          f"{', '.join(str(p) for p in result.written)}")
    print(f"store (batches, asset Parquet): {result.store.root}")
    return 0


def print_run_summary(figures: RunFigures, batches: int, judges: Sequence[JudgeConfig],
                      output: Path, per_batch: Sequence[Path] = ()) -> dict[str, str]:
    """Print the statistics, the summary table, the routing report (also written to
    ``routing_report.txt``) and what was written; the judges that failed, by name."""
    from tabulate import tabulate

    print(preprocessing_statistics(figures).render())
    lines = summary_lines(figures, batches, judges)
    failures = failed_judges(figures, judges)
    if failures:
        lines.insert(0, ("JUDGES FAILED", ", ".join(failures)))
    print(tabulate(lines, headers=["", "value"], tablefmt="simple"))
    print_routing_report(figures, output)
    print(f"\nwrote {output / 'evaluated.jsonl'} and "
          f"{len(figures.tables)} asset tables to {output}/")
    if per_batch:
        print(f"per batch: {len(per_batch)} files <batch>_eva.jsonl in {output}/")
    return failures


def print_pending(pending: Sequence[str], argv: Sequence[str]) -> int:
    """``--no-wait``: what is out at the provider and how to pick it up later."""
    import shlex

    print("BATCHES PENDING: judging goes on at the provider (answers within 24 hours)")
    for line in pending:
        print(f"  {line}")
    again = shlex.join(a for a in argv if a != "--no-wait")
    print("\nPick the results up later with the same command (it finds the same batches "
          "through the ledger; nothing is submitted or paid twice):\n"
          f"  eval-pipeline {again}\n"
          "or let the UI collect them (batch_results_sensor requests the runs):\n"
          f"  DAGSTER_HOME={os.environ['DAGSTER_HOME']} dg dev")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "forget":
        return forget_command(args.batches)
    if args.command == "compare":
        return compare.command(args)
    if args.command == "report":
        return report_command(args.folder, args.compare)
    if args.command == "suite":
        return routing_suite_command.command(args)
    if not args.verbose:
        hide_beta_warnings()
    try:
        judges = judges_from_args(args)
        if getattr(args, "no_assessments", False):
            try:
                judges = without_assessments(judges)
            except ValueError as exc:
                raise CliError(f"--no-assessments: {exc}") from exc
        preprocess = PreprocessConfig(beta_threshold=args.beta_threshold,
                                      frequency_filter=args.frequency_filter,
                                      duplicate_filter=args.duplicate_filter)
        read = read_options(args)
        if args.preprocess_only:
            return preprocess_only(args, preprocess, read)
        if args.check_judges:
            check_endpoints(judges)
        if args.dry_run:
            from eval_pipeline.dry_run import dry_run

            ensure_dagster_home()  # the judge cache lives under DAGSTER_HOME
            print(dry_run(collect_inputs(args.input), judges, preprocess=preprocess,
                          read=read).to_table())
            return 0
        with progress.using(progress.reporter_for(args.quiet)):
            result = run_pipeline(args.input, args.output, judges, args.split_size,
                                  preprocess, read,
                                  "DEBUG" if args.verbose else "WARNING", args.workers,
                                  args.batches_per_run, args.store,
                                  routing={"routing_mode": args.routing_mode,
                                           "routing_argument_mode": args.argument_mode,
                                           "disagreement_threshold":
                                               args.disagreement_threshold},
                                  batch_folder=args.batch_folder,
                                  wait=not args.no_wait)
        if result.pending:
            return print_pending(result.pending,
                                 sys.argv[1:] if argv is None else list(argv))
        per_batch = result.per_batch if args.batch_folder else []
    except PipelineInputError as exc:
        print(f"eval-pipeline: error: {exc}", file=sys.stderr)
        return 1
    failures = print_run_summary(result.figures, len(result.batches), judges, args.output,
                                 per_batch)
    print(f"store (batches, asset Parquet): {result.store.root}")
    if result.store.assets_url:  # $EVAL_PIPELINE_ASSETS
        print(f"asset Parquet under: {result.store.assets_url}")
    print(f"Dagster instance: {os.environ['DAGSTER_HOME']} (open it from the project folder "
          f"with: DAGSTER_HOME={os.environ['DAGSTER_HOME']} dg dev)")
    for line in failures.values():
        print(f"eval-pipeline: {line}", file=sys.stderr)
    return JUDGMENTS_FAILED if failures else 0


if __name__ == "__main__":
    sys.exit(main())
