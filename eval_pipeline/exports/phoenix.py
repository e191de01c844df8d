"""Evaluations in the shape Arize Phoenix's ``log_evaluations`` takes, one file per eval name.

Phoenix attaches an evaluation to a span (``SpanEvaluations``: a DataFrame indexed by
``context.span_id``) or to a trace (``TraceEvaluations``: indexed by ``context.trace_id``),
with ``label``, ``score`` and ``explanation`` columns. Only trajectories whose source
carried those ids (OpenInference / Phoenix span exports) can go back; for the others the
manifest counts the evaluations left out, so an empty file is explained, not mysterious.

The figures are the averages over the judges (``averaged_scores``), one per clip and
evaluation kind, as the ReAct framework logs one evaluation per span. A kind no judge
could score is there with the label ``not scored``, no score and the errors as its
explanation: Phoenix shows the failure, it never shows a made-up number.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel

from eval_pipeline.exports.common import records, trajectory_info
from eval_pipeline.rubrics import (
    EVAL_KIND_CLIP,
    EVAL_QUERY_TO_THOUGHT,
    EVAL_SEQUENCE_OPTIMALITY,
    EVAL_THOUGHT_TO_TOOL,
    REACT_EVALUATIONS,
)

PHOENIX_DIR = "phoenix_evaluations"
SPAN_INDEX = "context.span_id"
TRACE_INDEX = "context.trace_id"
EVAL_COLUMNS = ["label", "score", "explanation"]
NOT_SCORED = "not scored"
TRAJECTORY_SCORE = "trajectory_score"


class PhoenixEval(BaseModel):
    """One eval name's file, as the manifest lists it."""

    eval_name: str
    file_stem: str
    target: Literal["span", "trace"]
    index: str
    rows: int
    left_out_no_id: int
    left_out_same_span: int


# The framework's eval names for the ReAct kinds; the rubric and the trajectory score are
# this project's own.
EVAL_NAMES: dict[str, str] = {
    EVAL_KIND_CLIP: "Clip Rubric (mean over metrics)",
    EVAL_THOUGHT_TO_TOOL: "Tool Calling Eval (Thought-to-Tool)",
    EVAL_QUERY_TO_THOUGHT: "Query Interpretation Eval (Query-to-Thought)",
    EVAL_SEQUENCE_OPTIMALITY: "Sequence Optimality Eval",
    TRAJECTORY_SCORE: "Trajectory Score (overall_trajectory_score)",
}


def _not_scored(errors: object) -> dict[str, object]:
    listed = json.loads(errors) if isinstance(errors, str) and errors else []
    return {"label": NOT_SCORED, "score": None,
            "explanation": "no judge could score this: " + "; ".join(map(str, listed))}


def phoenix_evaluations(averaged: pd.DataFrame, summaries: pd.DataFrame,
                        trajectories: pd.DataFrame,
                        span_ids: Mapping[tuple[str, int], str]
                        ) -> dict[str, tuple[PhoenixEval, pd.DataFrame]]:
    """File stem -> (its manifest entry, its DataFrame indexed as Phoenix wants)."""
    info = trajectory_info(trajectories)
    rows: dict[str, list[tuple[str | None, dict[str, object]]]] = {k: [] for k in EVAL_NAMES}
    for row in records(averaged):
        kind = str(row["evaluation_kind"])
        if kind not in rows:
            continue
        tid, ci = str(row["trajectory_id"]), int(row["clip_index"])
        if kind == EVAL_SEQUENCE_OPTIMALITY:
            key = info[tid].trace_id if tid in info else None
        else:
            key = span_ids.get((tid, ci))
        if row["status"] != "ok":
            values = _not_scored(row.get("errors"))
        elif kind == EVAL_KIND_CLIP:
            values = {"label": None, "score": row["mean_score"],
                      "explanation": row.get("summary") or None}
        else:
            values = {"label": row.get("label"),
                      "score": json.loads(row["scores"]).get(REACT_EVALUATIONS[kind].metric),
                      "explanation": row.get("reasoning") or None}
        rows[kind].append((key, values))
    for summary in records(summaries, ["trajectory_id", "overall_trajectory_score",
                                       "successful_evaluations", "total_clips"]):
        tid = str(summary["trajectory_id"])
        score = summary["overall_trajectory_score"]
        values = ({"label": None, "score": float(score),
                   "explanation": f"clip-weighted mean of the tool averages over "
                                  f"{summary['successful_evaluations']} of "
                                  f"{summary['total_clips']} clips scored"}
                  if score is not None else
                  {"label": NOT_SCORED, "score": None,
                   "explanation": "no clip of this trajectory was scored by any judge"})
        rows[TRAJECTORY_SCORE].append((info[tid].trace_id if tid in info else None, values))
    out: dict[str, tuple[PhoenixEval, pd.DataFrame]] = {}
    for kind, found in rows.items():
        trace = kind in (EVAL_SEQUENCE_OPTIMALITY, TRAJECTORY_SCORE)
        index = TRACE_INDEX if trace else SPAN_INDEX
        kept: dict[str, dict[str, object]] = {}
        no_id = same = 0
        for key, values in found:
            if key is None:
                no_id += 1
            elif key in kept:
                same += 1  # Phoenix keeps one evaluation per span and name: the first here
            else:
                kept[key] = values
        frame = pd.DataFrame(list(kept.values()), columns=EVAL_COLUMNS,
                             index=pd.Index(list(kept), name=index, dtype=object))
        frame["score"] = frame["score"].astype("float64")
        entry = PhoenixEval(eval_name=EVAL_NAMES[kind], file_stem=kind,
                            target="trace" if trace else "span", index=index,
                            rows=len(frame), left_out_no_id=no_id, left_out_same_span=same)
        out[kind] = (entry, frame)
    return out


def write_phoenix(folder: Path, evals: Mapping[str, tuple[PhoenixEval, pd.DataFrame]]
                  ) -> list[str]:
    """``<kind>.parquet`` and ``<kind>.csv`` per eval name and ``manifest.json`` into
    ``folder`` (which the caller swaps in whole); the names written."""
    written = []
    for stem, (_, frame) in evals.items():
        frame.to_parquet(folder / f"{stem}.parquet", index=True)
        frame.to_csv(folder / f"{stem}.csv", index=True, quoting=csv.QUOTE_MINIMAL,
                     lineterminator="\n")
        written += [f"{stem}.parquet", f"{stem}.csv"]
    manifest = [entry.model_dump() for entry, _ in evals.values()]
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    return [*written, "manifest.json"]
