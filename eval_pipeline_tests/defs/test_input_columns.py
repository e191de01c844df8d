"""#12.4: the judge inputs and the agreement tables built from the few columns their assets
load of the preprocessed trajectories are the ones built from the whole table."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd

from eval_pipeline import ingest
from eval_pipeline.agreement_report import build_agreement
from eval_pipeline.defs.pipeline.assets.agreement import OUTCOME_COLUMNS
from eval_pipeline.defs.pipeline.assets.judging import TASK_COLUMNS
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests import parquet_io


def _check(path: Path, tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    lines = path.read_text("utf-8").splitlines()[:30]
    sample = tmp_path / path.name
    sample.write_text("\n".join(lines) + "\n", "utf-8")
    raw, _q = ingest.read_batch(sample, None, "b")
    kept, _r, _s = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
    parquet_io.write(kept, tmp_path / "kept.parquet")  # as the assets read it
    kept = parquet_io.read(tmp_path / "kept.parquet")
    clips = ingest.clips_table(kept)

    def columns(names: list[str]) -> pd.DataFrame:
        return parquet_io.read(tmp_path / "kept.parquet", names)

    tasks = ingest.clip_tasks(clips, kept)
    assert ingest.clip_tasks(clips, columns(TASK_COLUMNS)) == tasks
    rows = asyncio.run(run_judge(make_judge(JudgeConfig(name="heuristic")), tasks))
    judged = {"heuristic": pd.DataFrame([r.model_dump() for r in rows])}
    whole = build_agreement("b", judged, clips, kept)
    few = build_agreement("b", judged, clips, columns(OUTCOME_COLUMNS))
    for got, expected in zip(few, whole, strict=True):
        pd.testing.assert_frame_equal(got, expected, check_exact=True)
    return whole


def test_the_sample_drop(project_root: Path, tmp_path: Path) -> None:
    _check(project_root / "data" / "incoming" / "sample_agent_runs.jsonl", tmp_path)


def test_labelled_corpora(corpora_dir: Path, tmp_path: Path) -> None:
    """Outcome and step labels (the comparison with humans has rows to compare)."""
    agreement, _listed = _check(corpora_dir / "agentprocessbench" / "hotpotqa.jsonl", tmp_path)
    assert (agreement["comparison"] != "between_judges").any()
