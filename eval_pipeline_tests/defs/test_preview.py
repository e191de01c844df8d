"""#12.4: the previews rendered from the first rows' values are the text the frame-based
rendering gave, on the tables a run writes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pandas as pd

from eval_pipeline import ingest
from eval_pipeline.defs.pipeline.assets.metadata import PREVIEW_CHARS, PREVIEW_ROWS, preview
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.tool_registry import default_registry


def frame_preview(df: pd.DataFrame, columns: list[str] | None = None) -> str:
    """The preview as it was rendered before (through DataFrame.map and to_markdown), when
    ``steps`` held Python lists (DataFrame.map renders an Arrow list column otherwise)."""
    shown = df[[c for c in (columns or df.columns) if c in df.columns]].head(PREVIEW_ROWS)
    shown = shown.assign(**{c: pd.Series(shown[c].tolist(), index=shown.index, dtype=object)
                            for c in shown.columns if isinstance(shown[c].dtype, pd.ArrowDtype)})
    shown = shown.map(lambda v: (str(v)[:PREVIEW_CHARS] + "...") if isinstance(v, str)
                      and len(v) > PREVIEW_CHARS else v)
    if shown.empty:
        return "_empty_"
    return shown.to_markdown(index=False)


def test_previews_of_a_runs_tables_are_the_text_they_were(project_root: Path) -> None:
    path = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    raw, quarantined = ingest.read_batch(path, None, "b")
    kept, removed, _ = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
    clips = ingest.clips_table(kept)
    rows = asyncio.run(run_judge(make_judge(JudgeConfig(name="heuristic")),
                                 ingest.clip_tasks(clips, kept)))
    judged = pd.DataFrame([r.model_dump() for r in rows])
    averaged = average_judgments({"heuristic": judged})
    summaries = summarize_trajectories(kept, clips, averaged, ["heuristic"])
    tables = [raw, quarantined, kept, removed, clips, judged, averaged, summaries]
    for table in tables:
        for columns in (None, list(table.columns[::2]), ["no_such_column"],
                        [str(table.columns[0]), "no_such_column"]):
            assert preview(table, columns).value == frame_preview(table, columns)
        assert preview(table.iloc[0:0]).value == "_empty_"


def test_a_missing_value_in_an_object_column_shows_blank() -> None:
    """The one difference: DataFrame.map turned None beside numbers into NaN ("nan")."""
    frame = pd.DataFrame({"reward": pd.Series([None, 1.0], dtype=object),
                          "score": [np.nan, 0.5], "text": ["x" * 100, "short"]})
    lines = preview(frame).value.splitlines()
    assert lines[2].startswith("|          |") and "nan" in lines[2]  # the float NaN stays
    assert lines[2].rstrip(" |").endswith("x" * PREVIEW_CHARS + "...")
