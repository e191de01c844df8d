"""A run launched as the UI launches it, killed while judging (#10.2): the rerun finishes,
repeats no call whose reply was cached, and writes what an uninterrupted run writes.

The CLI's half is test_crash_resume.py. Here the run is Dagster's own: ``dagster job
execute`` on the project's code location (``eval_pipeline.definitions``, judges from
``$EVAL_PIPELINE_JUDGES``, files in ``$EVAL_PIPELINE_STORE``), over the batch partitions
the new-drop sensor would have registered, with the multiprocess executor the UI's runs
use (a process per step). The kill takes the whole process group, the run's process and
its step processes at once, as an OOM kill or a lost machine does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION
from eval_pipeline.judges.check import _PROMPT as CHECK_PROMPT
from eval_pipeline.local_run import ensure_dagster_home
from eval_pipeline.splitting import split_drop
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer
from eval_pipeline_tests.judges.helpers import write_one_judge_file

KEY_ENV = "UI_CRASH_TEST_KEY"
CONCURRENCY = 2
JUDGE_KEY = ("judgments", "gpt")


def _user_prompts(server: FakeLLMServer, start: int = 0) -> list[str]:
    """The judgment requests the server got: not the UI resource's one-token endpoint
    check, which every run launched from the UI location makes once per judge."""
    with server._lock:
        recorded = list(server.requests[start:])
    prompts = [r.body["messages"][-1]["content"] for r in recorded]
    return [p for p in prompts if p != CHECK_PROMPT]


def _prepare(project_root: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An instance and a store as the new-drop sensor leaves them: the drop split into
    batch files in the store, one dynamic partition per batch."""
    monkeypatch.setenv("DAGSTER_HOME", str(work / "home"))
    ensure_dagster_home()
    manifests = split_drop(project_root / "data" / "incoming" / "sample_agent_runs.jsonl",
                           work / "store" / "batches", split_size=10)
    keys = [m.partition_key for m in manifests]
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(BATCHES_PARTITION, keys)
    assert len(keys) > 1
    return keys


def _launch(project_root: Path, work: Path, judges: Path, keys: list[str], name: str
            ) -> subprocess.Popen[bytes]:
    """One run of ``evaluate_batch`` over every batch (a partition range, as a backfill
    from the UI makes it), in its own process group; output to files, never a pipe that
    could fill and stall the run."""
    env = {**os.environ, KEY_ENV: "sk-ui-crash-test", "PYTHONPATH": str(project_root),
           "DAGSTER_HOME": str(work / "home"), "EVAL_PIPELINE_STORE": str(work / "store"),
           "EVAL_PIPELINE_JUDGES": str(judges)}
    tags = {"dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1]}
    with (work / f"{name}.out").open("wb") as out, (work / f"{name}.err").open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "dagster", "job", "execute", "-m", "eval_pipeline.definitions",
             "-j", "evaluate_batch", "--tags", json.dumps(tags)],
            env=env, cwd=project_root, stdout=out, stderr=err, start_new_session=True)


def _finish(process: subprocess.Popen[bytes], work: Path, name: str) -> None:
    code = process.wait(timeout=900)
    assert code == 0, (work / f"{name}.err").read_text("utf-8", "replace")[-3000:]


def _table(store: Path, key: tuple[str, ...], keys: list[str]) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(store / "assets" / Path(*key) / f"{k}.parquet")
                      for k in keys], ignore_index=True)


def _judgments(store: Path, keys: list[str]) -> pd.DataFrame:
    """What a judgment decided (the fake server numbers its summaries by arrival, so those
    differ between any two runs)."""
    rows = _table(store, JUDGE_KEY, keys)
    return (rows[["trajectory_id", "clip_index", "evaluation_kind", "tool_type", "status",
                  "scores", "label"]]
            .sort_values(["trajectory_id", "clip_index", "evaluation_kind", "tool_type"])
            .reset_index(drop=True))


def _averaged(store: Path, keys: list[str]) -> pd.DataFrame:
    rows = _table(store, ("averaged_scores",), keys)
    return (rows[["trajectory_id", "clip_index", "evaluation_kind", "tool_type", "scores",
                  "n_judges"]]
            .sort_values(["trajectory_id", "clip_index", "evaluation_kind", "tool_type"])
            .reset_index(drop=True))


@pytest.mark.slow
def test_a_killed_ui_run_resumes_without_repeating_cached_calls(project_root, tmp_path,
                                                                monkeypatch):
    server = FakeLLMServer("openai", latency_s=0.05).start()
    try:
        judges = write_one_judge_file(tmp_path / "judges.yaml", server, KEY_ENV, CONCURRENCY)

        # An uninterrupted run on its own instance and store: what the outputs must be.
        clean = tmp_path / "clean"
        keys = _prepare(project_root, clean, monkeypatch)
        _finish(_launch(project_root, clean, judges, keys, "clean"), clean, "clean")
        total = len(_user_prompts(server))  # judgment requests of an uninterrupted run
        assert total > 100

        work = tmp_path / "crashed"
        assert _prepare(project_root, work, monkeypatch) == keys
        before = server.calls
        victim = _launch(project_root, work, judges, keys, "victim")
        deadline = time.monotonic() + 600
        while server.calls - before < total // 3:  # a third of the way through judging
            assert victim.poll() is None, (work / "victim.err").read_text("utf-8")[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.killpg(victim.pid, signal.SIGKILL)  # the run's process and its step processes
        victim.wait()
        killed_at = server.calls
        time.sleep(1.0)
        assert server.calls == killed_at, "a step process outlived the kill and kept calling"
        answered = set(_user_prompts(server, before))
        assert 0 < len(answered) < total
        # The judging step died before it wrote anything: no judgments table to read back,
        # complete or not (the upstream steps' Parquet is whole and stays).
        assert not (work / "store" / "assets" / Path(*JUDGE_KEY)).exists()
        assert all(len(pd.read_parquet(p)) >= 0
                   for p in (work / "store" / "assets").rglob("*.parquet"))

        after = server.calls
        _finish(_launch(project_root, work, judges, keys, "rerun"), work, "rerun")
        again = _user_prompts(server, after)
        # Only the calls whose replies never reached the cache may be asked again: those
        # holding a slot when the process died, at most CONCURRENCY (a reply is written
        # before its slot is given back, see test_crash_resume.py). Everything cached
        # before is not.
        repeated = answered & set(again)
        assert len(repeated) <= CONCURRENCY, len(repeated)
        assert len(answered) + len(again) - len(repeated) == total
        pd.testing.assert_frame_equal(_judgments(work / "store", keys),
                                      _judgments(clean / "store", keys))
        pd.testing.assert_frame_equal(_averaged(work / "store", keys),
                                      _averaged(clean / "store", keys))
        assert not list((work / "store").rglob(".*.tmp"))
        with dg.DagsterInstance.get() as instance:  # DAGSTER_HOME: the crashed instance
            runs = instance.get_runs()
            assert [r.status for r in runs[:1]] == [dg.DagsterRunStatus.SUCCESS]
            assert len(runs) == 2  # the killed one (left as it was) and the rerun
    finally:
        server.stop()
