"""#12.3 end to end: ``eval-pipeline run`` writes every export, and prints the summary,
exactly as the previous code did from whole-run DataFrames (``reference_exports``).

Each CLI run is compared against the reference computed from the same store afterwards:
every Parquet export reads back equal (values, dtypes, index), every other file (JSONL,
CSV, JSON, Markdown, HTML, PNG, text) is byte-identical, and the printed statistics and
summary are the same text. The drops have many small batches whose tables differ in schema
(a column all-null in one batch, batches with nothing quarantined or removed), duplicate
task ids across batches, Phoenix span ids, routing cases, human labels, three judges (two
sharing a provider and model) and, with the corpora, an LLM judge on the fake server with
failures and repeats.
"""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION
from eval_pipeline.exports import pieces, tables
from eval_pipeline.judges.config import load_judges
from eval_pipeline_tests.exports.reference_exports import reference_run
from eval_pipeline_tests.formats.test_spans import phoenix_rows
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer, FaultMix

THREE_HEURISTICS = ("judges:\n  - name: heuristic\n    provider: heuristic\n"
                    "  - name: htwo\n    provider: heuristic\n"
                    "  - name: hthree\n    provider: heuristic\n    model: heuristic-v3\n")


def exported_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def assert_same_exports(out: Path, ref: Path) -> None:
    """Every file of ``ref`` in ``out`` and nothing else: Parquet equal as read back,
    everything else byte for byte."""
    files = exported_files(out)
    assert files == exported_files(ref)
    assert not [f for f in files if any(part.startswith(".") for part in f.split("/"))]
    for name in files:
        if name.endswith(".parquet"):
            pd.testing.assert_frame_equal(pd.read_parquet(out / name),
                                          pd.read_parquet(ref / name),
                                          check_exact=True, obj=name)
            continue
        got, want = (out / name).read_bytes(), (ref / name).read_bytes()
        if got != want:
            diff = "" if name.endswith(".png") else "\n".join(difflib.unified_diff(
                want.decode("utf-8").splitlines(), got.decode("utf-8").splitlines(),
                "reference", "streamed", lineterm="", n=1))
            pytest.fail(f"{name} differs from the reference\n{diff[:4000]}")


def printed_summary(stdout: str) -> str:
    """The statistics through the "wrote"/"per batch" lines (progress goes to stderr)."""
    lines = stdout.splitlines()
    end = max(i for i, line in enumerate(lines)
              if line.startswith(("wrote ", "per batch: ")))
    return "\n".join(lines[:end + 1]) + "\n"


def run_and_compare(args: list[str], judges_file: Path | None, tmp_path: Path,
                    capsys: pytest.CaptureFixture[str], keys: list[str] | None = None,
                    batch_folder: bool = False, name: str = "out") -> list[str]:
    """Run the CLI, then the reference on the same store and batches; compare. The run's
    batches are the instance's (a fresh one) unless ``keys`` says which."""
    out = tmp_path / name
    argv = ["run", *args, "--output", str(out), "--quiet"]
    if judges_file is not None:
        argv += ["--judges", str(judges_file)]
    code = main(argv)
    stdout = capsys.readouterr().out
    assert code in (0, 3), stdout
    judges = load_judges(judges_file)
    store = tmp_path / "store"
    defs = build_definitions(judges, assets_dir=str(store / "assets"))
    assets = [k.path for k in defs.resolve_asset_graph().get_all_asset_keys()
              if k != dg.AssetKey("evaluation_report")]
    if keys is None:
        with dg.DagsterInstance.get() as instance:
            keys = list(instance.get_dynamic_partitions(BATCHES_PARTITION))
    ref = tmp_path / "reference" / name  # the same folder name: the report's title
    printed = reference_run(str(store / "assets"), ref, keys, assets, judges, out,
                            batch_folder=batch_folder)
    assert_same_exports(out, ref)
    assert printed_summary(stdout) == printed
    return keys


def sample_drop(project_root: Path, tmp_path: Path) -> Path:
    incoming = project_root / "data" / "incoming"
    if not (incoming / "sample_agent_runs.jsonl").is_file():
        pytest.skip("data/incoming not present")
    drop = tmp_path / "drop"
    drop.mkdir()
    for path in sorted(incoming.glob("*.jsonl")):
        shutil.copy(path, drop)
    # The same records again under another name: the same task ids in other batches.
    shutil.copy(incoming / "sample_agent_runs.jsonl", drop / "sample_again.jsonl")
    (drop / "traces.jsonl").write_text(
        "\n".join(json.dumps(r) for r in phoenix_rows()) + "\n", "utf-8")
    (drop / "routing.jsonl").write_text("\n".join(json.dumps(c) for c in [
        {"name": "weather", "prompt": "Weather in Paris?", "expected_tools": ["get_weather"]},
        {"name": "hello", "prompt": "Hi!", "expected_tools": []},
    ]) + "\n", "utf-8")
    return drop


def join_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the export keeps across batches joined every 3 batches, and each asset file's
    row group written every 2 batches, so a test's few batches take the paths a large
    drop's thousands take (#12.3: the exports' memory no longer grows with the drop)."""
    monkeypatch.setattr(pieces, "JOIN_EVERY", 3)
    monkeypatch.setattr(tables, "ROW_GROUP_TABLES", 2)


@pytest.mark.slow
def test_streamed_exports_equal_the_whole_table_exports_on_many_small_batches(
        project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    join_often(monkeypatch)
    drop = sample_drop(project_root, tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVAL_PIPELINE_STORE", str(tmp_path / "store"))
    judges = tmp_path / "judges.yaml"
    judges.write_text(THREE_HEURISTICS, "utf-8")
    keys = run_and_compare([str(drop), "--split-size", "4"], judges, tmp_path, capsys)
    assert len(keys) >= 15
    # A second run on part of the drop: the store's report covers more batches than this
    # run exports, so the export's ALL row is this run's own.
    part = [k for k in keys if k.startswith("sample_malformed")]
    run_and_compare([str(drop / "sample_malformed.jsonl"), "--split-size", "4"], judges,
                    tmp_path, capsys, keys=part, name="out_part")
    # The default judge, every record in one batch.
    run_and_compare([str(drop / "sample_agent_runs.jsonl"), "--split-size", "100"], None,
                    tmp_path, capsys, keys=["sample_agent_runs01"], name="out_one")


@pytest.mark.slow
def test_streamed_exports_equal_the_whole_table_exports_on_a_batch_folder(
        project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    drop = sample_drop(project_root, tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVAL_PIPELINE_STORE", str(tmp_path / "store"))
    run_and_compare([str(drop), "--batch-folder"], None, tmp_path, capsys, batch_folder=True)


@pytest.mark.slow
def test_streamed_exports_equal_the_whole_table_exports_with_labels_and_an_llm_judge(
        corpora_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    shutil.copy(corpora_dir / "dataeva" / "demo02.jsonl", drop)
    lines = (corpora_dir / "agentprocessbench" / "hotpotqa.jsonl").read_text(
        "utf-8").splitlines()[:30]
    (drop / "hotpotqa.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVAL_PIPELINE_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("X_OPENAI_KEY", "sk-streamed-exports-0a1b2c")
    join_often(monkeypatch)
    server = FakeLLMServer("openai", score_of=lambda prompt: (len(prompt) % 11) / 10,
                           faults=FaultMix(rate=0.05, seed=7, kinds=("400",))).start()
    try:
        judges = tmp_path / "judges.yaml"
        judges.write_text(
            "judges:\n  - name: heuristic\n    provider: heuristic\n"
            "  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
            f"    base_url: {server.base_url}\n    api_key_env: X_OPENAI_KEY\n"
            "    repeats: 2\n    max_retries: 0\n    concurrency: 8\n", "utf-8")
        keys = run_and_compare([str(drop), "--split-size", "9"], judges, tmp_path, capsys)
    finally:
        server.stop()
    assert len(keys) >= 10
