"""The original tool's CLI flags, mapped onto this pipeline: parsing, the one-judge
shortcut, the statistics block, the progress decision, the batch-folder split. Fast: no
Dagster run (the end-to-end runs are the slow tests at the end)."""

from __future__ import annotations

import asyncio
import io
import json
import re

import pandas as pd
import pytest

from eval_pipeline import progress
from eval_pipeline.cli import build_parser, judges_from_args, main, preprocessing_statistics
from eval_pipeline.exports.run_figures import RunFigures
from eval_pipeline.judges.config import JudgeConfig, load_judges
from eval_pipeline.judges.heuristic import HeuristicJudge
from eval_pipeline.judges.runner import JudgeJob, run_job
from eval_pipeline.local_run import PREPROCESSING_NOTE, preprocessed_record
from eval_pipeline.splitting import MANIFEST_SUFFIX, find_batch, split_batch_folder
from eval_pipeline_tests.judges.conftest import make_tasks

KEY_LIKE = "sk-proj-Zq81mXc0aa91LLpq77wErTyUi0pPas"


@pytest.fixture(autouse=True)
def dagster_home(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))


def _judges(*flags: str) -> list[JudgeConfig]:
    return judges_from_args(build_parser().parse_args(["run", "in", "-o", "out", *flags]))


# -- the one-judge shortcut is a judges file entry -----------------------------------------

@pytest.mark.parametrize("flags, entry", [
    (["--provider", "deepseek"], "name: deepseek\n    provider: openai_compatible\n"
                                 "    preset: deepseek"),
    (["--provider", "google", "--model", "gemini-2.5-pro"],
     "name: google\n    provider: openai_compatible\n    preset: gemini\n"
     "    model: gemini-2.5-pro"),
    (["--provider", "openai", "--api-key-env", "MY_OPENAI", "--batch-size", "3",
      "--rate-limit", "2.0"],
     "name: openai\n    provider: openai\n    api_key_env: MY_OPENAI\n    concurrency: 3\n"
     "    requests_per_minute: 30.0"),
    (["--provider", "vllm", "--base-url", "http://gpu-box:8000/v1"],
     "name: vllm\n    provider: openai_compatible\n    preset: vllm\n"
     "    base_url: http://gpu-box:8000/v1"),
])
def test_the_provider_shortcut_equals_the_judges_file_entry(tmp_path, flags, entry):
    judges_file = tmp_path / "judges.yaml"
    judges_file.write_text(f"judges:\n  - {entry}\n", "utf-8")
    assert _judges(*flags) == load_judges(judges_file)


def test_rate_limit_is_the_originals_seconds_between_requests():
    # The original documents --rate-limit as the delay between API requests (seconds).
    assert _judges("--provider", "openai", "--rate-limit", "0.5")[0].requests_per_minute == 120
    assert _judges("--provider", "openai", "--rate-limit", "0")[0].requests_per_minute is None
    assert _judges("--provider", "openai", "--batch-size", "7")[0].concurrency == 7


@pytest.mark.parametrize("flags, message", [
    (["--provider", "nope"], "unknown provider"),
    (["--provider", "openai_compatible"], "base_url"),  # no preset: the URL is required
    (["--provider", "openai", "--api-key-env", KEY_LIKE], "api_key_env"),
    (["--batch-size", "2"], "add --provider"),
    (["--judges", "j.yaml", "--rate-limit", "1"], "judges file"),
])
def test_a_bad_shortcut_stops_the_run_in_one_line_without_the_value(
        tmp_path, capsys, flags, message):
    code = main(["run", str(tmp_path), "--output", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1
    assert KEY_LIKE not in err and "Traceback" not in err


@pytest.mark.parametrize("flags", [
    ["--api-key", KEY_LIKE],                        # keys never on the command line
    ["--judges", "j.yaml", "--provider", "openai"],  # one source of judges
    ["--quiet", "--verbose"],
    ["--batch-size", "0"],
    ["--rate-limit", "-1"],
])
def test_refused_flag_combinations_exit_2(tmp_path, capsys, flags):
    with pytest.raises(SystemExit) as exc:
        main(["run", str(tmp_path), "--output", str(tmp_path / "o"), *flags])
    assert exc.value.code == 2
    assert KEY_LIKE not in capsys.readouterr().err


# -- PREPROCESSING STATISTICS from the tables ----------------------------------------------

def test_statistics_block_counts_the_tables():
    tables = {
        "raw_trajectories": pd.DataFrame({"trajectory_id": list("abcdefg")}),
        "preprocessed_trajectories": pd.DataFrame({"trajectory_id": list("abcd"),
                                                   "format_corrected": [True, False, True,
                                                                        False]}),
        "preprocess_report": pd.DataFrame({"trajectory_id": list("efg"),
                                           "reason": ["frequency", "duplicates",
                                                      "duplicates"]}),
    }
    block = preprocessing_statistics(RunFigures.of_tables(tables)).render().splitlines()
    assert block[1] == "PREPROCESSING STATISTICS" and block[0] == block[2] == block[-1] == "=" * 50
    assert block[3:9] == ["Total samples: 7", "Valid samples: 4", "Removed (frequency): 1",
                          "Removed (duplicates): 2", "Format issues fixed: 2",
                          f"Success rate: {4 / 7:.1%}"]


def test_statistics_block_with_nothing_kept():
    stats = preprocessing_statistics(RunFigures.of_tables({
        "raw_trajectories": pd.DataFrame({"x": [1]}),
        "preprocessed_trajectories": pd.DataFrame(),
        "preprocess_report": pd.DataFrame({"reason": ["frequency"]})}))
    assert (stats.total, stats.valid, stats.removed_frequency, stats.success_rate) == (1, 0, 1,
                                                                                        0.0)


def test_preprocessed_record_is_the_originals_layout():
    row = {"timestamp": "t", "task_id": "a", "task_description": "d", "duration": float("nan"),
           "success": True, "final_result": "r", "raw_response": "<answer>x</answer>",
           "format_corrected": True, "batch": "b01", "steps": [],
           "preprocessing_metadata": json.dumps({"tool_call_count": 2, "has_duplicates": False,
                                                 "format_corrected": True,
                                                 "tag_analysis": {"answer": 1}})}
    record = preprocessed_record(row)
    assert list(record)[:7] == ["timestamp", "task_id", "task_description", "duration",
                                "success", "final_result", "raw_response"]
    assert record["duration"] is None and "steps" not in record and "batch" not in record
    assert record["preprocessing_notes"] == PREPROCESSING_NOTE
    assert record["preprocessing_metadata"]["tool_call_count"] == 2  # type: ignore[index]
    assert "preprocessing_notes" not in preprocessed_record({**row, "format_corrected": False})


# -- progress: bars only for a person at a terminal ----------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_only_on_a_terminal_and_never_under_quiet():
    assert progress.show_bars(quiet=False, stream=_Terminal())
    assert not progress.show_bars(quiet=True, stream=_Terminal())
    assert not progress.show_bars(quiet=False, stream=io.StringIO())
    assert isinstance(progress.reporter_for(False, _Terminal()), progress.BarReporter)
    assert type(progress.reporter_for(False, io.StringIO())) is progress.Reporter
    assert isinstance(progress.reporter_for(True, _Terminal()), progress.QuietReporter)


def _run_heuristic(reporter: progress.Reporter) -> int:
    with progress.using(reporter):
        callback = progress.current().judgment_callback()
        job = JudgeJob(HeuristicJudge(JudgeConfig(name="h")), progress=callback)
        rows = asyncio.run(run_job(job, make_tasks(trajectories=3, clips=3))).rows
        progress.current().batches(planned=2, done=2)
    return len(rows)


def test_the_bars_count_every_judgment_on_a_terminal():
    terminal = _Terminal()
    rows = _run_heuristic(progress.BarReporter(terminal))
    drawn = terminal.getvalue()
    assert re.search(rf"judgments: 100%.*\b{rows}/{rows}\b", drawn)
    assert re.search(r"batches: 100%.*\b2/2\b", drawn)


def test_nothing_is_drawn_into_a_pipe_or_under_quiet():
    for quiet in (False, True):
        pipe = io.StringIO()
        reporter = progress.reporter_for(quiet, pipe)
        assert reporter.judgment_callback() is None  # the runner counts nothing
        _run_heuristic(reporter)
        assert pipe.getvalue() == ""


def test_the_runner_callback_plans_then_finishes_every_row():
    seen: list[tuple[int, int]] = []
    job = JudgeJob(HeuristicJudge(JudgeConfig(name="h")),
                   progress=lambda done, planned: seen.append((done, planned)))
    rows = asyncio.run(run_job(job, make_tasks(trajectories=2, clips=4))).rows
    assert seen[0] == (0, len(rows))  # planned before the first row is done
    assert seen[1:] == [(1, 0)] * len(rows)


# -- --batch-folder: each file one batch, named after it ----------------------------------

def test_a_batch_folder_keeps_its_files_as_batches(tmp_path):
    folder = tmp_path / "predemo02"
    folder.mkdir()
    files = []
    for i, n in ((1, 12), (2, 3)):  # 12 lines: more than any split size, never cut
        f = folder / f"demo02{i:02d}.jsonl"
        f.write_text("\n".join(json.dumps({"task_id": f"{i}-{k}"}) for k in range(n)) + "\n\n",
                     "utf-8")
        files.append(f)
    batches = tmp_path / "batches"
    manifests = split_batch_folder(files, batches, "predemo02.batch_folder",
                                   {f: f.stem for f in files}, lambda _f: None)
    assert [(m.partition_key, len(m.lines or [])) for m in manifests] == [("demo0201", 12),
                                                                          ("demo0202", 3)]
    path, manifest = find_batch(batches, "demo0201")
    assert path.read_text("utf-8") == files[0].read_text("utf-8").rstrip("\n") + "\n"
    assert manifest.lines == list(range(1, 13))
    assert len(list((batches / "predemo02.batch_folder").glob(f"*{MANIFEST_SUFFIX}"))) == 2


# -- end to end through Dagster ------------------------------------------------------------

@pytest.mark.slow
def test_preprocess_only_materializes_ingest_and_writes_the_originals_file(
        project_root, tmp_path, capsys):
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    out, store = tmp_path / "out", tmp_path / "store"
    assert main(["run", str(drop), "--output", str(out), "--store", str(store),
                 "--preprocess-only"]) == 0
    printed = capsys.readouterr()
    kept = pd.read_parquet(out / "preprocessed_trajectories.parquet")
    removed = pd.read_parquet(out / "preprocess_report.parquet")
    raw = pd.read_parquet(out / "raw_trajectories.parquet")
    stats = preprocessing_statistics(RunFigures.of_tables({
        "raw_trajectories": raw, "preprocess_report": removed,
        "preprocessed_trajectories": kept}))
    assert stats.render() in printed.out and stats.total == len(kept) + len(removed) > 0
    lines = (out / "sample_agent_runs_preprocessed.jsonl").read_text("utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["task_id"] for r in records] == list(kept.sort_values(
        ["batch", "source_line"])["task_id"])
    assert sum("preprocessing_notes" in r for r in records) == stats.format_issues_fixed > 0
    # Only the ingest assets ran: nothing downstream in the store, no judge output.
    assert sorted(p.name for p in (store / "assets").iterdir()) == [
        "preprocess_report", "preprocessed_trajectories", "quarantine", "raw_trajectories"]
    assert not (out / "evaluated.jsonl").exists()
    # --output X.jsonl is that one file, as the original's --output data/preprocessed.jsonl.
    single = tmp_path / "clean.jsonl"
    assert main(["run", str(drop), "--output", str(single), "--store", str(store),
                 "--preprocess-only", "--quiet"]) == 0
    assert single.read_text("utf-8").splitlines() == lines
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_batch_folder_evaluates_each_file_as_its_batch_quietly(project_root, tmp_path,
                                                               capsys):
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    folder = tmp_path / "presample"
    folder.mkdir()
    records = [line for line in drop.read_text("utf-8").splitlines() if line.strip()]
    for i in range(0, len(records), 10):  # the original's split: presample01, 02, 03
        (folder / f"presample{i // 10 + 1:02d}.jsonl").write_text(
            "\n".join(records[i:i + 10]) + "\n", "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(folder), "--output", str(out), "--store", str(tmp_path / "s"),
                 "--batch-folder", "--provider", "heuristic", "--quiet"]) == 0
    printed = capsys.readouterr()
    assert printed.err == ""  # --quiet, and captured output is not a terminal anyway
    assert "PREPROCESSING STATISTICS" in printed.out
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    files = sorted(p.stem for p in folder.glob("*.jsonl"))
    assert sorted(summaries["batch"].unique()) == files
    for batch in files:
        eva = (out / f"{batch}_eva.jsonl").read_text("utf-8").splitlines()
        assert len(eva) == int((summaries["batch"] == batch).sum())
        assert all("evaluation_metadata" in json.loads(line) for line in eva)
