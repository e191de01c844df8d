"""``eval-pipeline suite SUITE [...] --judges FILE --model NAME``: run routing eval suites.

The model under test is an entry of a judges file (``--model`` names it; a file with one
LLM entry needs no name), or the one-judge shortcut ``--provider P [--model M]
[--base-url URL] [--api-key-env VAR]`` as ``run`` takes it. The suites run through
Dagster (the ``routing_suite_results`` asset, in-process, recorded in the instance under
DAGSTER_HOME), and the report is printed as the routing evals document prints it.

Exit codes: 0 every case passed; 1 an error, in one line (an unreadable or invalid suite
or judges file, no model under test, a missing key variable, a failed run); 2 bad
arguments; 3 no case FAILED but at least one has no verdict because its model call failed
(an HTTP error after the retries, a refusal, an answer cut off); 4 at least one case FAILED
(the model called the wrong tools), whatever else happened.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from eval_pipeline.routing import ARGUMENT_MODES, TRAJECTORY_MODES

EXIT_ERRORS = 3
EXIT_FAILED = 4


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "suite", help="run routing eval suites (prompt + tools -> expected tool calls) "
        "through a model under test and print PASS/FAIL per case")
    parser.add_argument("suites", nargs="+", type=Path, metavar="SUITE",
                        help="suite files (YAML or JSON: tools, cases, canned results), or "
                        "folders of them, e.g. data/suites/routing_evals.yaml")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--judges", type=Path, default=None,
                       help="a judges file holding the model under test (configured as a "
                       "judge is: provider, model, base_url, api_key_env, ...)")
    model.add_argument("--provider", default=None,
                       help="the model under test without a judges file: openai, anthropic, "
                       "deepseek, kimi, google, vllm, ollama, llamacpp, openai_compatible")
    parser.add_argument("--model", default=None,
                        help="with --judges: the entry's name (needed when the file has "
                        "several LLM entries); with --provider: the model (default: the "
                        "preset's)")
    parser.add_argument("--base-url", default=None, help="with --provider: its endpoint")
    parser.add_argument("--api-key-env", default=None, metavar="NAME",
                        help="with --provider: the variable holding its key (never the key)")
    parser.add_argument("--routing-mode", choices=list(TRAJECTORY_MODES), default="superset",
                        help="trajectory match mode (default superset: every expected call "
                        "was made); a suite's or case's match_mode wins")
    parser.add_argument("--argument-mode", choices=list(ARGUMENT_MODES), default="exact",
                        help="argument match mode (default exact); a suite's or case's "
                        "argument_mode wins")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="also write routing_suite_results.parquet, routing_suite_report"
                        ".txt and suite_trajectories.jsonl (the recorded conversations as "
                        "chat records with their expected tools, for `eval-pipeline run`)")
    parser.add_argument("--store", type=Path, default=None,
                        help="the instance's store (default as for run)")
    parser.add_argument("--verbose", "-v", action="store_true", help="show Dagster's run logs")


def _model(args: argparse.Namespace):  # -> JudgeConfig
    from eval_pipeline.cli import CliError, shortcut_entry
    from eval_pipeline.judges.config import load_judges, parse_judges
    from eval_pipeline.routing_suite.protocol import NoModelUnderTest, pick_entry

    if args.provider is not None:
        entry = shortcut_entry(args.provider, args.model, args.api_key_env, args.base_url)
        try:
            config = parse_judges({"judges": [entry]})[0]
        except ValueError as exc:
            raise CliError(f"invalid --provider model: {exc}") from None
    else:
        if args.base_url is not None or args.api_key_env is not None:
            raise CliError("--base-url and --api-key-env configure a --provider model; with "
                           "--judges set them in the judges file")
        if args.judges is None:
            raise CliError("a routing suite needs a model under test: --judges FILE "
                           "[--model NAME] (an entry with tool calling), or --provider P "
                           "[--model M]")
        if not args.judges.is_file():
            raise CliError(f"judges file not found: {args.judges}")
        try:
            config = pick_entry(load_judges(args.judges), args.model)
        except (NoModelUnderTest, ValueError, OSError) as exc:
            raise CliError(f"{args.judges}: {exc}") from None
    if config.provider == "heuristic":
        raise CliError(f"entry {config.name!r} is the heuristic judge, which calls no tools; "
                       "a routing suite needs an LLM with tool calling")
    return config


def _write_outputs(table: pd.DataFrame, report: str, output: Path) -> list[Path]:
    output.mkdir(parents=True, exist_ok=True)
    written = [output / "routing_suite_results.parquet", output / "routing_suite_report.txt",
               output / "suite_trajectories.jsonl"]
    table.to_parquet(written[0], index=False)
    written[1].write_text(report + "\n", "utf-8")
    with written[2].open("w", encoding="utf-8") as f:
        for row in table.to_dict("records"):
            record = {"id": row["case"], "suite": row["suite"],
                      "model": row["model"], "status": row["status"],
                      "expected_tools": json.loads(row["expected_tools"]),
                      "messages": json.loads(row["messages"])}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return written


def command(args: argparse.Namespace) -> int:
    from eval_pipeline.local_run import (
        PipelineInputError,
        hide_beta_warnings,
        run_routing_suites,
    )
    from eval_pipeline.routing_suite.report import mode_summary, render_reports
    from eval_pipeline.routing_suite.run import runs_from_table
    from eval_pipeline.routing_suite.spec import SuiteFileError, load_suite

    if not args.verbose:
        hide_beta_warnings()
    try:
        config = _model(args)
        files = suite_files(args.suites)
        for path in files:  # every file checked before the first call
            load_suite(path)
        table = run_routing_suites(files, config, args.routing_mode, args.argument_mode,
                                   args.store, "DEBUG" if args.verbose else "WARNING")
    except (PipelineInputError, SuiteFileError) as exc:
        print(f"eval-pipeline: error: {exc}", file=sys.stderr)
        return 1
    runs = runs_from_table(table)
    report = render_reports(runs)
    print(report)
    for run in runs:
        print(f"{run.suite}: {mode_summary(run)}")
    if args.output is not None:
        written = _write_outputs(table, report, args.output)
        print(f"\nwrote {', '.join(str(p) for p in written)}")
    failed = int((table["status"] == "fail").sum())
    errors = int((table["status"] == "error").sum())
    if failed:
        print(f"eval-pipeline: {failed} of {len(table)} cases failed", file=sys.stderr)
        return EXIT_FAILED
    if errors:
        print(f"eval-pipeline: {errors} of {len(table)} cases have no verdict (the model "
              "call failed); see Error: in the report", file=sys.stderr)
        return EXIT_ERRORS
    return 0


def suite_files(paths: list[Path]) -> list[Path]:
    """Files as given; a folder stands for its *.yaml, *.yml and *.json files."""
    from eval_pipeline.routing_suite.spec import SUITE_SUFFIXES, SuiteFileError

    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix.lower() in SUITE_SUFFIXES)
            if not found:
                raise SuiteFileError(f"no suite files (*.yaml, *.yml, *.json) in {path}")
            files += found
        elif not path.is_file():
            raise SuiteFileError(f"suite file not found: {path}")
        else:
            files.append(path)
    return files
