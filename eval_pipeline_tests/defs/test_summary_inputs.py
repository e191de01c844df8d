"""#12.4: trajectory_summaries loads only the trajectory columns the summaries read (not
the nested steps each consumer had converted to Python objects), and summarizes the same."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline import ingest
from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import routing_table
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.scoring.summaries import TRAJECTORY_COLUMNS
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests import parquet_io
from eval_pipeline_tests.scoring_digests import CORPORA_FILES, inputs


def _read(table: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """What the IO manager serves: the table through Parquet, only ``columns`` present."""
    return parquet_io.round_trip(table, columns)


def _same_summaries(path: Path) -> None:
    raw, _quarantined = ingest.read_batch(path, None, path.stem)
    kept, _removed, _stats = ingest.preprocess_batch(raw, PreprocessConfig(),
                                                     default_registry())
    clips = ingest.clips_table(kept)
    routing, _results = routing_table(kept, "subset")
    rows = asyncio.run(run_judge(make_judge(JudgeConfig(name="heuristic")),
                                 ingest.clip_tasks(clips, kept)))
    averaged = average_judgments({"heuristic": pd.DataFrame([r.model_dump() for r in rows])})
    whole = summarize_trajectories(_read(kept), clips, averaged, ["heuristic"], routing)
    chosen = summarize_trajectories(_read(kept, TRAJECTORY_COLUMNS), clips, averaged,
                                    ["heuristic"], routing)
    assert "steps" not in TRAJECTORY_COLUMNS
    pd.testing.assert_frame_equal(chosen, whole, check_exact=True)


@pytest.mark.parametrize("name", sorted(inputs(None)))
def test_the_summaries_of_the_columns_they_read_are_the_summaries(name: str) -> None:
    _same_summaries(inputs(None)[name])


def test_the_same_on_corpora(corpora_dir: Path) -> None:
    for name in CORPORA_FILES[::3]:
        _same_summaries(corpora_dir / name)


def test_the_summaries_asset_asks_for_those_columns() -> None:
    defs = build_definitions([JudgeConfig(name="heuristic")])
    node = defs.resolve_assets_def("trajectory_summaries").node_def
    assert node.input_def_named("preprocessed_trajectories").metadata["columns"] \
        == TRAJECTORY_COLUMNS
