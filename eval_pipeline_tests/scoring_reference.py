"""Averaging over judges and per-trajectory summaries, as the original tool computes them.

A failed judgment never contributes: a metric's mean is over the judges that succeeded,
and a clip no judge could score has no scores at all (never zeros). A trajectory with no
scored clip has no overall score.

The ReAct evaluations (thought_to_tool, query_to_thought, sequence_optimality) average the
same way: their single metric is 1.0 or 0.0 per judge, so the mean over the judges that
succeeded is the judges' agreement with the positive label, and the row also carries the
majority label. They never enter the original tool's ``evaluation_metadata`` figures or
``overall_trajectory_score``; they get their own columns and a ``react_evaluations`` block.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from statistics import fmean
from typing import Any

import pandas as pd

from eval_pipeline.rubrics import (
    EVAL_KIND_CLIP,
    EVAL_QUERY_TO_THOUGHT,
    EVAL_SEQUENCE_OPTIMALITY,
    EVAL_THOUGHT_TO_TOOL,
    REACT_EVALUATIONS,
)

AVERAGED_COLUMNS = [
    "trajectory_id", "clip_index", "evaluation_kind", "tool_type", "status", "scores",
    "mean_score", "n_judges", "n_judges_succeeded", "judges", "spread", "summary", "reasoning",
    "errors", "label", "label_counts",
]


def _loads(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    return json.loads(value)


def majority_label(labels: Iterable[Any]) -> tuple[str | None, dict[str, int]]:
    """The most common label and the counts; no label on a tie (the judges disagree evenly)."""
    counts: dict[str, int] = defaultdict(int)
    for label in labels:
        if isinstance(label, str) and label:
            counts[label] += 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None, dict(ranked)
    return ranked[0][0], dict(ranked)


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
        # Only the ReAct kinds have labels; a rubric row's label (the heuristic writes
        # "heuristic" there) is not a verdict to take a majority of.
        label, label_counts = (majority_label(ok["label"])
                               if kind in REACT_EVALUATIONS and "label" in ok else (None, {}))
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
            "label": label,
            "label_counts": json.dumps(label_counts, ensure_ascii=False),
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


def react_label_text(row: Mapping[str, Any]) -> str:
    """How one averaged ReAct row reads in the embedded text: the label and the agreement."""
    if row["status"] != "ok":
        return "not scored"
    counts = _loads(row.get("label_counts"))
    n = int(row["n_judges_succeeded"])
    label = row.get("label")
    if not isinstance(label, str) or not label:
        return "split (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")"
    return label if n == 1 else f"{label} ({counts.get(label, 0)} of {n} judges)"


def react_checks_line(react_rows: Sequence[Mapping[str, Any]]) -> str:
    """``<react_checks>thought_to_tool: correct; query_to_thought: correct</react_checks>``."""
    order = {k: i for i, k in enumerate(REACT_EVALUATIONS)}
    parts = [f"{r['evaluation_kind']}: {react_label_text(r)}"
             for r in sorted(react_rows, key=lambda r: order.get(r["evaluation_kind"], 99))]
    return f"<react_checks>{'; '.join(parts)}</react_checks>\n" if parts else ""


def clip_evaluation_block(row: Mapping[str, Any] | None,
                          react_rows: Sequence[Mapping[str, Any]] = ()) -> str:
    """The ``<clip_evaluation>`` block embedded after a clip (multi-model layout).

    The clip's ReAct labels, if any, go in a ``<react_checks>`` line inside the block.
    """
    react = react_checks_line(react_rows)
    if row is None:
        return f"\n<clip_evaluation>\n{react}</clip_evaluation>\n"
    if row["status"] != "ok":
        return (
            "\n<clip_evaluation>\n<error>No judge could score this clip: "
            + "; ".join(json.loads(row["errors"] or "[]")) + "</error>\n"
            + react + "</clip_evaluation>\n"
        )
    scores = json.dumps(_loads(row["scores"]), indent=2)
    n = int(row["n_judges_succeeded"])
    return (
        f"\n<clip_evaluation>\n<scores>\n{scores}\n</scores>\n"
        f"<summary>{row['summary']}</summary>\n<reasoning>{row['reasoning']}</reasoning>\n"
        f"<model_info>Averaged from {n} model{'s' if n != 1 else ''}</model_info>\n"
        f"{react}</clip_evaluation>\n"
    )


def trajectory_evaluation_block(row: Mapping[str, Any]) -> str:
    """The ``<trajectory_evaluation>`` block appended at the end: sequence optimality."""
    if row["status"] != "ok":
        return ("\n<trajectory_evaluation>\n<sequence_optimality>not scored"
                "</sequence_optimality>\n<error>" + "; ".join(json.loads(row["errors"] or "[]"))
                + "</error>\n</trajectory_evaluation>\n")
    score = _loads(row["scores"]).get(EVAL_SEQUENCE_OPTIMALITY)
    n = int(row["n_judges_succeeded"])
    return (
        "\n<trajectory_evaluation>\n"
        f"<sequence_optimality>{react_label_text(row)}</sequence_optimality>\n"
        f"<score>{score}</score>\n"
        f"<summary>{row['summary']}</summary>\n<reasoning>{row['reasoning']}</reasoning>\n"
        f"<model_info>Averaged from {n} model{'s' if n != 1 else ''}</model_info>\n"
        "</trajectory_evaluation>\n"
    )


def react_evaluations(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One trajectory's ReAct figures (the ``react_evaluations`` metadata block).

    thought_to_tool / query_to_thought: ``accuracy`` is the mean score over the clips some
    judge scored (each clip's score is already the judges' agreement), ``scored`` of
    ``total`` clips, and the majority labels counted. sequence_optimality: the averaged
    score and label of the trajectory's single row. A kind nobody scored has no accuracy.
    """
    block: dict[str, Any] = {}
    for kind in (EVAL_THOUGHT_TO_TOOL, EVAL_QUERY_TO_THOUGHT):
        kind_rows = [r for r in rows if r["evaluation_kind"] == kind]
        scored = [_loads(r["scores"])[kind] for r in kind_rows if r["status"] == "ok"]
        labels: dict[str, int] = defaultdict(int)
        for r in kind_rows:
            if r["status"] == "ok":
                labels[react_label_text(r).split(" (")[0]] += 1
        block[kind] = {
            "accuracy": fmean(scored) if scored else None,
            "scored": len(scored),
            "total": len(kind_rows),
            "labels": dict(sorted(labels.items())),
        }
    seq = [r for r in rows if r["evaluation_kind"] == EVAL_SEQUENCE_OPTIMALITY]
    seq_ok = [r for r in seq if r["status"] == "ok"]
    block[EVAL_SEQUENCE_OPTIMALITY] = {
        "score": _loads(seq_ok[0]["scores"])[EVAL_SEQUENCE_OPTIMALITY] if seq_ok else None,
        "label": seq_ok[0]["label"] if seq_ok and isinstance(seq_ok[0]["label"], str)
        else None,
        "scored": bool(seq_ok),
    }
    return block


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
    "thought_to_tool_accuracy", "query_to_thought_accuracy", "sequence_optimality",
    "routing_passed", "routing_reason", "reward", "final_label", "labelled_clips",
    "evaluation_metadata", "full_response_with_evaluations",
]
_ROUTING_LISTS = ("expected_tools", "actual_tools", "missing", "unexpected",
                  "argument_failures")


def routing_block(row: Mapping[str, Any]) -> dict[str, Any]:
    """The deterministic routing check of one trajectory, for evaluation_metadata."""
    block = {k: row[k] for k in ("passed", "reason", "arguments_checked")}
    block.update({k: _loads_list(row[k]) for k in _ROUTING_LISTS})
    args = row["arguments_passed"]
    block["arguments_passed"] = None if args is None or pd.isna(args) else bool(args)
    block["passed"] = bool(block["passed"])
    block["arguments_checked"] = int(block["arguments_checked"])
    return block


def _loads_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return json.loads(value) if isinstance(value, str) and value else []


def summarize_trajectories(trajectories: pd.DataFrame, clips: pd.DataFrame,
                           averaged: pd.DataFrame, model_names: Sequence[str],
                           routing: pd.DataFrame | None = None) -> pd.DataFrame:
    clip_kind = (averaged[averaged["evaluation_kind"] == EVAL_KIND_CLIP] if len(averaged)
                 else averaged)
    react_kind = (averaged[averaged["evaluation_kind"].isin(list(REACT_EVALUATIONS))]
                  if len(averaged) else averaged)
    has_react = len(react_kind) > 0
    routing_by_traj = ({r["trajectory_id"]: r for r in routing.to_dict("records")}
                       if routing is not None and len(routing) else {})
    by_traj = {tid: g.sort_values("clip_index") for tid, g in clip_kind.groupby("trajectory_id")}
    react_by_traj = {tid: g.to_dict("records") for tid, g in react_kind.groupby("trajectory_id")}
    ends = {
        (tid, int(ci)): int(end)
        for tid, ci, end in zip(clips["trajectory_id"], clips["clip_index"], clips["end"],
                                strict=True)
    } if len(clips) else {}
    human = ({(tid, int(ci)): label for tid, ci, label in zip(
        clips["trajectory_id"], clips["clip_index"], clips["human_label"], strict=True)
        if label is not None and not pd.isna(label)}
        if len(clips) and "human_label" in clips.columns else {})
    rows = []
    for traj in trajectories.to_dict("records"):
        tid = traj["trajectory_id"]
        group = by_traj.get(tid)
        clip_rows = group.to_dict("records") if group is not None else []
        meta = evaluation_metadata(clip_rows, model_names)
        react_rows = react_by_traj.get(tid, [])
        react_per_clip: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in react_rows:
            if int(r["clip_index"]) >= 0:
                react_per_clip[int(r["clip_index"])].append(r)
        rubric_per_clip = {int(r["clip_index"]): r for r in clip_rows}
        blocks = [(ends[(tid, ci)], clip_evaluation_block(rubric_per_clip.get(ci),
                                                          react_per_clip.get(ci, [])))
                  for ci in sorted(set(rubric_per_clip) | set(react_per_clip))
                  if (tid, ci) in ends]
        full = embed_evaluations(traj["raw_response"], blocks)
        react = react_evaluations(react_rows)
        if has_react:
            # Added after the original tool's keys, which stay exactly as they were.
            meta["react_evaluations"] = react
        routed = routing_by_traj.get(tid)
        if routed is not None:
            meta["routing"] = routing_block(routed)
        seq_rows = [r for r in react_rows if r["evaluation_kind"] == EVAL_SEQUENCE_OPTIMALITY]
        if seq_rows:
            full += trajectory_evaluation_block(seq_rows[0])
        rows.append({
            **{c: traj.get(c) for c in SUMMARY_COLUMNS if c in traj},
            "total_clips": meta["total_clips"],
            "successful_evaluations": meta["successful_evaluations"],
            "success_rate": meta["success_rate"],
            "overall_trajectory_score": meta["overall_trajectory_score"],
            "thought_to_tool_accuracy": react[EVAL_THOUGHT_TO_TOOL]["accuracy"],
            "query_to_thought_accuracy": react[EVAL_QUERY_TO_THOUGHT]["accuracy"],
            "sequence_optimality": react[EVAL_SEQUENCE_OPTIMALITY]["score"],
            "routing_passed": bool(routed["passed"]) if routed is not None else None,
            "routing_reason": routed["reason"] if routed is not None else None,
            # (clip, judges' mean score, the source's step label) for agreement figures.
            "labelled_clips": json.dumps([
                [int(r["clip_index"]), r["mean_score"], human[(tid, int(r["clip_index"]))]]
                for r in clip_rows
                if r["status"] == "ok" and (tid, int(r["clip_index"])) in human
            ]),
            "evaluation_metadata": json.dumps(meta, ensure_ascii=False),
            "full_response_with_evaluations": full,
        })
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
