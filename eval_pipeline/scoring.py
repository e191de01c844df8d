"""Averaging over judges and per-trajectory summaries, as the original tool computes them.

A failed judgment never contributes: a metric's mean is over the judges that succeeded,
and a clip no judge could score has no scores at all (never zeros). A trajectory with no
scored clip has no overall score.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from statistics import fmean
from typing import Any

import pandas as pd

AVERAGED_COLUMNS = [
    "trajectory_id", "clip_index", "evaluation_kind", "tool_type", "status", "scores",
    "mean_score", "n_judges", "n_judges_succeeded", "judges", "spread", "summary", "reasoning",
    "errors",
]


def _loads(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    return json.loads(value)


def average_judgments(judgments: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (trajectory, clip, evaluation kind) with the judges' mean per metric."""
    frames = [df.assign(judge=name) for name, df in judgments.items() if len(df)]
    if not frames:
        return pd.DataFrame(columns=AVERAGED_COLUMNS)
    all_rows = pd.concat(frames, ignore_index=True)
    out: list[dict[str, Any]] = []
    keys = ["trajectory_id", "clip_index", "evaluation_kind"]
    for (tid, clip_index, kind), group in all_rows.groupby(keys, sort=False):
        ok = group[group["status"] == "ok"]
        per_metric: dict[str, list[float]] = defaultdict(list)
        for scores in ok["scores"]:
            for metric, value in _loads(scores).items():
                per_metric[metric].append(float(value))
        means = {m: fmean(v) for m, v in per_metric.items()}
        spread = max((max(v) - min(v) for v in per_metric.values()), default=0.0)
        summaries = [s for s in ok["summary"] if s]
        reasonings = [r for r in ok["reasoning"] if r]
        combined = len(ok) > 1
        errors = [f"{j}: {e}" for j, e in zip(group["judge"], group["error"], strict=True)
                  if isinstance(e, str) and e]
        out.append({
            "trajectory_id": tid,
            "clip_index": int(clip_index),
            "evaluation_kind": kind,
            "tool_type": group["tool_type"].iloc[0],
            "status": "ok" if len(ok) else "failed",
            "scores": json.dumps(means),
            "mean_score": fmean(means.values()) if means else None,
            "n_judges": len(group),
            "n_judges_succeeded": len(ok),
            "judges": json.dumps(sorted(group["judge"].unique().tolist())),
            "spread": spread if means else None,
            "summary": ("Combined evaluation: " + " | ".join(summaries)) if combined
            else (summaries[0] if summaries else ""),
            "reasoning": ("Combined evaluation: " + " | ".join(reasonings)) if combined
            else (reasonings[0] if reasonings else ""),
            "errors": json.dumps(errors, ensure_ascii=False),
        })
    return pd.DataFrame(out, columns=AVERAGED_COLUMNS)


def evaluation_metadata(clip_rows: Sequence[Mapping[str, Any]], model_names: Sequence[str]
                        ) -> dict[str, Any]:
    """The original tool's ``evaluation_metadata`` from one trajectory's averaged clips."""
    by_tool: dict[str, list[dict[str, float]]] = defaultdict(list)
    for row in clip_rows:
        if row["status"] == "ok":
            by_tool[row["tool_type"]].append(_loads(row["scores"]))
    tool_averages: dict[str, Any] = {}
    for tool_type, score_list in by_tool.items():
        metrics: dict[str, list[float]] = defaultdict(list)
        for scores in score_list:
            for metric, value in scores.items():
                metrics[metric].append(value)
        average_scores = {m: fmean(v) for m, v in metrics.items()}
        tool_averages[tool_type] = {
            "average_scores": average_scores,
            "clip_count": len(score_list),
            "overall_average": fmean(average_scores.values()) if average_scores else None,
        }
    weighted = [(t["overall_average"], t["clip_count"]) for t in tool_averages.values()
                if t["overall_average"] is not None]
    total_weight = sum(w for _, w in weighted)
    successful = sum(1 for row in clip_rows if row["status"] == "ok")
    total = len(clip_rows)
    return {
        "total_clips": total,
        "num_models": len(model_names),
        "model_names": list(model_names),
        "successful_evaluations": successful,
        "success_rate": successful / total if total else 0.0,
        "overall_trajectory_score": (sum(a * w for a, w in weighted) / total_weight
                                     if total_weight else None),
        "tool_averages": tool_averages,
    }


def clip_evaluation_block(row: Mapping[str, Any]) -> str:
    """The ``<clip_evaluation>`` block embedded after a clip (multi-model layout)."""
    if row["status"] != "ok":
        return (
            "\n<clip_evaluation>\n<error>No judge could score this clip: "
            + "; ".join(json.loads(row["errors"] or "[]")) + "</error>\n</clip_evaluation>\n"
        )
    scores = json.dumps(_loads(row["scores"]), indent=2)
    n = int(row["n_judges_succeeded"])
    return (
        f"\n<clip_evaluation>\n<scores>\n{scores}\n</scores>\n"
        f"<summary>{row['summary']}</summary>\n<reasoning>{row['reasoning']}</reasoning>\n"
        f"<model_info>Averaged from {n} model{'s' if n != 1 else ''}</model_info>\n"
        "</clip_evaluation>\n"
    )


def embed_evaluations(raw_response: str, clip_ends: Iterable[tuple[int, str]]) -> str:
    """Insert each block at its clip's end offset, back to front so offsets stay valid."""
    text = raw_response
    for end, block in sorted(clip_ends, key=lambda pair: pair[0], reverse=True):
        text = text[:end] + block + text[end:]
    return text


SUMMARY_COLUMNS = [
    "trajectory_id", "batch", "task_id", "source_format", "source_file", "source_line",
    "task_description", "timestamp", "duration", "success", "final_result", "raw_response",
    "total_clips", "successful_evaluations", "success_rate", "overall_trajectory_score",
    "evaluation_metadata", "full_response_with_evaluations",
]


def summarize_trajectories(trajectories: pd.DataFrame, clips: pd.DataFrame,
                           averaged: pd.DataFrame, model_names: Sequence[str]) -> pd.DataFrame:
    clip_kind = (averaged[averaged["evaluation_kind"] == "clip_rubric"] if len(averaged)
                 else averaged)
    by_traj = {tid: g.sort_values("clip_index") for tid, g in clip_kind.groupby("trajectory_id")}
    ends = {
        (tid, int(ci)): int(end)
        for tid, ci, end in zip(clips["trajectory_id"], clips["clip_index"], clips["end"],
                                strict=True)
    } if len(clips) else {}
    rows = []
    for traj in trajectories.to_dict("records"):
        tid = traj["trajectory_id"]
        group = by_traj.get(tid)
        clip_rows = group.to_dict("records") if group is not None else []
        meta = evaluation_metadata(clip_rows, model_names)
        blocks = [(ends[(tid, int(r["clip_index"]))], clip_evaluation_block(r))
                  for r in clip_rows if (tid, int(r["clip_index"])) in ends]
        rows.append({
            **{c: traj.get(c) for c in SUMMARY_COLUMNS if c in traj},
            "total_clips": meta["total_clips"],
            "successful_evaluations": meta["successful_evaluations"],
            "success_rate": meta["success_rate"],
            "overall_trajectory_score": meta["overall_trajectory_score"],
            "evaluation_metadata": json.dumps(meta, ensure_ascii=False),
            "full_response_with_evaluations": embed_evaluations(traj["raw_response"], blocks),
        })
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
