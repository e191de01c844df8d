"""The vectorized averaging and summaries give exactly the tables the per-group code gave.

Temporary: compares against a frozen copy of the old module on the sample data and every
corpus file, with three judges that disagree, fail and split labels.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline import ingest, scoring
from eval_pipeline.formats import discover_files
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.models import steps_from_json
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import check_routing
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests import scoring_reference as old
from eval_pipeline_tests.conftest import CORPORA_DIR

PER_FILE = 25


def _tables(path: Path):
    raw, _ = ingest.read_batch(path, None, path.stem)
    kept, _, _ = ingest.preprocess_batch(raw, PreprocessConfig(beta_threshold=60),
                                         default_registry())
    kept = kept.head(PER_FILE)
    clips = ingest.clips_table(kept)
    rows = asyncio.run(run_judge(make_judge(JudgeConfig(name="heuristic")),
                                 ingest.clip_tasks(clips, kept)))
    a = pd.DataFrame([r.model_dump() for r in rows])
    return kept, clips, a


def _perturbed(a: pd.DataFrame, every: int, factor: float, flip: str) -> pd.DataFrame:
    b = a.copy()
    scores, status, labels, errors = [], [], [], []
    for i, (s, st, lab, err) in enumerate(zip(a["scores"], a["status"], a["label"],
                                              a["error"], strict=True)):
        if i % every == 0:
            scores.append("{}"), status.append("failed"), labels.append(None)
            errors.append(f"HTTP 500 on row {i}")
            continue
        values = json.loads(s)
        scores.append(json.dumps({k: round(v * factor + 0.1, 1) % 1.0 for k, v in
                                  values.items()}))
        status.append(st), errors.append(err)
        labels.append(flip if lab and i % 3 == 0 else lab)
    b["scores"], b["status"], b["label"], b["error"] = scores, status, labels, errors
    b["summary"] = [f"{s} (b)" if i % 4 else "" for i, s in enumerate(a["summary"])]
    return b


def _routing(kept: pd.DataFrame) -> pd.DataFrame | None:
    rows = []
    for row in kept.to_dict("records"):
        if not isinstance(row.get("expected_tools"), str):
            continue
        calls = row.get("expected_calls")
        r = check_routing(row["trajectory_id"], str(row["task_id"]),
                          steps_from_json(row["steps"]), json.loads(row["expected_tools"]),
                          json.loads(calls) if isinstance(calls, str) else None,
                          str(row.get("source_format") or ""), "subset").model_dump()
        for k in ("expected_tools", "actual_tools", "missing", "unexpected",
                  "argument_failures"):
            r[k] = json.dumps(r[k], ensure_ascii=False)
        rows.append(r)
    return pd.DataFrame(rows) if rows else None


def _inputs(project_root: Path) -> list[Path]:
    files = sorted((project_root / "data" / "incoming").glob("*.jsonl"))
    if CORPORA_DIR.is_dir():  # the first data file of each corpus, to bound the time
        for corpus in sorted(p for p in CORPORA_DIR.iterdir() if p.is_dir()):
            files += discover_files(corpus)[:1]
    return files


def test_new_scoring_equals_the_old_on_the_sample_data_and_the_corpora(project_root):
    compared = 0
    for path in _inputs(project_root):
        kept, clips, a = _tables(path)
        if not len(a):
            continue
        judges = {"a": a, "b": _perturbed(a, 7, 0.7, "incorrect"),
                  "c": _perturbed(a, 5, 1.3, "suboptimal")}
        for subset in ({"a": a}, judges, {"b": judges["b"], "c": judges["c"]}):
            want = old.average_judgments(subset)
            got = scoring.average_judgments(subset)
            pd.testing.assert_frame_equal(got, want, obj=f"averaged {path.name}")
            routing = _routing(kept)
            names = sorted(subset)
            pd.testing.assert_frame_equal(
                scoring.summarize_trajectories(kept, clips, got, names, routing),
                old.summarize_trajectories(kept, clips, want, names, routing),
                obj=f"summaries {path.name}")
            compared += len(got)
    assert compared > 500


@pytest.mark.parametrize("ends", [[(4, "<a>"), (8, "<b>")], [(8, "<b>"), (4, "<a>")],
                                  [(4, "<a>"), (4, "<b>"), (0, "<c>"), (99, "<d>")], []])
def test_embedding_matches_the_old_back_to_front_insertion(ends):
    assert scoring.embed_evaluations("AAA|BBB|", ends) == old.embed_evaluations("AAA|BBB|",
                                                                                ends)
