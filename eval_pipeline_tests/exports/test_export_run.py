"""#12.3: ``export_run`` streams a run's exports from the store one batch at a time, and
writes exactly what the previous whole-table code wrote (``reference_exports``), on a
store of small batches built without Dagster: batch names out of order (the report and
``evaluated.jsonl`` sort them, the tables keep the run's order), a batch all quarantined,
the same task ids in two batches, Phoenix span ids, routing cases and three judges (two
sharing a provider and model).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from eval_pipeline.cli import print_run_summary
from eval_pipeline.exports import run as run_module
from eval_pipeline.exports.run import export_run
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.exports.reference_exports import reference_run
from eval_pipeline_tests.exports.store_builder import asset_paths, write_batch
from eval_pipeline_tests.exports.test_streamed_exports import assert_same_exports
from eval_pipeline_tests.formats.test_spans import phoenix_rows

JUDGES = [JudgeConfig(name="heuristic"), JudgeConfig(name="htwo"),
          JudgeConfig(name="hthree", model="heuristic-v3")]


@pytest.fixture(scope="module")
def store(project_root: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, list[str]]:
    """The assets folder of a store and the run's batches, in the run's order (built once:
    the tests only read it)."""
    tmp_path = tmp_path_factory.mktemp("store")
    incoming = project_root / "data" / "incoming"
    if not (incoming / "sample_agent_runs.jsonl").is_file():
        pytest.skip("data/incoming not present")
    runs = (incoming / "sample_agent_runs.jsonl").read_text("utf-8").splitlines(keepends=True)
    malformed = (incoming / "sample_malformed.jsonl").read_text("utf-8").splitlines(
        keepends=True)
    routing = [json.dumps(c) + "\n" for c in [
        {"name": "weather", "prompt": "Weather in Paris?", "expected_tools": ["get_weather"]},
        {"name": "hello", "prompt": "Hi!", "expected_tools": []}]]
    batches = {
        "runs10": runs[:5], "runs9": runs[5:12], "spans": [
            json.dumps(r) + "\n" for r in phoenix_rows()],
        "malformed1": malformed, "routing": routing, "again": runs[:5],
        "broken": ["{not json\n", "[1, 2]\n"], "runs11": runs[12:],
    }
    files = tmp_path / "batch_files"
    files.mkdir()
    assets = tmp_path / "store" / "assets"
    for key, lines in batches.items():
        path = files / f"{key}.jsonl"
        path.write_text("".join(lines), "utf-8")
        write_batch(assets, key, path, JUDGES)
    return assets, list(batches)


def exports_and_summary(assets: Path, keys: list[str], out: Path, per_batch: bool,
                        capsys: pytest.CaptureFixture[str]) -> str:
    exported = export_run(assets, out, keys, asset_paths(JUDGES),
                          per_batch_evaluated=per_batch)
    capsys.readouterr()
    print_run_summary(exported.figures, len(keys), JUDGES, out, exported.per_batch)
    return capsys.readouterr().out


@pytest.mark.parametrize("per_batch", [False, True])
def test_streamed_exports_equal_the_previous_whole_table_exports(
        store: tuple[Path, list[str]], tmp_path: Path, per_batch: bool,
        capsys: pytest.CaptureFixture[str]) -> None:
    assets, keys = store
    out = tmp_path / "out"
    printed = exports_and_summary(assets, keys, out, per_batch, capsys)
    expected = reference_run(str(assets), tmp_path / "reference" / "out", keys,
                             asset_paths(JUDGES), JUDGES, out, batch_folder=per_batch)
    assert_same_exports(out, tmp_path / "reference" / "out")
    assert printed == expected
    # What the store's batches differ in, which the exports had to reconcile:
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    assert list(dict.fromkeys(summaries["batch"])) == [k for k in keys if k != "broken"]
    assert summaries["task_id"].duplicated().any()
    assert (out / "judge_details" / "heuristic_heuristic-v1_heuristic_sample_01__2_eva.json"
            ).is_file()
    types = {str(pq.read_schema(assets / "preprocessed_trajectories" / f"{k}.parquet")
                 .field("success").type) for k in keys if k != "broken"}
    assert types == {"bool", "null"}  # a column all-null in some batches
    assert pq.read_metadata(assets / "clips" / "broken.parquet").num_rows == 0


BULKY = {"raw_response", "full_response_with_evaluations", "content", "result", "steps",
         "extra", "evaluation_metadata", "reasoning", "summary", "task_description"}
"""The columns holding nearly all of a run's bytes."""


def test_no_bulky_column_is_concatenated_across_batches(
        store: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export never joins the text of several batches into one DataFrame (what made
    the CLI's memory grow with the drop): every ``pd.concat`` holding a bulky column has
    at most one batch's rows. (Small tables kept across batches, such as the agreement
    rows the report lists, may be joined.)"""
    assets, keys = store
    one_batch = max(pq.read_metadata(p).num_rows for p in assets.rglob("*.parquet"))
    joined: list[tuple[int, list[str]]] = []
    original = pd.concat

    def concat(objs, *args, **kwargs):  # type: ignore[no-untyped-def]
        pieces = list(objs)
        bulky = sorted({str(c) for p in pieces for c in getattr(p, "columns", [])} & BULKY)
        if bulky:
            joined.append((sum(len(p) for p in pieces), bulky))
        return original(pieces, *args, **kwargs)

    monkeypatch.setattr(pd, "concat", concat)
    export_run(assets, tmp_path / "out", keys, asset_paths(JUDGES))
    streamed = list(joined)
    joined.clear()
    # ... the check sees what the previous code did: join every batch of every table.
    reference_run(str(assets), tmp_path / "reference", keys, asset_paths(JUDGES), JUDGES,
                  tmp_path / "reference")
    monkeypatch.undo()
    assert [j for j in streamed if j[0] > one_batch] == []
    assert max(rows for rows, _columns in joined) > 3 * one_batch


def test_a_failed_export_leaves_the_previous_files_and_no_partial_ones(
        store: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets, keys = store
    out = tmp_path / "out"
    export_run(assets, out, keys, asset_paths(JUDGES))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = []
    original = run_module._Export._batch

    def failing(self, batch, *args):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("killed mid-export")
        return original(self, batch, *args)

    monkeypatch.setattr(run_module._Export, "_batch", failing)
    with pytest.raises(RuntimeError, match="killed mid-export"):
        export_run(assets, out, keys[:-1], asset_paths(JUDGES))
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert not [name for name in os.listdir(out) if name.startswith(".")]
