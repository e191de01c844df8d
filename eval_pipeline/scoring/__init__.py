"""Scoring after the judges, split along the graph.

:mod:`~eval_pipeline.scoring.averaging` serves the ``averaged_scores`` asset (judges ->
one row per clip and evaluation kind); :mod:`~eval_pipeline.scoring.summaries` serves
``trajectory_summaries`` (averaged rows -> one row per trajectory, with the embedded text).
"""

from eval_pipeline.scoring.averaging import (
    AVERAGED_COLUMNS,
    average_judgments,
    json_object,
    majority_label,
)
from eval_pipeline.scoring.summaries import (
    SUMMARY_COLUMNS,
    clip_evaluation_block,
    embed_evaluations,
    evaluation_metadata,
    react_checks_line,
    react_evaluations,
    react_label_text,
    routing_block,
    summarize_trajectories,
    trajectory_evaluation_block,
)

__all__ = [
    "AVERAGED_COLUMNS",
    "SUMMARY_COLUMNS",
    "average_judgments",
    "clip_evaluation_block",
    "embed_evaluations",
    "evaluation_metadata",
    "json_object",
    "majority_label",
    "react_checks_line",
    "react_evaluations",
    "react_label_text",
    "routing_block",
    "summarize_trajectories",
    "trajectory_evaluation_block",
]
