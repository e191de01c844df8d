"""The circuit breaker (stop, leave failed rows, resume from the cache) and the call limits."""

from __future__ import annotations

import time

from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.limits import CallLimiter
from eval_pipeline_tests.judges import fake_servers as fs
from eval_pipeline_tests.judges.conftest import make_tasks
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run


def test_breaker_stops_a_failing_provider_and_the_batch_resumes(openai_server, tmp_path):
    tasks = make_tasks(4, 3)
    cache = JudgeCache(tmp_path / "c.sqlite")
    # one at a time: two clips succeed, then the provider goes down
    openai_server.push(fs.OK, fs.OK, *[fs.status(503)] * 50)
    config = openai_config(openai_server, concurrency=1, max_retries=1)
    rows = run(config, tasks, cache=cache, breaker_threshold=3)
    # 3 failed calls x 2 attempts each, then no more hammering
    assert openai_server.calls == 2 + 3 * 2
    # every clip has a row: 2 ok, 3 that failed on the provider, the rest not tried
    assert len(rows) == 12 and sum(r.status == "ok" for r in rows) == 2
    failed = [r for r in rows if r.status == "failed"]
    assert len(failed) == 10 and all(r.scores == "{}" for r in failed)
    assert sum(r.attempts == 2 and "after 2 attempts" in (r.error or "") for r in failed) == 3
    not_tried = [r for r in failed if r.attempts == 0]
    assert len(not_tried) == 7
    assert all((r.error or "").startswith("circuit breaker open") and "HTTP 503" in r.error
               for r in not_tried)
    assert len(cache) == 2

    openai_server.script.clear()  # the provider recovers
    before = openai_server.calls
    rows = run(config, tasks, cache=cache)
    assert all(r.status == "ok" for r in rows) and sum(r.cached for r in rows) == 2
    assert openai_server.calls - before == len(tasks) - 2
    cache.close()


def test_breaker_bounds_calls_under_concurrency(anthropic_server):
    anthropic_server.push(*[fs.status(500)] * 200)
    rows = run(anthropic_config(anthropic_server, concurrency=4, max_retries=1),
               make_tasks(10, 3), breaker_threshold=3)
    assert len(rows) == 30 and all(r.status == "failed" for r in rows)
    # at most threshold + (concurrency - 1) calls were in progress, 2 attempts each
    assert anthropic_server.calls <= (3 + 3) * 2


def test_auth_failure_opens_the_breaker_at_once(openai_server, tasks):
    openai_server.push(*[fs.status(401)] * 10)
    rows = run(openai_config(openai_server, concurrency=1), tasks)
    assert openai_server.calls == 1
    assert all(r.status == "failed" and "HTTP 401" in (r.error or "") for r in rows)
    assert sum("circuit breaker open" in (r.error or "") for r in rows) == len(tasks) - 1


def test_rate_limiting_alone_does_not_open_the_breaker(openai_server, tasks):
    openai_server.push(*[fs.status(429)] * 6)
    rows = run(openai_config(openai_server, concurrency=1, max_retries=8), tasks)
    assert all(r.status == "ok" for r in rows)


def test_concurrency_bounds_requests_in_flight(openai_server):
    openai_server.push(*[fs.sleep(0.15)] * 8)
    rows = run(openai_config(openai_server, concurrency=2), make_tasks(8, 1))
    assert all(r.status == "ok" for r in rows)
    assert openai_server.max_in_flight == 2


def test_requests_per_period_are_paced():
    import asyncio

    async def go() -> float:
        limiter = CallLimiter(concurrency=10, requests_per_minute=5, period_s=0.5)
        start = time.monotonic()

        async def one() -> None:
            async with limiter.slot():
                pass

        await asyncio.gather(*(one() for _ in range(10)))
        return time.monotonic() - start

    # a burst of 5, then 5 more at 10/s: about 0.5 s
    assert asyncio.run(go()) >= 0.4


def test_tokens_per_period_are_paced():
    import asyncio

    async def go() -> float:
        limiter = CallLimiter(concurrency=10, tokens_per_minute=1000, period_s=0.5)
        start = time.monotonic()

        async def one() -> None:
            async with limiter.slot(estimated_tokens=500):
                pass

        await asyncio.gather(*(one() for _ in range(4)))
        return time.monotonic() - start

    assert asyncio.run(go()) >= 0.2
