"""#12.5: the report from each batch's cached row and compact figures is the report built
from every batch's whole table, and a report recomputes only the batches the index cannot
answer for (written behind it), leaving out batches whose summaries are gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from eval_pipeline import ingest, report
from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION, range_tags
from eval_pipeline.defs.pipeline.report_index import FIGURES, ROWS
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import routing_table
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.splitting import split_drop
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.report_reference import reference_build_report
from eval_pipeline_tests.stage_digests import digest_table


def _identical(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert digest_table(got) == digest_table(expected)  # floats bit for bit


def _summaries(drop: Path, root: Path, size: int) -> dict[str, pd.DataFrame]:
    """Each batch's trajectory_summaries as the assets make them (heuristic judge with its
    assessments, routing), read back from Parquet as the report reads them."""
    judge = make_judge(JudgeConfig(name="heuristic"))
    out: dict[str, pd.DataFrame] = {}
    for manifest in split_drop(drop, root / "batches", size):
        path = root / "batches" / drop.stem / manifest.batch_file
        raw, _q = ingest.read_batch(path, manifest, manifest.partition_key)
        kept, _r, _s = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
        clips = ingest.clips_table(kept)
        rows = asyncio.run(run_judge(judge, ingest.clip_tasks(clips, kept)))
        averaged = average_judgments({"heuristic": pd.DataFrame([r.model_dump() for r in rows])})
        routing, _results = routing_table(kept, "subset")
        table = summarize_trajectories(kept, clips, averaged, ["heuristic_heuristic-v1"],
                                       routing)
        table.to_parquet(root / f"{manifest.partition_key}.parquet", index=False)
        out[manifest.partition_key] = pd.read_parquet(
            root / f"{manifest.partition_key}.parquet",
            columns=[c for c in report.REPORT_INPUT_COLUMNS if c in table.columns])
    return out


@pytest.fixture(scope="module")
def batches(project_root: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, pd.DataFrame]:
    root = tmp_path_factory.mktemp("summaries")
    found = _summaries(project_root / "data" / "incoming" / "sample_agent_runs.jsonl", root, 4)
    assert len(found) >= 5
    return found


def test_the_report_from_rows_and_compact_figures_is_the_whole_tables_report(
        batches: dict[str, pd.DataFrame]) -> None:
    expected = reference_build_report(batches)
    assert expected["trajectory_assessment_mean"].notna().all()
    _identical(report.build_report(batches), expected)
    # In another order the ALL row's sums follow it, as before.
    backwards = dict(reversed(list(batches.items())))
    _identical(report.build_report(backwards), reference_build_report(backwards))


def test_cached_rows_read_back_from_json_give_the_same_report(
        batches: dict[str, pd.DataFrame]) -> None:
    parts = {k: report.batch_report(k, v) for k, v in batches.items()}
    rows = {k: report.row_from_json(report.row_to_json(p.row)) for k, p in parts.items() if p}
    figures = [p.figures for p in parts.values() if p]
    _identical(report.report_from_batches(rows, figures), reference_build_report(batches))


def test_edge_batches_give_the_same_report(batches: dict[str, pd.DataFrame]) -> None:
    """An empty batch (left out), one nobody scored, one without outcomes, one whose
    metadata lacks the ReAct and assessment blocks."""
    first, second, third, *_rest = batches
    edited = dict(batches)
    edited[first] = batches[first].iloc[0:0]
    unscored = batches[second].copy()
    unscored["overall_trajectory_score"] = np.nan
    edited[second] = unscored
    plain = batches[third].copy()
    plain["success"] = None
    plain["evaluation_metadata"] = '{"tool_averages": {}}'
    edited[third] = plain
    expected = reference_build_report(edited)
    assert first not in set(expected["batch"])
    _identical(report.build_report(edited), expected)


def test_compact_metadata_is_a_fraction_of_the_whole(batches: dict[str, pd.DataFrame]) -> None:
    import json

    whole = sum(len(m) for t in batches.values() for m in t["evaluation_metadata"])
    compact = sum(len(json.dumps(report.compact_metadata(json.loads(m))))
                  for t in batches.values() for m in t["evaluation_metadata"])
    assert compact < whole / 2


def _graph(project_root: Path, root: Path) -> tuple[dg.Definitions, list[str]]:
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    keys = [m.partition_key for m in split_drop(drop, root / "batches", 5)]
    defs = build_definitions(
        [JudgeConfig(name="heuristic")], assets_dir=str(root / "assets"),
        pipeline=PipelineSettings(incoming_dir=str(root / "incoming"),
                                  batches_dir=str(root / "batches")))
    return defs, keys


def _report(defs: dg.Definitions, instance: dg.DagsterInstance) -> pd.DataFrame:
    assert defs.resolve_job_def("evaluation_report_job").execute_in_process(
        instance=instance).success
    return pd.read_parquet(Path(str(defs.resources["io_manager"].base_path))
                           / "evaluation_report.parquet")


def _files(root: Path, keys: list[str]) -> dict[str, pd.DataFrame]:
    return {k: pd.read_parquet(root / "assets" / "trajectory_summaries" / f"{k}.parquet")
            for k in keys
            if (root / "assets" / "trajectory_summaries" / f"{k}.parquet").exists()}


def test_the_report_asset_recomputes_only_what_the_index_cannot_answer_for(
        project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    defs, keys = _graph(project_root, tmp_path)
    batch_rows: list[str] = []
    original = report._row
    monkeypatch.setattr(report, "_row", lambda batch, *a: batch_rows.append(batch) or original(
        batch, *a))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions(BATCHES_PARTITION, keys)
        job = defs.resolve_job_def("evaluate_batch")
        assert job.execute_in_process(instance=instance, tags=range_tags(keys)).success
        index = tmp_path / "assets" / "_index" / "trajectory_summaries"
        assert {p.name for p in index.glob("*.parquet")} == {f"{ROWS}.parquet",
                                                             f"{FIGURES}.parquet"}
        batch_rows.clear()
        # 1. Everything indexed as it was written: no batch row recomputed, only ALL.
        _identical(_report(defs, instance), reference_build_report(_files(tmp_path, keys)))
        assert batch_rows == ["ALL"]

        # 2. k batches rewritten by a run: their rows computed as they are written.
        batch_rows.clear()
        assert job.execute_in_process(instance=instance, tags=range_tags(keys[1:2])).success
        written = [b for b in batch_rows if b != "batch"]  # "batch": the asset's metadata
        assert written == [keys[1]]
        batch_rows.clear()
        _identical(_report(defs, instance), reference_build_report(_files(tmp_path, keys)))
        assert batch_rows == ["ALL"]

        # 3. A batch's summaries rewritten behind the index (other code): derived from its
        # file, and indexed for the next report.
        path = tmp_path / "assets" / "trajectory_summaries" / f"{keys[0]}.parquet"
        changed = pd.read_parquet(path)
        changed["overall_trajectory_score"] = changed["overall_trajectory_score"] / 2
        changed.to_parquet(path, index=False)
        batch_rows.clear()
        stale = _report(defs, instance)
        assert batch_rows == [keys[0], "ALL"]
        _identical(stale, reference_build_report(_files(tmp_path, keys)))
        batch_rows.clear()
        _identical(_report(defs, instance), stale)
        assert batch_rows == ["ALL"]

        # 4. A batch whose summaries are gone is left out, as it was.
        (tmp_path / "assets" / "trajectory_summaries" / f"{keys[2]}.parquet").unlink()
        gone = _report(defs, instance)
        assert keys[2] not in set(gone["batch"])
        _identical(gone, reference_build_report(_files(tmp_path, keys)))
