"""Every consumer of a ``steps`` column gives the same result on Arrow steps (#12.1's
contract, ``STEPS_DTYPE``) as on the Python lists the stages handed on before: routing
checks, clips, the judges' tasks, the span ids of clips, the dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline import dry_run, ingest
from eval_pipeline.exports.common import clip_span_ids, trajectory_info, with_span_ids
from eval_pipeline.ingest import ReadOptions
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import routing_table
from eval_pipeline.steps_column import STEPS_DTYPE, with_arrow_steps
from eval_pipeline_tests.formats.test_spans import phoenix_rows

TAU = Path("tau_bench") / "historical_trajectories" / "gpt-4o-airline.trials0-1.json"


def _inputs(project_root: Path, tmp_path: Path) -> list[Path]:
    spans = tmp_path / "phoenix_spans.jsonl"
    spans.write_text("\n".join(json.dumps(r) for r in phoenix_rows()) + "\n", "utf-8")
    return [*sorted((project_root / "data" / "incoming").glob("*.jsonl")), spans]


def _kept(path: Path) -> pd.DataFrame:
    raw, _ = ingest.read_batch(path, None, path.stem)
    config = PreprocessConfig(beta_threshold=1000, duplicate_filter="flag")
    kept, _, _ = ingest.preprocess_batch(raw, config, ReadOptions().registry())
    return kept


def _assert_consumers_agree(kept: pd.DataFrame) -> None:
    arrow = with_arrow_steps(kept)
    assert arrow["steps"].dtype == STEPS_DTYPE
    table, results = routing_table(kept, "superset")
    arrow_table, arrow_results = routing_table(arrow, "superset")
    pd.testing.assert_frame_equal(arrow_table, table, check_exact=True)
    assert arrow_results == results
    clips = ingest.clips_table(kept)
    pd.testing.assert_frame_equal(ingest.clips_table(arrow), clips, check_exact=True)
    assert ingest.clip_tasks(clips, arrow) == ingest.clip_tasks(clips, kept)
    pd.testing.assert_frame_equal(with_span_ids(clips, arrow), with_span_ids(clips, kept),
                                  check_exact=True)
    assert (clip_span_ids(clips, trajectory_info(arrow), arrow)
            == clip_span_ids(clips, trajectory_info(kept), kept))


def test_consumers_agree_on_the_sample_drops_and_a_span_source(
        project_root: Path, tmp_path: Path) -> None:
    inputs = _inputs(project_root, tmp_path)
    spans = _kept(inputs[-1])
    assert with_span_ids(ingest.clips_table(spans), spans)["span_id"].notna().any()
    for path in inputs:
        _assert_consumers_agree(_kept(path))


def test_consumers_agree_on_routing_expectations(corpora_dir: Path) -> None:
    """tau-bench: every trajectory carries gold actions, so every row's steps are read."""
    path = corpora_dir / TAU
    if not path.exists():
        pytest.skip("tau-bench corpus not present")
    kept = _kept(path)
    assert kept["expected_tools"].notna().all()
    _assert_consumers_agree(kept)


def test_the_dry_run_reads_arrow_steps(project_root: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser handing Arrow steps (as it will) changes no task the dry run prices."""
    inputs = _inputs(project_root, tmp_path)
    before = dry_run.tasks_from_inputs(inputs)
    original = ingest.read_batch
    monkeypatch.setattr(ingest, "read_batch", lambda *a, **k: (
        lambda raw, quarantined: (with_arrow_steps(raw), quarantined))(*original(*a, **k)))
    assert before and dry_run.tasks_from_inputs(inputs) == before
