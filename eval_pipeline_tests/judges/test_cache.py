"""The judge cache: reruns cost no call, changes re-call only what changed, processes share it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from eval_pipeline.judges import requests
from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.runner import summarize_rows
from eval_pipeline_tests.judges import fake_servers as fs
from eval_pipeline_tests.judges.conftest import SECRET
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run, scores_of


@pytest.fixture
def cache(tmp_path):
    c = JudgeCache(tmp_path / "judge_cache.sqlite")
    yield c
    c.close()


def test_rerun_makes_no_call_and_flags_rows_cached(openai_server, tasks, cache):
    first = run(openai_config(openai_server), tasks, cache=cache)
    assert openai_server.calls == len(tasks) and not any(r.cached for r in first)

    second = run(openai_config(openai_server), tasks, cache=cache)
    assert openai_server.calls == len(tasks), "a rerun of unchanged work must not call"
    assert all(r.cached and r.status == "ok" and r.cost_usd == 0.0 for r in second)
    assert [scores_of(r) for r in second] == [scores_of(r) for r in first]
    assert [r.previous_context for r in second] == [r.previous_context for r in first]
    assert summarize_rows(second).cached == len(tasks)
    assert summarize_rows(second).calls == 0


def test_failures_are_not_cached_so_a_rerun_retries_only_them(openai_server, tasks, cache):
    # one at a time, longest remaining chain first: t0/0, t1/0, t0/1, t1/1, t0/2 (fails), t1/2
    openai_server.push(fs.OK, fs.OK, fs.OK, fs.OK, fs.status(500))
    rows = run(openai_config(openai_server, max_retries=0, concurrency=1), tasks, cache=cache,
               breaker_threshold=99)
    assert [(r.trajectory_id, r.clip_index) for r in rows if r.status == "failed"] == [("t0", 2)]
    assert len(cache) == len(tasks) - 1

    rerun = run(openai_config(openai_server), tasks, cache=cache)
    assert all(r.status == "ok" for r in rerun)
    assert openai_server.calls == len(tasks) + 1, "only the failed clip is called again"
    assert [r.cached for r in rerun].count(False) == 1


def test_model_change_recalls_only_that_judge(openai_server, anthropic_server, tasks, cache):
    run(openai_config(openai_server), tasks, cache=cache)
    run(anthropic_config(anthropic_server), tasks, cache=cache)
    assert (openai_server.calls, anthropic_server.calls) == (len(tasks), len(tasks))

    run(openai_config(openai_server, model="gpt-4.1"), tasks, cache=cache)
    run(anthropic_config(anthropic_server), tasks, cache=cache)
    assert openai_server.calls == 2 * len(tasks)
    assert anthropic_server.calls == len(tasks)


def test_parameter_and_template_changes_invalidate(openai_server, tasks, cache, monkeypatch):
    run(openai_config(openai_server), tasks, cache=cache)
    run(openai_config(openai_server, temperature=0.7), tasks, cache=cache)
    assert openai_server.calls == 2 * len(tasks)

    monkeypatch.setattr(requests, "templates_version", lambda: "edited-template")
    rows = run(openai_config(openai_server), tasks, cache=cache)
    assert openai_server.calls == 3 * len(tasks)
    assert {r.template_version for r in rows} == {"edited-template"}


def test_limits_and_prices_do_not_invalidate(openai_server, tasks, cache):
    run(openai_config(openai_server), tasks, cache=cache)
    run(openai_config(openai_server, concurrency=1, requests_per_minute=600,
                      input_price_per_mtok=9.0, timeout_s=9, max_retries=1),
        tasks, cache=cache)
    assert openai_server.calls == len(tasks)


def _worker(openai_server, path, first: int, count: int) -> subprocess.Popen:
    env = {**os.environ, "FAKE_OPENAI_KEY": SECRET}
    return subprocess.Popen(
        [sys.executable, "-m", "eval_pipeline_tests.judges.cache_worker",
         openai_server.base_url, str(path), str(first), str(count)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _summary(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_cache_is_shared_across_processes(openai_server, tmp_path):
    path = tmp_path / "shared.sqlite"
    # two processes writing the same cache at the same time, on different trajectories
    a, b = _worker(openai_server, path, 0, 4), _worker(openai_server, path, 4, 4)
    first_a, first_b = _summary(a), _summary(b)
    # per trajectory (default evaluations): 3 rubric + 3 thought_to_tool + 1 sequence
    # + 3 category assessments (each clip its own tool type) + 1 trajectory assessment
    assert first_a["ok"] == first_b["ok"] == 4 * 11
    assert openai_server.calls == 88

    # a third process reruns everything: all hits, no call (the assessments' prompts,
    # rendered from the cached clip rows, are the same text)
    again = _summary(_worker(openai_server, path, 0, 8))
    assert again["cached"] == 88 and again["calls"] == 0
    assert openai_server.calls == 88
    shared = JudgeCache(path)
    assert len(shared) == 88
    shared.close()


def test_many_openers_of_a_fresh_cache_all_succeed(tmp_path):
    # CI saw "database is locked" when two workers created the same cache at once: SQLite
    # refuses a concurrent switch to WAL without waiting. Six connections race on a fresh file
    # per round; before the fix about 1 round in 12 failed.
    failures: list[Exception] = []
    for round_ in range(100):
        path = tmp_path / f"race{round_}.sqlite"
        barrier = threading.Barrier(6)

        def open_and_close(path: Path, barrier: threading.Barrier) -> None:
            barrier.wait()
            try:
                JudgeCache(path).close()
            except Exception as exc:  # collected and asserted below
                failures.append(exc)

        threads = [threading.Thread(target=open_and_close, args=(path, barrier))
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []


_WRITER = """
import sys
from eval_pipeline.judges.base import JudgeReply
from eval_pipeline.judges.cache import JudgeCache
cache = JudgeCache(sys.argv[1])
reply = JudgeReply(scores={"m": 0.5}, reasoning="r" * 2000, summary="s", raw_response="{}")
i = 0
while True:
    cache.put(f"key{i}", "gpt", "model", reply)
    i += 1
    if i == 50:
        print("writing", flush=True)
"""


def test_the_cache_survives_a_kill_during_writes(tmp_path):
    import signal

    path = tmp_path / "cache.sqlite"
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGKILL)  # mid-put, most likely
    writer.wait()
    cache = JudgeCache(path)
    try:
        stored = len(cache)
        assert stored >= 50
        # every committed reply reads back whole; the next write works
        assert all(cache.get(f"key{i}") is not None for i in range(stored))
        cache.put("after", "gpt", "model", cache.get("key0"))
        assert cache.get("after") == cache.get("key0")
    finally:
        cache.close()
