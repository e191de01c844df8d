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
from collections.abc import Iterator, Mapping, Sequence
from statistics import fmean
from typing import Any

import pandas as pd

from eval_pipeline.agreement import auc, outcome_of, step_label_positive
from eval_pipeline.scoring.assessments import pooled_assessments
from eval_pipeline.scoring.react_breakdown import pooled_breakdown

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
            for values in zip(*(df[c].tolist() for c in names), strict=True)]
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


def report_row(batch: str, summaries: pd.DataFrame, metas: Sequence[Mapping[str, Any]]
               ) -> dict[str, Any]:
    """One row of :func:`build_report`: ``summaries`` (its input columns; the metadata
    column itself is not read) and their ``evaluation_metadata`` decoded, in the same
    order. ``metas`` is read several times, so it may be a sequence that decodes on each
    pass: the CLI's export builds the ALL row of a whole drop that way (#12.3)."""
    return _row(batch, summaries, metas)


DECODED_AT_ONCE = 2_000
"""Up to this many trajectories, each one's metadata is decoded once and kept for its
batch's row and the ALL row; beyond, the ALL row decodes it again on each of its four
passes (:class:`_Decoded`), so memory does not grow ~10 kB per trajectory."""


class _Decoded(Sequence[Mapping[str, Any]]):
    """Trajectories' ``evaluation_metadata`` (the JSON texts of several batches), decoded
    afresh on each pass. Decoded, a trajectory's metadata takes ~10 kB (its text ~3.5 kB):
    holding every trajectory's at once made the report of a 500 MB drop take 270 MiB more
    than it needs (#12.3); decoding on each pass costs the ALL row ~20 % more time."""

    def __init__(self, columns: Sequence[pd.Series]) -> None:
        self._columns = list(columns)

    def __len__(self) -> int:
        return sum(len(c) for c in self._columns)

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for column in self._columns:
            for text in column:
                yield json.loads(text)

    def __getitem__(self, index: Any) -> Any:  # Sequence's contract; _row only iterates
        return list(self)[index]


def build_report(summaries: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frames = {k: v for k, v in summaries.items() if v is not None and len(v)}
    if sum(len(v) for v in frames.values()) <= DECODED_AT_ONCE:  # each decoded once (#12.5)
        metas = {k: [json.loads(m) for m in v["evaluation_metadata"]]
                 for k, v in frames.items()}
        rows = [_row(str(k), v, metas[k]) for k, v in sorted(frames.items())]
        if frames:
            rows.append(_row("ALL", pd.concat(list(frames.values()), ignore_index=True),
                             [m for k in frames for m in metas[k]]))
        return pd.DataFrame(rows, columns=REPORT_COLUMNS)
    rows = [_row(str(k), v, [json.loads(m) for m in v["evaluation_metadata"]])
            for k, v in sorted(frames.items())]
    # The ALL row reads every column but the metadata (not joined) and decodes the
    # metadata batch by batch on each of its passes.
    rest = [v.drop(columns="evaluation_metadata") for v in frames.values()]
    rows.append(_row("ALL", pd.concat(rest, ignore_index=True),
                     _Decoded([v["evaluation_metadata"] for v in frames.values()])))
    return pd.DataFrame(rows, columns=REPORT_COLUMNS)


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
