"""A store of per-batch asset tables built with the domain functions the assets call (no
Dagster), laid out as the IO manager writes it: ``<assets>/<key path>/<batch>.parquet``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from eval_pipeline.agreement_report import build_agreement
from eval_pipeline.ingest import clip_tasks, clips_table, preprocess_batch, read_batch
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.presets import effective_model
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import routing_table
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests import parquet_io
from eval_pipeline_tests.judges.helpers import run

ASSETS = ("raw_trajectories", "quarantine", "preprocessed_trajectories", "preprocess_report",
          "clips", "averaged_scores", "routing_checks", "trajectory_summaries",
          "judge_agreement", "judge_disagreements")


def asset_paths(judges: Sequence[JudgeConfig]) -> list[tuple[str, ...]]:
    """The per-batch assets' key paths of a graph with these judges."""
    return sorted([(name,) for name in ASSETS] + [("judgments", j.name) for j in judges])


def write_batch(assets: Path, batch: str, path: Path, judges: Sequence[JudgeConfig]) -> None:
    """Every per-batch table of the batch file ``path``, as the assets compute them."""
    raw, quarantine = read_batch(path, None, batch)
    kept, removed, _stats = preprocess_batch(raw, PreprocessConfig(), default_registry())
    clips = clips_table(kept)
    tasks = clip_tasks(clips, kept)
    judgments = {j.name: pd.DataFrame([r.model_dump() for r in run(j, tasks)]) for j in judges}
    for name, table in judgments.items():
        if not len(table):  # the asset writes a table of no rows with the judgment columns
            judgments[name] = pd.DataFrame(columns=["trajectory_id", "clip_index",
                                                    "evaluation_kind", "status"])
    averaged = average_judgments(judgments)
    routing, _results = routing_table(kept)
    names = [f"{j.provider}_{effective_model(j)}" for j in judges]
    summaries = summarize_trajectories(kept, clips, averaged, names, routing)
    agreement, disagreements = build_agreement(batch, judgments, clips, kept)
    tables = {"raw_trajectories": raw, "quarantine": quarantine,
              "preprocessed_trajectories": kept, "preprocess_report": removed, "clips": clips,
              "averaged_scores": averaged, "routing_checks": routing,
              "trajectory_summaries": summaries, "judge_agreement": agreement,
              "judge_disagreements": disagreements,
              **{f"judgments/{name}": t for name, t in judgments.items()}}
    for name, table in tables.items():
        target = assets / name / f"{batch}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        parquet_io.write(table, target)
