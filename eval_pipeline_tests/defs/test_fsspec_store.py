"""The asset Parquet under an fsspec URL: the whole graph, its "what changed" metadata (read
from the previous Parquet) and the CLI's exports work through UPath, with nothing written to
a local assets folder."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import fsspec
import pandas as pd
import pytest
from upath import UPath

from eval_pipeline.cli import main
from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.defs.pipeline.io_manager import read_parquet
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.store import (
    ASSETS_ENV,
    STORE_ENV,
    StoreLocationError,
    record_store,
    resolve_store,
)
from eval_pipeline_tests.dagster_helpers import PER_BATCH, stage_drop

PER_BATCH_TABLES = ("raw_trajectories", "quarantine", "preprocessed_trajectories",
                    "preprocess_report", "clips", "routing_checks", "judgments/heuristic",
                    "averaged_scores", "judge_agreement", "judge_disagreements",
                    "trajectory_summaries")


@pytest.fixture
def memory_url():
    url = f"memory://eval-assets-{uuid.uuid4().hex[:8]}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def _assets_url(kind: str, tmp_path: Path, memory_url: str) -> str:
    return memory_url if kind == "memory" else (tmp_path / "remote").as_uri()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "file"])
def test_the_whole_graph_materializes_under_an_fsspec_url(
        kind, project_root, tmp_path, instance, memory_url):
    url = _assets_url(kind, tmp_path, memory_url)
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    keys, _ = stage_drop(drop, tmp_path, instance)
    defs = build_definitions(
        [JudgeConfig(name="heuristic")], assets_dir=url,
        pipeline=PipelineSettings(incoming_dir=str(tmp_path / "incoming"),
                                  batches_dir=str(tmp_path / "batches")))
    assets = list(defs.assets)  # type: ignore[arg-type]
    resources = dict(defs.resources)

    def run(selection: dg.AssetSelection, partition: str | None) -> None:
        assert dg.materialize(assets, selection=selection, partition_key=partition,
                              instance=instance, resources=resources).success

    for key in keys[:2]:
        run(PER_BATCH, key)
    run(PER_BATCH, keys[0])  # again: the delta reads the previous Parquet from the URL
    run(dg.AssetSelection.assets("evaluation_report"), None)

    base = UPath(url)
    for table in PER_BATCH_TABLES:
        for key in keys[:2]:
            assert base.joinpath(*table.split("/"), f"{key}.parquet").exists(), table
    report = read_parquet(base / "evaluation_report.parquet")
    assert set(report["batch"]) == {*keys[:2], "ALL"}
    assert not (tmp_path / "assets").exists()  # nothing fell back to a local folder

    latest = instance.get_latest_materialization_event(
        dg.AssetKey("averaged_scores")).asset_materialization
    assert latest.partition == keys[0]
    assert str(latest.metadata["path"].value).startswith(url)
    # Compared with the first materialization's table, read back through fsspec.
    assert latest.metadata["delta/compared"].value > 0
    assert latest.metadata["delta/moved_over_0.1"].value == 0
    summaries = read_parquet(base / "trajectory_summaries" / f"{keys[0]}.parquet",
                             ["trajectory_id", "overall_trajectory_score", "no_such_column"])
    assert list(summaries.columns) == ["trajectory_id", "overall_trajectory_score"]
    if kind == "file":  # a file:// URL is local disk: written atomically, no temp files left
        files = [p.name for p in (tmp_path / "remote").rglob("*") if p.is_file()]
        assert files and not [n for n in files if n.endswith(".tmp")]


@pytest.mark.slow
def test_the_cli_exports_from_a_memory_store(project_root, tmp_path, monkeypatch,
                                             memory_url, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(ASSETS_ENV, memory_url)
    out = tmp_path / "out"
    assert main(["run", str(project_root / "data" / "incoming" / "sample_malformed.jsonl"),
                 "--output", str(out)]) == 0
    assert f"asset Parquet under: {memory_url}" in capsys.readouterr().out
    exported = pd.read_parquet(out / "trajectory_summaries.parquet")
    stored = read_parquet(UPath(memory_url) / "trajectory_summaries"
                          / "sample_malformed01.parquet")
    assert len(exported) == len(stored) > 0
    assert (out / "evaluated.jsonl").read_text("utf-8").count("\n") == len(stored)
    assert not (tmp_path / "store" / "assets").exists()


def test_the_assets_url_is_configuration_and_the_store_stays_local(tmp_path, monkeypatch):
    monkeypatch.setenv(ASSETS_ENV, "s3://bucket/eval")
    where = resolve_store()
    assert where.root == tmp_path / "store" and where.assets == "s3://bucket/eval"
    assert where.batches == tmp_path / "store" / "batches"
    monkeypatch.setenv(ASSETS_ENV, "~/assets")  # a folder is made absolute
    assert resolve_store().assets == str(Path.home() / "assets")

    # The instance remembers the URL with its store, for the UI started without it ...
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv(ASSETS_ENV, "gs://bucket/eval")
    record_store(home, resolve_store())
    monkeypatch.delenv(ASSETS_ENV)
    assert resolve_store().assets == "gs://bucket/eval"
    # ... but not for another store, which keeps its own assets/ folder.
    assert resolve_store(tmp_path / "other").assets == str(tmp_path / "other" / "assets")

    monkeypatch.setenv(STORE_ENV, "s3://bucket/store")
    with pytest.raises(StoreLocationError, match="EVAL_PIPELINE_ASSETS"):
        resolve_store()
