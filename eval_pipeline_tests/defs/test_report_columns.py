"""#12.5: the report reads only what it is built from, with the same content.

``evaluation_report`` reads the summaries' index (each batch's report row and compact
figures, kept as the batches are written), so neither the responses with embedded
evaluations (nearly all of the bytes) nor the batches' tables are read for it. The report
must be the one built from the full tables, bit for bit (the reference is the report as
built before the index held rows).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.local_run import run_pipeline
from eval_pipeline.report import REPORT_INPUT_COLUMNS, build_report
from eval_pipeline_tests.report_reference import reference_build_report
from eval_pipeline_tests.stage_digests import digest_table


@pytest.mark.slow
def test_report_from_the_summary_columns_equals_the_report_from_full_tables(
        corpora_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Labelled steps and outcomes (AUCs), XML trajectories, routing expectations: every
    # column the report reads, over many batches.
    drop = tmp_path / "drop"
    drop.mkdir()
    shutil.copy(corpora_dir / "dataeva" / "demo02.jsonl", drop)
    lines = (corpora_dir / "agentprocessbench" / "hotpotqa.jsonl").read_text(
        "utf-8").splitlines()[:40]
    (drop / "hotpotqa.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    (drop / "routing.jsonl").write_text(
        '{"name": "w", "prompt": "Weather in Paris?", "expected_tools": ["get_weather"]}\n',
        "utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    store = tmp_path / "store"
    result = run_pipeline(drop, tmp_path / "out", [JudgeConfig(name="heuristic")],
                          split_size=10, store=store)
    assert len(result.batches) >= 10
    full = {p.stem: pd.read_parquet(p)
            for p in sorted((store / "assets" / "trajectory_summaries").glob("*.parquet"))}
    assert set(full) == set(result.batches)
    expected = reference_build_report(full)
    assert expected["outcome_labelled"].iloc[-1] > 0 and expected["step_labelled"].iloc[-1] > 0
    assert expected["routing_checked"].iloc[-1] > 0

    def identical(got: pd.DataFrame) -> None:
        pd.testing.assert_frame_equal(got, expected, check_exact=True)
        assert digest_table(got) == digest_table(expected)

    # The domain function on the whole and on the projected tables ...
    identical(build_report(full))
    projected = {b: t[[c for c in REPORT_INPUT_COLUMNS if c in t.columns]]
                 for b, t in full.items()}
    identical(build_report(projected))
    # ... and the asset, which reads the summaries' index (#12.5).
    index = store / "assets" / "_index" / "trajectory_summaries"
    assert (index / "report_rows.parquet").is_file()
    assert (index / "report_figures.parquet").is_file()
    identical(pd.read_parquet(store / "assets" / "evaluation_report.parquet"))
    with dg.DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("evaluation_report"))
    assert event is not None and event.asset_materialization is not None
    meta = event.asset_materialization.metadata
    assert meta["batches"].value == len(full)
    assert meta["trajectories"].value == sum(len(t) for t in full.values())
