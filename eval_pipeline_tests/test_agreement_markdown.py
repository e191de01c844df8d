"""The judge_agreement metadata's markdown, rendered from column values, is the text
``DataFrame.to_markdown`` gave (#12.4): on two disagreeing judges with human labels (every
column kind: counts, figures, empty columns, missing cells, the disagreements' list)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd

from eval_pipeline import ingest
from eval_pipeline.agreement import PASS_THRESHOLD
from eval_pipeline.agreement_report import agreement_markdown, build_agreement
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.tool_registry import default_registry


def frame_markdown(agreement: pd.DataFrame, disagreements: pd.DataFrame,
                   limit: int = 20) -> str:
    """The rendering before #12.4, through the frames."""
    if agreement.empty:
        return "_no second judge and no human labels: nothing to compare_"
    shown = agreement.drop(columns=["batch"]).dropna(axis=1, how="all")
    lines = [shown.to_markdown(index=False, floatfmt=".3f"),
             f"\nA judge's decision: score >= {PASS_THRESHOLD} is good."]
    if len(disagreements):
        lines.append(f"\n**Disagreements** ({len(disagreements)}, first {limit}):\n")
        lines.append(disagreements.head(limit).drop(columns=["batch"]).dropna(
            axis=1, how="all").to_markdown(index=False, floatfmt=".3f"))
    return "\n".join(lines)


def _shifted(table: pd.DataFrame, by: float) -> pd.DataFrame:
    """A second judge that disagrees: every score moved by ``by`` within [0, 1]."""
    def move(text: str) -> str:
        scores = json.loads(text) if text else {}
        return json.dumps({k: min(1.0, max(0.0, v + by)) for k, v in scores.items()})
    return table.assign(scores=[move(s) for s in table["scores"]])


def test_markdown_is_the_frames_text(corpora_dir: Path, tmp_path: Path) -> None:
    lines = (corpora_dir / "agentprocessbench" / "hotpotqa.jsonl").read_text(
        "utf-8").splitlines()
    checked = 0
    for start in range(0, 60, 20):  # three batches of real step and outcome labels
        path = tmp_path / f"apb_{start}.jsonl"
        path.write_text("\n".join(lines[start:start + 20]) + "\n", "utf-8")
        raw, _ = ingest.read_batch(path, None, "b")
        kept, _, _ = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
        clips = ingest.clips_table(kept)
        rows = asyncio.run(run_judge(make_judge(JudgeConfig(name="heuristic")),
                                     ingest.clip_tasks(clips, kept)))
        judged = pd.DataFrame([r.model_dump() for r in rows])
        for judges in ({"h": judged}, {"h": judged, "s": _shifted(judged, 0.45)},
                       {"h": judged, "s": _shifted(judged, -0.6), "t": _shifted(judged, 0.2)}):
            agreement, disagreements = build_agreement("b", judges, clips, kept, 0.3)
            assert len(agreement) and agreement.isna().any().any()
            for limit in (20, 3):
                assert (agreement_markdown(agreement, disagreements, limit)
                        == frame_markdown(agreement, disagreements, limit))
            assert agreement_markdown(agreement, disagreements.iloc[0:0]) == frame_markdown(
                agreement, disagreements.iloc[0:0])
            checked += len(disagreements) > 0
    assert checked >= 6  # the disagreements' table was rendered and compared
    empty = pd.DataFrame(columns=["batch"])
    assert agreement_markdown(empty, empty) == frame_markdown(empty, empty)
