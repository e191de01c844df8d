"""The heuristic judge's sequence verdict uses the run's beta threshold (issue 11 defect)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd

from eval_pipeline import ingest
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.tool_registry import default_registry


def _sixteen_calls(path: Path) -> Path:
    steps = "".join(
        f"<think>look up item {i}</think>\n<browser_use><browser_search_google>"
        f'{{"query": "item {i}"}}</browser_search_google></browser_use>\n'
        f"<execute_tools />\n<result>found item {i}</result>\n" for i in range(16))
    path.write_text(json.dumps({"task_id": "t16", "task_description": "find 16 items",
                                "raw_response": steps + "<answer>done</answer>"}) + "\n")
    return path


def _sequence_row(path: Path, config: PreprocessConfig) -> dict:
    raw, _ = ingest.read_batch(path, None, "b")
    kept, _, _ = ingest.preprocess_batch(raw, config, default_registry())
    assert len(kept) == 1  # kept: 16 calls are within the threshold
    tasks = ingest.clip_tasks(ingest.clips_table(kept), kept)
    judge = make_judge(JudgeConfig(name="h", evaluations=["sequence_optimality"]))
    rows = asyncio.run(run_judge(judge, tasks))
    table = pd.DataFrame([r.model_dump() for r in rows])
    return table[table["evaluation_kind"] == "sequence_optimality"].iloc[0].to_dict()


def test_a_16_call_trajectory_kept_at_threshold_30_is_not_over_the_threshold(tmp_path):
    row = _sequence_row(_sixteen_calls(tmp_path / "d.jsonl"), PreprocessConfig(beta_threshold=30))
    assert "16 tool call(s) (beta threshold 30)" in row["reasoning"]
    assert "over the threshold" not in row["reasoning"]
    assert row["label"] == "optimal"


def test_the_same_trajectory_flagged_over_threshold_10_is_suboptimal(tmp_path):
    config = PreprocessConfig(beta_threshold=10, frequency_filter="flag")
    row = _sequence_row(_sixteen_calls(tmp_path / "d.jsonl"), config)
    assert "16 tool call(s) (beta threshold 10), over the threshold" in row["reasoning"]
    assert row["label"] == "suboptimal"
