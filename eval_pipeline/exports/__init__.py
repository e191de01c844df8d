"""The run's exports beside the asset tables: one module per output.

- :mod:`~eval_pipeline.exports.evaluated`: ``evaluated.jsonl`` records with the original
  tool's multi-model keys too;
- :mod:`~eval_pipeline.exports.judge_details`:
  ``judge_details/{provider}_{model}_{task_id}_eva.json``;
- :mod:`~eval_pipeline.exports.clip_scores`: ``clip_scores.csv``, one row per clip, judge, metric;
- :mod:`~eval_pipeline.exports.phoenix`: ``phoenix_evaluations/``, Phoenix span
  annotations (the rows the Phoenix write-back sends);
- :mod:`~eval_pipeline.exports.react_metrics`: ``react_metrics.txt``, the ReAct figures as
  the framework prints them;
- :mod:`~eval_pipeline.exports.report_document`: ``report.md``, ``report.html`` and
  ``plots/*.png``, the report a person reads.

Each module turns tables into content without touching Dagster or the disk layout;
:func:`write_exports` writes them all, each file or folder swapped in whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from eval_pipeline.atomic import replace_folder, write_atomic
from eval_pipeline.exports.clip_scores import CLIP_SCORES_FILE, clip_score_rows, clip_scores_csv
from eval_pipeline.exports.common import clip_span_ids, trajectory_info
from eval_pipeline.exports.evaluated import dataeva_metadata, evaluated_record
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

__all__ = ["CLIP_SCORES_FILE", "JUDGE_DETAILS_DIR", "PHOENIX_DIR", "REACT_METRICS_FILE",
           "dataeva_metadata", "evaluated_record", "write_exports"]


def _empty() -> pd.DataFrame:
    return pd.DataFrame()


def write_exports(tables: Mapping[str, pd.DataFrame], output: Path) -> list[str]:
    """Write every export of this run's tables (as ``export_tables`` returns them) into
    ``output``; the names written, relative to it."""
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
