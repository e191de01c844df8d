"""The CLI's exports and printed summary as the code before #12.3 (flat memory) made them,
kept as the reference the streamed exports must reproduce.

That code read every batch of every asset of the run back from the store, concatenated them
into whole-run DataFrames (``store_tables``), and wrote each export from those: peak memory
grew with the drop. These are verbatim copies of ``store_tables``, ``export_tables``,
``write_evaluated``, ``write_batch_evaluated`` (local_run.py), ``write_exports``
(exports/__init__.py) and the summary ``main`` printed (cli.py) at that commit; the
per-table export functions they call (``judge_detail_files``, ``clip_score_rows``,
``phoenix_evaluations``, ``span_annotations``, ``write_report_document``) are the package's
own whole-table functions. Test code only: it holds a whole run in memory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import BinaryIO

import pandas as pd
from tabulate import tabulate
from upath import UPath

from eval_pipeline.atomic import replace_folder, write_atomic
from eval_pipeline.exports import evaluated_record
from eval_pipeline.exports.clip_scores import CLIP_SCORES_FILE, clip_score_rows, clip_scores_csv
from eval_pipeline.exports.common import clip_span_ids, trajectory_info
from eval_pipeline.exports.judge_details import (
    JUDGE_DETAILS_DIR,
    judge_detail_files,
    judgment_tables,
    write_judge_details,
)
from eval_pipeline.exports.phoenix import (
    PHOENIX_DIR,
    phoenix_evaluations,
    span_annotations,
    write_phoenix,
)
from eval_pipeline.exports.react_metrics import REACT_METRICS_FILE, react_metrics_text
from eval_pipeline.exports.report_document import write_report_document
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.preprocess import PreprocessStats
from eval_pipeline.report import build_report
from eval_pipeline.routing import render_report, results_from_table

EVALUATED_FIELDS = ["timestamp", "task_id", "task_description", "duration", "success",
                    "final_result", "raw_response"]


def _read_parquet(path: UPath) -> pd.DataFrame:
    with path.open("rb") as fh:
        return pd.read_parquet(fh)


def store_tables(assets_dir: str, partitions: Sequence[str],
                 assets: Sequence[Sequence[str]]) -> dict[str, pd.DataFrame]:
    base = UPath(assets_dir)
    tables: dict[str, pd.DataFrame] = {}
    for path in assets:
        files = [base.joinpath(*path, f"{key}.parquet") for key in partitions]
        frames = [_read_parquet(f) for f in files if f.exists()]
        if frames:
            nonempty = [f for f in frames if len(f)]
            tables["__".join(path)] = (pd.concat(nonempty, ignore_index=True) if nonempty
                                       else frames[0])
    return tables


def export_tables(assets_dir: str, output: Path, partitions: Sequence[str],
                  assets: Sequence[Sequence[str]]) -> dict[str, pd.DataFrame]:
    tables = store_tables(assets_dir, partitions, assets)
    summaries = tables.get("trajectory_summaries")
    if summaries is not None:
        tables["evaluation_report"] = build_report(
            {str(batch): frame for batch, frame in summaries.groupby("batch", sort=True)})
    for name, table in tables.items():
        write_atomic(output / f"{name}.parquet", partial(table.to_parquet, index=False))
    return tables


def write_evaluated(summaries: pd.DataFrame, path: Path) -> int:
    ordered = summaries.sort_values(["batch", "source_line"]) if len(summaries) else summaries

    def write(fh: BinaryIO) -> None:
        for row in ordered.to_dict("records"):
            plain = {str(k): (None if isinstance(v, float) and pd.isna(v) else v)
                     for k, v in row.items()}
            record = evaluated_record(plain, EVALUATED_FIELDS)
            fh.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))

    write_atomic(path, write)
    return len(ordered)


def write_batch_evaluated(summaries: pd.DataFrame, output: Path) -> list[Path]:
    written: list[Path] = []
    if not len(summaries):
        return written
    for batch, frame in summaries.groupby("batch", sort=True):
        path = output / f"{batch}_eva.jsonl"
        write_evaluated(frame, path)
        written.append(path)
    return written


def _empty() -> pd.DataFrame:
    return pd.DataFrame()


def write_exports(tables: Mapping[str, pd.DataFrame], output: Path) -> list[str]:
    trajectories = tables.get("preprocessed_trajectories", _empty())
    clips = tables.get("clips", _empty())
    judgments = judgment_tables(tables)
    info = trajectory_info(trajectories)
    spans = clip_span_ids(clips, info, trajectories)
    written: list[str] = []

    details = judge_detail_files(judgments, clips, trajectories)
    replace_folder(output / JUDGE_DETAILS_DIR, partial(write_judge_details, files=details))
    written += [f"{JUDGE_DETAILS_DIR}/{name}" for name in sorted(details)]

    csv_bytes = clip_scores_csv(clip_score_rows(judgments, clips, trajectories, spans))

    def write_csv(fh: BinaryIO) -> None:
        fh.write(csv_bytes)

    write_atomic(output / CLIP_SCORES_FILE, write_csv)
    written.append(CLIP_SCORES_FILE)

    evals = phoenix_evaluations(tables.get("averaged_scores", _empty()),
                                tables.get("trajectory_summaries", _empty()),
                                trajectories, spans)
    annotations = span_annotations(judgments, tables.get("trajectory_summaries", _empty()),
                                   trajectories, spans)
    names: list[str] = []
    replace_folder(output / PHOENIX_DIR,
                   lambda folder: names.extend(write_phoenix(folder, evals, annotations)))
    written += [f"{PHOENIX_DIR}/{name}" for name in names]

    report = tables.get("evaluation_report")
    if report is not None:
        text = react_metrics_text(report).encode("utf-8")

        def write_text(fh: BinaryIO) -> None:
            fh.write(text)

        write_atomic(output / REACT_METRICS_FILE, write_text)
        written.append(REACT_METRICS_FILE)
    written += write_report_document(tables, output)
    return written


# -- the summary cli.main printed ----------------------------------------------------------


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
        mode = f", {judge.mode} mode" if judge.provider != "heuristic" else ""
        lines.append((f"judgments [{judge.name}]",
                      f"{len(table)} ({detail}; cached {cached}; tokens {tokens[0]} in "
                      f"/ {tokens[1]} out; ${cost:.4f}{mode})"))
    routing = tables.get("routing_checks")
    if routing is not None and len(routing):
        lines.append(("routing checks", f"{int(routing['passed'].sum())}/{len(routing)} passed"))
        if "partial_credit" in routing.columns:
            lines.append(("  routing partial credit",
                          f"{float(routing['partial_credit'].mean()):.3f}"))
    lines.append(("mean overall score",
                  f"{scored.mean():.3f} over {len(scored)} trajectories" if len(scored)
                  else "n/a (nothing scored)"))
    report = tables.get("evaluation_report")
    if report is not None and len(report) and (report["batch"] == "ALL").any():
        overall = report[report["batch"] == "ALL"].iloc[0]
        for column, label in (("thought_to_tool_accuracy", "thought-to-tool accuracy"),
                              ("query_to_thought_accuracy", "query-to-thought accuracy"),
                              ("sequence_optimality_accuracy", "sequence optimality"),
                              ("trajectory_assessment_mean", "trajectory assessment")):
            value = overall.get(column)
            if value is not None and pd.notna(value):
                lines.append((label, f"{float(value):.3f}"))
    clips = tables.get("clips")
    if clips is not None and len(clips):
        for tool, n in clips["tool_type"].value_counts().items():
            lines.append((f"  clips: {tool}", int(n)))
    return lines


def routing_report_text(tables: dict[str, pd.DataFrame]) -> str:
    routing = tables["routing_checks"]
    kept = tables.get("preprocessed_trajectories")
    prompts = (dict(zip(kept["trajectory_id"], kept["task_description"], strict=True))
               if kept is not None and len(kept) else {})
    return render_report(results_from_table(routing, prompts))


def failed_judges(tables: dict[str, pd.DataFrame], judges: Sequence[JudgeConfig]
                  ) -> dict[str, str]:
    lines: dict[str, str] = {}
    for judge in judges:
        table = tables.get(f"judgments__{judge.name}", pd.DataFrame())
        if not len(table):
            continue
        ok = int((table["status"] == "ok").sum())
        errors = [e for e in table["error"] if isinstance(e, str) and e]
        breaker = next((e for e in errors if "circuit breaker open" in e), None)
        if ok and breaker is None:
            continue
        first = breaker or (errors[0] if errors else "no error recorded")
        lines[judge.name] = (f"judge {judge.name!r} failed: {ok} of {len(table)} judgments "
                             f"ok; {' '.join(first.split())[:300]}")
    return lines


def preprocessing_statistics(tables: dict[str, pd.DataFrame]) -> PreprocessStats:
    kept = tables.get("preprocessed_trajectories", pd.DataFrame())
    removed = tables.get("preprocess_report", pd.DataFrame())
    raw = tables.get("raw_trajectories")
    reasons = removed["reason"].value_counts() if len(removed) else pd.Series(dtype=int)
    fixed = (int(kept["format_corrected"].fillna(False).astype(bool).sum())
             if len(kept) and "format_corrected" in kept.columns else 0)
    return PreprocessStats(
        total=len(raw) if raw is not None else len(kept) + len(removed),
        valid=len(kept),
        removed_frequency=int(reasons.get("frequency", 0)),
        removed_duplicates=int(reasons.get("duplicates", 0)),
        format_issues_fixed=fixed,
    )


ROUTING_REPORT_MAX_CASES = 40


def reference_run(assets_dir: str, output: Path, partitions: Sequence[str],
                  assets: Sequence[Sequence[str]], judges: Sequence[JudgeConfig],
                  printed_output: Path, batch_folder: bool = False) -> str:
    """Every export into ``output`` as the previous code wrote it, and what ``main`` printed
    from the statistics to the "wrote" line (paths as ``printed_output``, the CLI's)."""
    output.mkdir(parents=True, exist_ok=True)
    tables = export_tables(assets_dir, output, partitions, sorted(assets))
    write_evaluated(tables.get("trajectory_summaries", pd.DataFrame()),
                    output / "evaluated.jsonl")
    write_exports(tables, output)
    per_batch = (write_batch_evaluated(tables.get("trajectory_summaries", pd.DataFrame()),
                                       output) if batch_folder else [])
    printed = [preprocessing_statistics(tables).render()]
    lines = summary_lines(tables, len(partitions), judges)
    failures = failed_judges(tables, judges)
    if failures:
        lines.insert(0, ("JUDGES FAILED", ", ".join(failures)))
    printed.append(tabulate(lines, headers=["", "value"], tablefmt="simple"))
    routing = tables.get("routing_checks")
    if routing is not None and len(routing):
        text = routing_report_text(tables)
        (output / "routing_report.txt").write_text(text + "\n", "utf-8")
        if len(routing) <= ROUTING_REPORT_MAX_CASES:
            printed.append(f"\n{text}")
        else:
            printed.append(f"\nrouting report ({len(routing)} cases): "
                           f"{printed_output / 'routing_report.txt'}")
    printed.append(f"\nwrote {printed_output / 'evaluated.jsonl'} and "
                   f"{len(tables)} asset tables to {printed_output}/")
    if per_batch:
        printed.append(f"per batch: {len(per_batch)} files <batch>_eva.jsonl in "
                       f"{printed_output}/")
    return "\n".join(printed) + "\n"
