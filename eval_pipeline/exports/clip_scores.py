"""``clip_scores.csv``: one row per clip, judge and metric, as the ReAct framework saves its
classifications for analysis in a spreadsheet or pandas (``label``, ``score``,
``explanation`` beside the inputs' keys).

Every judgment of every kind is there: the clip rubric (one row per metric), the ReAct
kinds (one row, the metric named after the kind, with the judge's label) and sequence
optimality (``clip_index`` -1). A judgment that failed or was skipped is one row with
its status and error and an empty score, never a number.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping

import pandas as pd

from eval_pipeline.exports.common import records, trajectory_info
from eval_pipeline.rubrics import REACT_EVALUATIONS

CLIP_SCORES_FILE = "clip_scores.csv"
CLIP_SCORE_COLUMNS = [
    "batch", "task_id", "trajectory_id", "trace_id", "span_id", "clip_index", "tool_type",
    "tool_name", "evaluation_kind", "judge", "provider", "model", "metric", "score", "label",
    "status", "error", "explanation",
]


def clip_score_rows(judgments: Mapping[str, pd.DataFrame], clips: pd.DataFrame,
                    trajectories: pd.DataFrame,
                    span_ids: Mapping[tuple[str, int], str]) -> pd.DataFrame:
    """The long table, judges in the given order, rows in each judge's table order."""
    info = trajectory_info(trajectories)
    tool_names = {(str(c["trajectory_id"]), int(c["clip_index"])): c.get("tool_name")
                  for c in records(clips, ["trajectory_id", "clip_index", "tool_name"])}
    out: list[dict[str, object]] = []
    for judge, table in judgments.items():
        for row in records(table):
            tid, ci = str(row["trajectory_id"]), int(row["clip_index"])
            traj = info.get(tid)
            base = {
                "batch": traj.batch if traj else None,
                "task_id": traj.task_id if traj else None,
                "trajectory_id": tid, "trace_id": traj.trace_id if traj else None,
                "span_id": span_ids.get((tid, ci)), "clip_index": ci,
                "tool_type": row["tool_type"], "tool_name": tool_names.get((tid, ci)),
                "evaluation_kind": row["evaluation_kind"], "judge": row.get("judge") or judge,
                "provider": row["provider"], "model": row["model"],
                # Only the ReAct kinds have a verdict; a rubric row's label is no label.
                "label": row.get("label") if row["status"] == "ok"
                and row["evaluation_kind"] in REACT_EVALUATIONS else None,
                "status": row["status"], "error": row.get("error"),
                "explanation": row.get("reasoning") or row.get("summary") or None,
            }
            scores = json.loads(row["scores"]) if row["status"] == "ok" and row["scores"] else {}
            if not scores:
                out.append({**base, "metric": None, "score": None})
            for metric, score in scores.items():
                out.append({**base, "metric": metric, "score": float(score)})
    return pd.DataFrame(out, columns=CLIP_SCORE_COLUMNS)


def clip_scores_csv(table: pd.DataFrame, header: bool = True) -> bytes:
    """UTF-8 CSV, every text field quoted where needed (explanations hold commas and
    newlines); an empty cell is a missing value, never 0. ``header=False``: the rows only,
    for a part of the file written batch by batch (each cell is formatted on its own, so
    the parts joined are the whole table's CSV)."""
    buffer = io.StringIO()
    table.to_csv(buffer, index=False, header=header, quoting=csv.QUOTE_MINIMAL,
                 lineterminator="\n")
    return buffer.getvalue().encode("utf-8")
