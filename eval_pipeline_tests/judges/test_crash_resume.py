"""A judge killed while judging: the rerun finishes, repeats no call whose reply was cached
(at most the judge's concurrency of calls, those in flight, are asked again), and writes
what an uninterrupted run writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.judges.conftest import SECRET, make_tasks
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer
from eval_pipeline_tests.judges.helpers import run, write_one_judge_file

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
        # Only the calls whose replies never reached the cache may be asked again: those
        # holding a slot when the process died, at most CONCURRENCY (a reply is written
        # before its slot is free for the next call). Everything cached before is not.
        repeated = answered & set(again)
        assert len(repeated) <= CONCURRENCY, len(repeated)
        assert len(answered) + len(again) - len(repeated) == total
        pd.testing.assert_frame_equal(_scores(work / "out"), _scores(clean / "out"))
        assert not [p for p in (work / "store").rglob(".*.tmp")]
    finally:
        server.stop()


# The kill test below: a judge of this concurrency, over this many trajectories (11 calls
# each), killed once the server has answered KILL_AT calls, with every cache write slowed.
WORKER_CONCURRENCY = 4
WORKER_TRAJECTORIES = 12
KILL_AT = 40
WRITE_DELAY_S = 0.1


def test_a_killed_judge_repeats_at_most_its_concurrency_of_calls(tmp_path):
    """SIGKILL a judging process while its cache writes are slow (a busy disk, another
    process holding the lock): the resumed run asks again only the calls that held a slot,
    at most the concurrency, and every other answered call was in the cache.

    Before the write moved inside the slot, a call gave its slot back and then wrote, so
    with slow writes the next calls went out while earlier replies waited to be written,
    and a crash lost every one of those (here about 30 of the 40 answered)."""
    server = FakeLLMServer("openai", latency_s=0.02).start()
    try:
        path = tmp_path / "cache.sqlite"
        victim = subprocess.Popen(
            [sys.executable, "-m", "eval_pipeline_tests.judges.cache_worker",
             server.base_url, str(path), "0", str(WORKER_TRAJECTORIES),
             str(WORKER_CONCURRENCY), str(WRITE_DELAY_S)],
            env={**os.environ, "FAKE_OPENAI_KEY": SECRET},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while server.calls < KILL_AT:
            assert victim.poll() is None, victim.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.002)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        time.sleep(0.2)  # a request already on the wire is recorded as answered too
        answered = Counter(_user_prompts(server))
        assert max(answered.values()) == 1
        cache = JudgeCache(path)
        cached = len(cache)

        after = server.calls
        config = JudgeConfig(name="gpt", provider="openai", model="gpt-4.1-mini",
                             base_url=server.base_url, api_key_env="FAKE_OPENAI_KEY",
                             concurrency=WORKER_CONCURRENCY)
        rows = run(config, make_tasks(WORKER_TRAJECTORIES, 3), cache=cache)
        cache.close()
        assert len(rows) == WORKER_TRAJECTORIES * 11
        assert {r.status for r in rows} == {"ok"}
        again = _user_prompts(server, after)
        assert len(set(again)) == len(again)
        repeated = sum(prompt in answered for prompt in again)
        # every answered call is either in the cache or asked again, and at most the
        # concurrency of them are asked again
        assert cached + repeated == len(answered), (cached, repeated, len(answered))
        assert repeated <= WORKER_CONCURRENCY, repeated
        assert sum(r.cached for r in rows) == cached
    finally:
        server.stop()
