"""The ReAct framework's two remaining figures: combined accuracy and the tool usage
breakdown, per trajectory (for ``evaluation_metadata``) and pooled (for the report).

- Combined accuracy ("both correct"): of the tool clips where thought-to-tool and
  query-to-thought were both scored, the share whose two averaged labels are both the
  positive one (a majority of the judges that answered said ``correct``; a tie is not).
  With one judge, as the framework runs, that is "this judge said correct twice".
- Tool usage: calls per tool name (every tool clip), and the share judged correct:
  the thought-to-tool score summed over that tool's scored clips, divided by their
  number, so the shares weighted by ``scored`` give back thought-to-tool accuracy.

A figure nobody scored is None, never 0.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from eval_pipeline.models import FINAL_TOOL_TYPE
from eval_pipeline.rubrics import EVAL_QUERY_TO_THOUGHT, EVAL_THOUGHT_TO_TOOL, REACT_EVALUATIONS
from eval_pipeline.scoring.averaging import json_object

COMBINED_KEY = "combined"
TOOL_USAGE_KEY = "tool_usage"


def tool_clips_by_trajectory(clips: pd.DataFrame) -> dict[str, dict[int, str]]:
    """Every tool clip's tool name (its type when the source named none), by trajectory."""
    if not len(clips) or "tool_type" not in clips.columns:
        return defaultdict(dict)  # a table without tool types cannot say which are calls
    names = clips["tool_name"].tolist() if "tool_name" in clips.columns else [None] * len(clips)
    return tool_clips(clips["trajectory_id"].tolist(), clips["clip_index"].tolist(),
                      clips["tool_type"].tolist(), names)


def tool_clips(trajectory_ids: Sequence[Any], clip_indexes: Sequence[Any],
               tool_types: Sequence[Any], tool_names: Sequence[Any]
               ) -> dict[str, dict[int, str]]:
    """:func:`tool_clips_by_trajectory` from the clips' columns as lists."""
    out: dict[str, dict[int, str]] = defaultdict(dict)
    for tid, ci, tool_type, name in zip(trajectory_ids, clip_indexes, tool_types, tool_names,
                                        strict=True):
        if tool_type != FINAL_TOOL_TYPE:
            out[str(tid)][int(ci)] = name if isinstance(name, str) and name else str(tool_type)
    return out


def react_breakdown(react_rows: Sequence[Mapping[str, Any]], tools: Mapping[int, str]
                    ) -> dict[str, Any]:
    """One trajectory's combined figure and tool usage from its averaged ReAct rows."""
    ok: dict[str, dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for row in react_rows:
        if row["status"] == "ok" and int(row["clip_index"]) >= 0:
            ok[str(row["evaluation_kind"])][int(row["clip_index"])] = row
    t2t, q2t = ok.get(EVAL_THOUGHT_TO_TOOL, {}), ok.get(EVAL_QUERY_TO_THOUGHT, {})
    both = sorted(set(t2t) & set(q2t))
    correct = sum(1 for ci in both
                  if t2t[ci].get("label") == REACT_EVALUATIONS[EVAL_THOUGHT_TO_TOOL].positive
                  and q2t[ci].get("label") == REACT_EVALUATIONS[EVAL_QUERY_TO_THOUGHT].positive)
    usage: dict[str, dict[str, float | int]] = {}
    for ci, tool in sorted(tools.items()):
        entry = usage.setdefault(tool, {"calls": 0, "scored": 0, "correct": 0.0})
        entry["calls"] += 1
        if ci in t2t:
            entry["scored"] += 1
            entry["correct"] += float(json_object(t2t[ci]["scores"])[EVAL_THOUGHT_TO_TOOL])
    return {
        COMBINED_KEY: {"correct": correct, "scored": len(both),
                       "accuracy": correct / len(both) if both else None},
        TOOL_USAGE_KEY: usage,
    }


def pooled_breakdown(metadata_texts: Iterable[str | Mapping[str, Any]]) -> dict[str, Any]:
    """Combined accuracy and tool usage over many trajectories (their ``evaluation_metadata``
    JSON, or that JSON decoded), for a report row: ``combined_accuracy`` and ``tool_usage``
    (JSON, tools by calls, most used first)."""
    correct = scored = 0
    usage: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0, "scored": 0,
                                                               "correct": 0.0})
    for text in metadata_texts:
        meta = json.loads(text) if isinstance(text, str) else text
        react = meta.get("react_evaluations") or {}
        combined = react.get(COMBINED_KEY) or {}
        correct += int(combined.get("correct") or 0)
        scored += int(combined.get("scored") or 0)
        for tool, entry in (react.get(TOOL_USAGE_KEY) or {}).items():
            for key in ("calls", "scored", "correct"):
                usage[tool][key] += entry.get(key) or 0
    ranked = sorted(usage.items(), key=lambda kv: (-kv[1]["calls"], kv[0]))
    return {
        "combined_accuracy": correct / scored if scored else None,
        "tool_usage": json.dumps({
            tool: {"calls": int(e["calls"]), "scored": int(e["scored"]),
                   "share_correct": e["correct"] / e["scored"] if e["scored"] else None}
            for tool, e in ranked}),
    }
