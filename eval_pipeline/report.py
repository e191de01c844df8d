"""The evaluation report over all batches: per batch and overall figures.

Besides the original tool's figures, each row carries the seed's three ReAct accuracies:
thought-to-tool and query-to-thought accuracy pooled over every scored clip of the batch
(the share of tool selections that match the reasoning, of thoughts aligned with the
query), and sequence-optimality accuracy over its scored trajectories. A batch where no
judge produced a kind has no figure for it (None), never 0.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

import pandas as pd

from eval_pipeline.agreement import auc, outcome_of, step_label_positive
from eval_pipeline.frame_columns import column_values
from eval_pipeline.scoring.assessments import CATEGORY_KEY, FINAL_KEY, pooled_assessments
from eval_pipeline.scoring.react_breakdown import COMBINED_KEY, TOOL_USAGE_KEY, pooled_breakdown

REPORT_MEAN_KEY = "mean_overall_score"
REPORT_COLUMNS = [
    "batch", "trajectories", "scored_trajectories", "total_clips", "successful_evaluations",
    "clip_success_rate", "mean_overall_score", "agent_success_rate",
    "thought_to_tool_accuracy", "query_to_thought_accuracy", "sequence_optimality_accuracy",
    "combined_accuracy", "tool_usage", "routing_checked", "routing_pass_rate",
    "outcome_auc", "outcome_labelled", "step_label_auc", "step_labelled", "tool_type_means",
    "trajectory_assessment_mean", "trajectory_assessment_means", "category_assessment_means",
]
ASSESSMENT_JSON_COLUMNS = ["trajectory_assessment_means", "category_assessment_means"]
REACT_ACCURACY_COLUMNS = ["thought_to_tool_accuracy", "query_to_thought_accuracy",
                          "sequence_optimality_accuracy"]
REPORT_INPUT_COLUMNS = [
    "overall_trajectory_score", "evaluation_metadata", "total_clips", "successful_evaluations",
    "success", "reward", "final_label", "routing_passed", "labelled_clips",
]
"""The summary columns a report row is built from (``outcome_of`` reads the three labels).
The report reads only these from each batch's Parquet: the responses with embedded
evaluations, nearly all of a summary's bytes, are never loaded for it."""


def _react_accuracies(metas: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    pooled: dict[str, list[float]] = {"thought_to_tool": [0.0, 0.0],
                                      "query_to_thought": [0.0, 0.0]}
    sequence: list[float] = []
    for meta in metas:
        react = meta.get("react_evaluations")
        if not react:
            continue
        for kind, acc in pooled.items():
            entry = react.get(kind) or {}
            if entry.get("accuracy") is not None and entry.get("scored"):
                acc[0] += entry["accuracy"] * entry["scored"]
                acc[1] += entry["scored"]
        score = (react.get("sequence_optimality") or {}).get("score")
        if score is not None:
            sequence.append(float(score))
    return {
        "thought_to_tool_accuracy": (pooled["thought_to_tool"][0] / pooled["thought_to_tool"][1]
                                     if pooled["thought_to_tool"][1] else None),
        "query_to_thought_accuracy": (pooled["query_to_thought"][0]
                                      / pooled["query_to_thought"][1]
                                      if pooled["query_to_thought"][1] else None),
        "sequence_optimality_accuracy": fmean(sequence) if sequence else None,
    }


_AGREEMENT_COLUMNS = ("overall_trajectory_score", "labelled_clips", "final_label", "reward",
                      "success")
"""What the AUCs read: the score, the clips' labels, and ``outcome_of``'s three labels."""


def _label_agreement(df: pd.DataFrame) -> dict[str, float | int | None]:
    """Do the judges rank what the source labelled good above what it labelled bad?"""
    # Records of only the columns read here: converting every column (the metadata JSON
    # too) to Python was half of build_report (#12.5).
    names = [c for c in _AGREEMENT_COLUMNS if c in df.columns]
    rows = [dict(zip(names, values, strict=True))
            for values in zip(*(column_values(df, c) for c in names), strict=True)]
    outcome = auc((r["overall_trajectory_score"], outcome_of(r)) for r in rows)
    steps = auc((score, step_label_positive(label))
                for r in rows if isinstance(r.get("labelled_clips"), str)
                for _clip, score, label in json.loads(r["labelled_clips"]))
    return {
        "outcome_auc": outcome.auc,
        "outcome_labelled": outcome.positives + outcome.negatives,
        "step_label_auc": steps.auc,
        "step_labelled": steps.positives + steps.negatives,
    }


def _row(batch: str, df: pd.DataFrame, metas: Sequence[Mapping[str, Any]]) -> dict:
    """One report row; ``metas`` is ``df``'s evaluation_metadata decoded (once per
    trajectory for all rows, not once per figure and row, #12.5)."""
    scored = df["overall_trajectory_score"].dropna()
    tool_scores: dict[str, list[float]] = defaultdict(list)
    for meta in metas:
        for tool, avg in meta["tool_averages"].items():
            if avg["overall_average"] is not None:
                tool_scores[tool].append(avg["overall_average"])
    clips = int(df["total_clips"].sum())
    ok = int(df["successful_evaluations"].sum())
    success = df["success"].dropna()
    routed = (df["routing_passed"].dropna() if "routing_passed" in df.columns
              else pd.Series(dtype=bool))
    return {
        "batch": batch,
        "trajectories": len(df),
        "scored_trajectories": len(scored),
        "total_clips": clips,
        "successful_evaluations": ok,
        "clip_success_rate": ok / clips if clips else None,
        "mean_overall_score": float(scored.mean()) if len(scored) else None,
        "agent_success_rate": float(success.astype(bool).mean()) if len(success) else None,
        **_react_accuracies(metas),
        **pooled_breakdown(metas),
        "routing_checked": len(routed),
        "routing_pass_rate": float(routed.astype(bool).mean()) if len(routed) else None,
        **_label_agreement(df),
        "tool_type_means": json.dumps({t: round(fmean(v), 4)
                                       for t, v in sorted(tool_scores.items())}),
        **pooled_assessments(metas),
    }


FIGURE_COLUMNS = [c for c in REPORT_INPUT_COLUMNS if c != "evaluation_metadata"]
"""The summary columns the ``ALL`` row reads besides the metadata (kept per trajectory)."""
COMPACT_METADATA = "report_metadata"
"""Column of a batch's figures: the part of each trajectory's ``evaluation_metadata`` the
report reads (:func:`compact_metadata`), as JSON."""
_REACT_READ: dict[str, tuple[str, ...]] = {
    "thought_to_tool": ("accuracy", "scored"), "query_to_thought": ("accuracy", "scored"),
    "sequence_optimality": ("score",), COMBINED_KEY: ("correct", "scored")}
"""Of each ReAct block, the keys :func:`_react_accuracies` and :func:`pooled_breakdown` read
(and of the tool usage, each tool's ``calls``, ``scored`` and ``correct``)."""
_USAGE_READ = ("calls", "scored", "correct")
_ASSESSMENT_KEYS = ("overall_average", "average_scores")


@dataclass(frozen=True)
class BatchReport:
    """A batch's report row, and what the ``ALL`` row needs of each of its trajectories.

    The ``ALL`` row's means and sums depend on every trajectory's figures in order (float
    sums are not associative), so they cannot be pooled from the batch rows; ``figures``
    holds them compactly: the summary columns the row reads, and of the metadata only what
    the row reads (a fifth of its size on the corpora), so a report over many batches
    recomputes no batch row and decodes less (#12.5)."""

    row: dict[str, Any]
    figures: pd.DataFrame


def _only(block: object, keys: Sequence[str]) -> object:
    """``block``'s ``keys`` (those present), or ``block`` itself when it is no mapping."""
    if not isinstance(block, Mapping):
        return block
    return {k: block[k] for k in keys if k in block}


def _react(react: object) -> object:
    if not isinstance(react, Mapping):
        return react
    out: dict[str, Any] = {k: _only(react[k], read) for k, read in _REACT_READ.items()
                           if k in react}
    if TOOL_USAGE_KEY in react:
        usage = react[TOOL_USAGE_KEY]
        out[TOOL_USAGE_KEY] = ({tool: _only(entry, _USAGE_READ) for tool, entry in usage.items()}
                               if isinstance(usage, Mapping) else usage)
    return out


def compact_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a trajectory's decoded ``evaluation_metadata`` that :func:`_row` reads,
    directly and through :func:`pooled_breakdown` and :func:`pooled_assessments`: every
    report figure computed from it is the one computed from the whole (the tests compare
    them on the corpora)."""
    out: dict[str, Any] = {}
    if "tool_averages" in meta:
        out["tool_averages"] = {tool: {"overall_average": avg["overall_average"]}
                                for tool, avg in meta["tool_averages"].items()}
    if "react_evaluations" in meta:
        out["react_evaluations"] = _react(meta["react_evaluations"])
    if FINAL_KEY in meta:
        out[FINAL_KEY] = _only(meta[FINAL_KEY], _ASSESSMENT_KEYS)
    if CATEGORY_KEY in meta:
        categories = meta[CATEGORY_KEY]
        out[CATEGORY_KEY] = ({c: _only(b, _ASSESSMENT_KEYS) for c, b in categories.items()}
                             if isinstance(categories, Mapping) else categories)
    return out


def batch_report(batch: str, summaries: pd.DataFrame) -> BatchReport | None:
    """One batch's report row and figures (None for a batch with no trajectory, which the
    report leaves out). ``summaries``: at least the :data:`REPORT_INPUT_COLUMNS` present."""
    if summaries is None or not len(summaries):
        return None
    metas = [json.loads(m) for m in summaries["evaluation_metadata"]]
    figures = summaries[[c for c in FIGURE_COLUMNS if c in summaries.columns]].reset_index(
        drop=True)
    figures[COMPACT_METADATA] = [json.dumps(compact_metadata(m), separators=(",", ":"))
                                 for m in metas]
    return BatchReport(_row(batch, summaries, metas), figures)


def report_from_batches(rows: Mapping[str, Mapping[str, Any]],
                        figures: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The report from each batch's row and the batches' figures in load order (the order
    ``build_report`` concatenates its tables in): the rows sorted by batch, then ``ALL``
    over every trajectory's figures."""
    report = [dict(rows[batch]) for batch in sorted(rows)]
    if rows:
        every = pd.concat(list(figures), ignore_index=True)
        # One decode for all trajectories' compact metadata (one per text cost a third more).
        metas = json.loads("[" + ",".join(every[COMPACT_METADATA].tolist()) + "]")
        report.append(_row("ALL", every, metas))
    return pd.DataFrame(report, columns=REPORT_COLUMNS)


def report_row(batch: str, summaries: pd.DataFrame, metas: Sequence[Mapping[str, Any]]
               ) -> dict[str, Any]:
    """One row of :func:`build_report`: ``summaries`` (its input columns; the metadata
    column itself is not read) and their ``evaluation_metadata`` decoded, in the same
    order. ``metas`` is read several times, so it may be a sequence that decodes on each
    pass: the CLI's export builds the ALL row of a whole drop that way (#12.3)."""
    return _row(batch, summaries, metas)


def build_report(summaries: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per batch with trajectories, sorted, and the ``ALL`` row over them all in
    the order given."""
    parts = {str(k): part for k, v in summaries.items()
             if (part := batch_report(str(k), v)) is not None}
    return report_from_batches({k: p.row for k, p in parts.items()},
                               [p.figures for p in parts.values()])


def batch_row(batch: str, summaries: pd.DataFrame) -> dict[str, Any] | None:
    """One batch's report row alone (a batch's own figures in its metadata)."""
    if summaries is None or not len(summaries):
        return None
    return _row(batch, summaries, [json.loads(m) for m in summaries["evaluation_metadata"]])


def row_to_json(row: Mapping[str, Any]) -> str:
    """A report row as JSON that reads back to equal values (floats by their shortest
    repr, None as null, NaN as NaN), for the index of batch rows."""
    return json.dumps(row, default=_plain_number)


def row_from_json(text: str) -> dict[str, Any]:
    return dict(json.loads(text))


def _plain_number(value: object) -> object:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serializable in a report row: {type(value).__name__}")


def report_markdown(report: pd.DataFrame, last_mean: float | None) -> str:
    if report.empty:
        return "_no batch has been summarised yet_"
    table = report.drop(columns=["tool_type_means", "tool_usage", *ASSESSMENT_JSON_COLUMNS],
                        errors="ignore").to_markdown(
        index=False, floatfmt=".3f")
    overall = report[report["batch"] == "ALL"]
    lines = [table]
    if len(overall):
        lines.append("\n**Tool-type means (all batches):** "
                     + overall["tool_type_means"].iloc[0])
        mean = overall["mean_overall_score"].iloc[0]
        if last_mean is not None and mean is not None and pd.notna(mean):
            lines.append(f"\n**Change since the last report:** {float(mean) - last_mean:+.4f}")
    return "\n".join(lines)
