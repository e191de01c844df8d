"""Batch mode against the fake servers' batch endpoints, through the real SDKs (#18).

Each test drives :func:`advance` the way the orchestration does (call, the run ends, call
again once the batch has ended), with a fresh judge client each time, as a new Dagster run
or process has.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_pipeline.judges import make_judge
from eval_pipeline.judges._common import estimate_tokens
from eval_pipeline.judges.batch.engine import BatchRun, advance, poll
from eval_pipeline.judges.batch.ledger import BatchLedger
from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.config import JudgeConfig, JudgesFileError, parse_judges
from eval_pipeline.judges.estimate import estimate_cost
from eval_pipeline.judges.repeats import mean_per_clip_std
from eval_pipeline.judges.requests import build_request
from eval_pipeline.judges.runner import ClipTask
from eval_pipeline.rubrics import ALL_EVALUATIONS
from eval_pipeline_tests.judges.conftest import SECRET, make_tasks
from eval_pipeline_tests.judges.fake_batches import FakeBatches
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer, status, text
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run

KINDS = ["openai", "anthropic"]


@pytest.fixture(params=KINDS)
def fake(request) -> Iterator[tuple[FakeLLMServer, FakeBatches]]:
    server = FakeLLMServer(request.param).start()
    yield server, FakeBatches(server, delay_s=0.1)
    server.stop()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[BatchLedger, JudgeCache]]:
    ledger, cache = BatchLedger(tmp_path / "ledger.sqlite"), JudgeCache(tmp_path / "c.sqlite")
    yield ledger, cache
    ledger.close()
    cache.close()


def _config(server: FakeLLMServer, **overrides) -> JudgeConfig:
    make = openai_config if server.kind == "openai" else anthropic_config
    return make(server, **{"mode": "batch", **overrides})


def _step(config: JudgeConfig, tasks: list[ClipTask], ledger: BatchLedger,
          cache: JudgeCache | None, partitions: tuple[str, ...] = ("b1",)) -> BatchRun:
    async def go() -> BatchRun:
        judge = make_judge(config, SECRET)
        try:
            return await advance(config, judge, tasks, partitions, ledger, cache)
        finally:
            await judge.aclose()
    return asyncio.run(go())


def _until_done(config, tasks, ledger, cache, fake_batches: FakeBatches, limit: int = 12
                ) -> tuple[BatchRun, int]:
    """Advance until done; (the result, how many calls it took)."""
    for calls in range(1, limit + 1):
        state = _step(config, tasks, ledger, cache)
        if state.state == "done":
            return state, calls
        time.sleep(fake_batches.delay_s + 0.05)
    raise AssertionError(f"not done after {limit} calls: {state}")


def test_whole_run_in_waves_same_table_as_live_at_half_the_price(fake, stores, tmp_path):
    server, batches = fake
    ledger, cache = stores
    tasks = make_tasks(trajectories=3, clips=4)
    config = _config(server, evaluations=list(ALL_EVALUATIONS))
    state, calls = _until_done(config, tasks, ledger, cache, batches)

    # Full chain: wave k holds clip k of every trajectory (ReAct requests in wave 1), then
    # a wave of category assessments (3 categories each) and one of trajectory assessments.
    assert state.waves == batches.created == 6 and calls == 7
    assert state.chain == "full (6 waves)"
    assert [len(b.lines) for b in batches.batches.values()] == [3 + 3 * 3 + 3, 3, 3, 3, 9, 3]
    rows = state.rows
    assert all(r.status == "ok" and not r.cached and r.attempts == 1 for r in rows)
    # The same judgments, in the same order, as a live run of the same judge.
    live_server = FakeLLMServer(server.kind).start()
    try:
        live = run(_config(live_server, mode="live", evaluations=list(ALL_EVALUATIONS)), tasks)
    finally:
        live_server.stop()
    assert [(r.trajectory_id, r.clip_index, r.evaluation_kind) for r in rows] == \
        [(r.trajectory_id, r.clip_index, r.evaluation_kind) for r in live]
    # Each clip's prompt carries the summaries the earlier clips' batch answers gave.
    rubric = [r for r in rows if r.evaluation_kind == "clip_rubric"]
    for row in rubric:
        earlier = [r.summary for r in rubric
                   if r.trajectory_id == row.trajectory_id and r.clip_index < row.clip_index]
        assert row.previous_context == " ".join(f"[Previous: {s}]" for s in earlier)
    # Cost at the batch price: half of what the live rows cost for the same tokens.
    assert sum(r.cost_usd for r in rows) == pytest.approx(sum(r.cost_usd for r in live) / 2)
    assert state.cost_usd == pytest.approx(sum(r.cost_usd for r in rows))
    # Every valid answer is in the cache: the second run sends no batch, all hits.
    again, calls = _until_done(config, tasks, ledger, cache, batches)
    assert calls == 1 and batches.created == 6
    assert all(r.cached and r.cost_usd == 0 for r in again.rows)
    assert [json.loads(r.scores) for r in again.rows] == [json.loads(r.scores) for r in rows]


def test_errored_lines_fail_their_rows_and_provider_faults_go_again(fake, stores):
    server, batches = fake
    ledger, cache = stores
    tasks = make_tasks(trajectories=3, clips=1)
    config = _config(server, max_retries=2)
    # Lines of the first batch: a refused request (400, final), a provider fault (500,
    # sent again), a valid answer.
    server.push(status(400, message="bad request for this line"), status(500))
    state, _ = _until_done(config, tasks, ledger, cache, batches)
    by_trajectory = {r.trajectory_id: r for r in state.rows}
    refused = by_trajectory["t0"]
    assert refused.status == "failed" and refused.scores == "{}" and refused.label is None
    assert "HTTP 400" in refused.error or "invalid_request_error" in refused.error
    assert "bad request for this line" in refused.error
    assert by_trajectory["t1"].status == "ok" and by_trajectory["t2"].status == "ok"
    # Only the faulted line went out again, in a second batch.
    assert batches.created == 2 and len(next(reversed(batches.batches.values())).lines) == 1
    # Nothing failed is cached: the 400 judgment is asked again by the next run.
    assert cache.get(ledger.lines(batch_id="batch_0001" if server.kind == "openai"
                                  else "msgbatch_0001")[0].cache_key) is None


def test_a_fault_that_persists_fails_after_max_retries(fake, stores):
    server, batches = fake
    ledger, cache = stores
    config = _config(server, max_retries=1)
    server.push(status(500), status(500))
    state, _ = _until_done(config, make_tasks(1, 1), ledger, cache, batches)
    (row,) = state.rows
    assert row.status == "failed" and row.scores == "{}" and "500" in (row.error or "")
    assert batches.created == 2  # the first try and one resubmission


def test_expired_batch_resubmits_only_the_lines_without_a_result(fake, stores):
    server, batches = fake
    ledger, cache = stores
    tasks = make_tasks(trajectories=5, clips=1)
    config = _config(server)
    batches.expire_next = 2  # the first batch answers two lines, then expires
    state, _ = _until_done(config, tasks, ledger, cache, batches)
    assert all(r.status == "ok" for r in state.rows) and len(state.rows) == 5
    sizes = [len(b.lines) for b in batches.batches.values()]
    assert sizes == [5, 3] and batches.lines == 5  # each question answered (paid) once


def test_unreadable_answer_is_repaired_in_the_next_wave(fake, stores):
    server, batches = fake
    ledger, cache = stores
    config = _config(server)
    server.push(text("I cannot grade this, sorry."))
    state, _ = _until_done(config, make_tasks(1, 1), ledger, cache, batches)
    (row,) = state.rows
    assert row.status == "ok" and row.repaired
    repair = next(reversed(batches.batches.values())).lines[0]["body"]
    user = next(m["content"] for m in repair["messages"] if m["role"] == "user")
    assert "Your previous reply could not be used" in user and "I cannot grade" in user


def test_a_killed_run_picks_the_same_batch_up_again(fake, tmp_path):
    server, batches = fake
    tasks = make_tasks(trajectories=2, clips=1)
    config = _config(server)
    batches.hold = True

    def process(step):  # a fresh process: its own ledger and cache connections
        ledger, cache = BatchLedger(tmp_path / "l.sqlite"), JudgeCache(tmp_path / "c.sqlite")
        try:
            return step(ledger, cache)
        finally:
            ledger.close()
            cache.close()

    first = process(lambda ledger, cache: _step(config, tasks, ledger, cache))
    assert first.state == "pending" and first.in_flight == [first.batch_ids[0]]
    # The process is gone; the next one finds the same batch: nothing resubmitted.
    again = process(lambda ledger, cache: _step(config, tasks, ledger, cache))
    assert again.state == "pending" and again.in_flight == first.in_flight
    assert again.job == first.job and batches.created == 1
    batches.release()
    time.sleep(batches.delay_s + 0.05)

    def sensor_poll(ledger, cache):  # what batch_results_sensor asks
        async def go():
            judge = make_judge(config, SECRET)
            try:
                return await poll(judge, ledger)
            finally:
                await judge.aclose()
        return asyncio.run(go())

    assert list(process(sensor_poll)) == [first.job]
    done = process(lambda ledger, cache: _step(config, tasks, ledger, cache))
    assert done.state == "done" and batches.created == 1
    assert all(r.status == "ok" for r in done.rows) and batches.lines == 2


def test_budget_caps_what_is_submitted_and_skips_the_rest(fake, stores):
    server, batches = fake
    ledger, cache = stores
    tasks = make_tasks(4, 1)
    # The worst case of one request (its estimated input, all of max_tokens out, at $1 a
    # million tokens both ways); a budget for two and a half of them.
    worst = (estimate_tokens(*(lambda r: (r.system_prompt, r.user_prompt))(
        build_request(tasks[0], ""))) + 500) / 1e6
    config = _config(server, max_tokens=500, budget_usd=round(2.5 * worst, 8),
                     input_price_per_mtok=1.0, output_price_per_mtok=1.0)
    state, _ = _until_done(config, tasks, ledger, cache, batches)
    ok = [r for r in state.rows if r.status == "ok"]
    skipped = [r for r in state.rows if r.status == "skipped"]
    assert len(ok) == 2 and len(skipped) == 2
    assert all(r.scores == "{}" and "budget cap reached" in (r.error or "") for r in skipped)
    assert batches.lines == len(ok)  # the skipped requests were never sent


def test_chain_off_sends_everything_in_one_wave(fake, stores):
    server, batches = fake
    ledger, cache = stores
    config = _config(server, batch_waves=1)
    state, calls = _until_done(config, make_tasks(2, 4), ledger, cache, batches)
    assert batches.created == 1 and calls == 2 and state.chain == "off (1 wave)"
    assert all(r.previous_context == "" for r in state.rows)


def test_batch_mode_is_refused_where_it_cannot_work():
    with pytest.raises(JudgesFileError, match="heuristic judge has no batch API"):
        parse_judges({"judges": [{"name": "h", "mode": "batch"}]})
    with pytest.raises(JudgesFileError, match="mode"):
        parse_judges({"judges": [{"name": "g", "provider": "openai", "mode": "async"}]})


def test_dry_run_shows_live_and_batch_cost_side_by_side():
    config = JudgeConfig(name="gpt", provider="openai", model="gpt-4.1-mini")
    claude = JudgeConfig(name="claude", provider="anthropic", mode="batch")
    estimate = estimate_cost(make_tasks(2, 3), [config, claude])
    for judge in estimate.judges:
        assert judge.est_batch_cost_usd == pytest.approx(judge.est_cost_usd / 2)
    # 3 clips in a chain, then a wave of category and one of trajectory assessments
    assert estimate.judges[1].mode == "batch" and estimate.judges[1].waves == 3 + 2
    table = estimate.to_table()
    assert "batch cost" in table and "mode" in table


# What a provider says when a whole batch fails: OpenAI's batch ``errors`` (here its
# enqueued-token limit), Anthropic's per-line error (its batches end, they never fail).
WHOLE_BATCH_FAILURE = {
    "openai": ("token_limit_exceeded", "Enqueued token limit reached for gpt-4.1-mini in "
               "organization org-fake. Limit: 90,000 enqueued tokens."),
    "anthropic": ("invalid_request_error", "requests: the batch exceeds the workspace's "
                  "batch limit"),
}


def _rerun_resubmits(config, tasks, ledger, cache, batches, created: int) -> None:
    """The next run of the same work submits every judgment again (nothing failed was
    cached, and the finished job is closed) and gets the server's answers."""
    again, _ = _until_done(config, tasks, ledger, cache, batches)
    assert batches.created == created + 1
    assert len(next(reversed(batches.batches.values())).lines) == len(tasks)
    assert all(r.status == "ok" and not r.cached for r in again.rows)
    assert {v for r in again.rows for v in json.loads(r.scores).values()} == {0.8}


def test_a_batch_that_fails_as_a_whole_fails_every_row_with_the_providers_error(
        fake, stores):
    server, batches = fake
    ledger, cache = stores
    tasks = make_tasks(trajectories=3, clips=1)
    config = _config(server, max_retries=2)
    code, message = WHOLE_BATCH_FAILURE[server.kind]
    batches.fail_next = (code, message)
    state, _ = _until_done(config, tasks, ledger, cache, batches)
    assert state.state == "done" and len(state.rows) == len(tasks)
    # Every row of the batch failed, with the provider's reason; no score, no label, no
    # cost (nothing was answered), and a refused batch is not sent again in this job.
    for row in state.rows:
        assert row.status == "failed" and not row.success
        assert row.scores == "{}" and row.label is None and row.summary == ""
        assert code in (row.error or "") and message in (row.error or "")
        assert row.cost_usd == 0 and row.tokens_in == row.tokens_out == 0
    assert batches.created == 1 and batches.lines == 0 and len(cache) == 0
    assert state.errored == len(tasks) and state.answered == 0
    _rerun_resubmits(config, tasks, ledger, cache, batches, created=1)


def test_a_batch_that_expires_whole_fails_every_row_once_its_retries_are_spent(
        fake, stores):
    server, batches = fake
    ledger, cache = stores
    tasks = make_tasks(trajectories=3, clips=1)
    config = _config(server, max_retries=0)  # an expired line is not sent again
    batches.expire_next = 0  # the batch expires before it answers a line
    state, _ = _until_done(config, tasks, ledger, cache, batches)
    assert state.state == "done" and len(state.rows) == len(tasks)
    expired = ("batch_expired: This request was expired" if server.kind == "openai"
               else "request expired before it was processed")
    for row in state.rows:
        assert row.status == "failed" and row.scores == "{}" and row.label is None
        assert expired in (row.error or ""), row.error
        assert row.cost_usd == 0
    assert batches.created == 1 and batches.lines == 0 and len(cache) == 0
    _rerun_resubmits(config, tasks, ledger, cache, batches, created=1)


def test_repeats_go_out_as_one_line_each_in_the_same_waves_and_combine_as_live(fake, stores):
    """``repeats: 3`` in batch mode: each judgment is three lines of the same wave (the same
    body, distinct custom_ids), its row combines their answers as live mode does, and the
    answers are the live repeats' cache entries, so a live run with the same repeats makes
    no call."""
    server, batches = fake
    ledger, cache = stores
    given = itertools.cycle([0.2, 0.8, 0.5])  # each answered line's rubric scores, in turn
    server.score_of = lambda prompt: next(given)
    tasks = make_tasks(trajectories=2, clips=2)
    config = _config(server, evaluations=list(ALL_EVALUATIONS), repeats=3)
    parse_judges({"judges": [config.model_dump()]})  # accepted in the judges file
    state, _ = _until_done(config, tasks, ledger, cache, batches)

    once = _config(server, evaluations=list(ALL_EVALUATIONS))
    assert state.waves == batches.created == 4  # as asking once: 2 clips + 2 assessments
    judgments = len(state.rows)
    assert judgments == 2 * (2 + 2 + 1 + 2 + 1)  # rubric, thought_to_tool, sequence, cat, traj
    assert batches.lines == state.lines == 3 * judgments
    for batch in batches.batches.values():
        ids = [line["custom_id"] for line in batch.lines]
        assert len(set(ids)) == len(ids)
        bodies = Counter(json.dumps(line["body"], sort_keys=True) for line in batch.lines)
        assert set(bodies.values()) == {3}  # every body three times
    scored = [r for r in state.rows if r.evaluation_kind in
              ("clip_rubric", "category_assessment", "trajectory_assessment")]
    assert scored and all(r.status == "ok" and r.repeats_ok == 3 for r in state.rows)
    for row in scored:  # each judgment's three lines answered 0.2, 0.8 and 0.5 in turn
        assert list(json.loads(row.scores).values()) == \
            pytest.approx([0.5] * len(json.loads(row.scores)))
        std = list(json.loads(row.score_std).values())
        assert std == pytest.approx([0.244949] * len(std), abs=1e-6) and std
        assert row.straddles
    assert mean_per_clip_std(state.rows) is not None
    # The chain carries repeat 0's summary, as live: clip 1's prompt has clip 0's.
    rubric = {(r.trajectory_id, r.clip_index): r for r in state.rows
              if r.evaluation_kind == "clip_rubric"}
    for trajectory in ("t0", "t1"):
        assert rubric[(trajectory, 1)].previous_context == \
            f"[Previous: {rubric[(trajectory, 0)].summary}]"
    # Three answers paid per judgment, at the batch price.
    single, _ = _until_done(once, tasks, BatchLedger(ledger.path.with_name("l2.sqlite")),
                            None, batches)
    assert sum(r.cost_usd for r in state.rows) == \
        pytest.approx(3 * sum(r.cost_usd for r in single.rows))

    # A live run with the same repeats finds every repeat in the cache: no call.
    calls = server.calls
    live = run(_config(server, mode="live", evaluations=list(ALL_EVALUATIONS), repeats=3),
               tasks, cache=cache)
    assert server.calls == calls
    assert all(r.cached for r in live)
    assert [(r.trajectory_id, r.clip_index, r.evaluation_kind, r.scores, r.score_std)
            for r in live] == [(r.trajectory_id, r.clip_index, r.evaluation_kind, r.scores,
                                r.score_std) for r in state.rows]
