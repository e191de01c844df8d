"""A CLI run killed while judging: the rerun finishes, repeats no call whose reply was
cached, and writes what an uninterrupted run writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline_tests.judges.fake_servers import FakeLLMServer
from eval_pipeline_tests.judges.helpers import write_one_judge_file

KEY_ENV = "CRASH_TEST_KEY"
CONCURRENCY = 2


def _user_prompts(server: FakeLLMServer, start: int = 0) -> list[str]:
    with server._lock:
        recorded = list(server.requests[start:])
    return [r.body["messages"][-1]["content"] for r in recorded]


def _cli(project_root: Path, work: Path, judges: Path, out: str) -> subprocess.Popen:
    env = {**os.environ, KEY_ENV: "sk-crash-test", "PYTHONPATH": str(project_root),
           "DAGSTER_HOME": str(work / "home"), "EVAL_PIPELINE_STORE": str(work / "store")}
    return subprocess.Popen(
        [sys.executable, "-m", "eval_pipeline.cli", "run",
         str(project_root / "data" / "incoming" / "sample_agent_runs.jsonl"),
         "--output", str(work / out), "--judges", str(judges)],
        env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _scores(out: Path) -> pd.DataFrame:
    rows = pd.read_parquet(out / "judgments__gpt.parquet")
    return (rows[["trajectory_id", "clip_index", "evaluation_kind", "status", "scores",
                  "label", "tool_type"]].sort_values(["trajectory_id", "clip_index",
                                                      "evaluation_kind", "tool_type"])
            .reset_index(drop=True))


@pytest.mark.slow
def test_a_killed_run_resumes_without_repeating_cached_calls(project_root, tmp_path):
    server = FakeLLMServer("openai", latency_s=0.05).start()
    try:
        judges = write_one_judge_file(tmp_path / "judges.yaml", server, KEY_ENV, CONCURRENCY)

        # An uninterrupted run in its own store and instance: what the outputs must be.
        clean = tmp_path / "clean"
        clean.mkdir()
        done = _cli(project_root, clean, judges, "out")
        _, err = done.communicate(timeout=600)
        assert done.returncode == 0, err
        total = server.calls
        assert total > 100

        work = tmp_path / "crashed"
        work.mkdir()
        before = server.calls
        victim = _cli(project_root, work, judges, "out")
        deadline = time.monotonic() + 300
        while server.calls - before < total // 3:  # a third of the way through judging
            assert victim.poll() is None, victim.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        answered = set(_user_prompts(server, before))
        assert 0 < len(answered) < total

        after = server.calls
        rerun = _cli(project_root, work, judges, "out")
        _, err = rerun.communicate(timeout=600)
        assert rerun.returncode == 0, err
        again = _user_prompts(server, after)
        # Only the calls whose replies never reached the cache may be asked again: those in
        # flight when the process died (at most CONCURRENCY), and those answered in the
        # moment before, whose slot was already free for the next call while their reply was
        # being written (at most as many again: a category assessment runs beside its
        # chain's next clip). Everything cached before is not.
        repeated = answered & set(again)
        assert len(repeated) <= 2 * CONCURRENCY, len(repeated)
        assert len(answered) + len(again) - len(repeated) == total
        pd.testing.assert_frame_equal(_scores(work / "out"), _scores(clean / "out"))
        assert not [p for p in (work / "store").rglob(".*.tmp")]
    finally:
        server.stop()
