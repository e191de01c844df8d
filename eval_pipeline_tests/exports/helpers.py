"""The tables a run exports, built by the domain functions the assets call (no Dagster),
with real judges: the heuristic, and LLM judges on the fake servers through the SDKs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from eval_pipeline.ingest import clip_tasks, clips_table, preprocess_batch, read_batch
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.presets import effective_model
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.report import build_report
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.judges.helpers import run

HEURISTIC = JudgeConfig(name="heuristic", provider="heuristic")


def run_tables(path: Path, judges: Sequence[JudgeConfig] = (HEURISTIC,),
               batch: str = "b01") -> dict[str, pd.DataFrame]:
    """``export_tables``' names for one batch of ``path`` judged by ``judges``."""
    raw, _ = read_batch(path, None, batch)
    pre, _, _ = preprocess_batch(raw, PreprocessConfig(), default_registry())
    clips = clips_table(pre)
    tasks = clip_tasks(clips, pre)
    judgments = {j.name: pd.DataFrame([r.model_dump() for r in run(j, tasks)])
                 for j in judges}
    averaged = average_judgments(judgments)
    names = [f"{j.provider}_{effective_model(j)}" for j in judges]
    summaries = summarize_trajectories(pre, clips, averaged, names)
    return {
        "preprocessed_trajectories": pre, "clips": clips,
        **{f"judgments__{name}": table for name, table in judgments.items()},
        "averaged_scores": averaged, "trajectory_summaries": summaries,
        "evaluation_report": build_report({batch: summaries}),
    }
