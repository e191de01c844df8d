"""Batch mode: judging through a provider's batch API, one wave at a time.

Batch mode replaces only the transport. The judgments are walked exactly as the live runner
walks them (each trajectory's clip chain in order, then its ReAct requests), each through
:func:`~eval_pipeline.judges.judgment.judge_one` (cache, validation, the one repair, failed
rows), but the "provider" of that walk is a :class:`ReplayJudge` that answers from the
batch ledger. A request the ledger has no answer for is *needed*: the walk of that
trajectory stops there (its next clip's prompt needs this clip's summary), and the needed
requests of every trajectory make the next wave. So:

- wave k holds clip k of every trajectory still going, plus, in the first wave, every ReAct
  request; a trajectory's category assessments go in the wave after its last clip, its
  trajectory assessment in the wave after those; and from the second wave on the repairs
  of unreadable answers and the resubmissions of lines without a result (expired,
  cancelled, a provider fault), each at most ``max_retries`` times;
- ``batch_waves: N`` bounds the chain: a clip carries the summaries of the earlier clips of
  its stretch of N (clips 0..N-1, N..2N-1, ...), so N waves suffice; ``1`` is no chain;
- once no request is needed and no batch is in flight, the same walk yields the final rows:
  the same judgments table as live mode, its rows' cost at the batch price;
- every valid answer enters the judge cache as its batch is collected, so a second run (or
  a live run) pays nothing for it;
- ``repeats: N`` sends each judgment N times in the same wave, one line per repeat: the
  same body, its own custom_id, keyed (request and cache) by the repeat index as in live
  mode, so the repeats' answers are the live repeats' cache entries, and the judgment's one
  row combines them as live does (:func:`~eval_pipeline.judges.repeats.combine_repeats`;
  the chain carries repeat 0's summary).

Nothing here waits for a batch: :func:`advance` collects what has ended, submits the next
wave if it can, and says whether the job is ``done`` or ``pending``. Orchestration (a Dagster
sensor, the CLI's wait loop) decides when to call it again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from eval_pipeline.judges.assessments import (
    categories_of,
    category_request,
    trajectory_request,
)
from eval_pipeline.judges.base import ClipTask, Judge, JudgeError, JudgeReply, JudgeRequest
from eval_pipeline.judges.batch.ledger import BatchLedger, LedgerBatch, LedgerLine
from eval_pipeline.judges.batch.transport import BatchTransport, LineResult, transport_for
from eval_pipeline.judges.batch.waves import chain_description, expected_waves
from eval_pipeline.judges.breaker import CircuitBreaker
from eval_pipeline.judges.budget import BudgetGuard
from eval_pipeline.judges.cache import JudgeCache, cache_key
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import InvalidOutput, TransientJudgeError, redact
from eval_pipeline.judges.judgment import JudgeRuntime, judge_one
from eval_pipeline.judges.limits import CallLimiter
from eval_pipeline.judges.presets import call_identity, resolve_endpoint
from eval_pipeline.judges.pricing import batch_price_for
from eval_pipeline.judges.repeats import combine_repeats
from eval_pipeline.judges.reply import InvalidReply, validate_reply
from eval_pipeline.judges.requests import build_react_requests, build_request, chain_context
from eval_pipeline.judges.retry import RetryPolicy
from eval_pipeline.judges.rows import JudgmentRow
from eval_pipeline.rubrics import (
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_KIND_CLIP,
    EVAL_TRAJECTORY_ASSESSMENT,
)

__all__ = ["BatchRun", "advance", "chain_description", "expected_waves", "job_scope",
           "poll"]


class _Pending(Exception):
    """The ledger holds no final answer to this request yet (needed, or in flight)."""


class BatchRun(BaseModel):
    """Where a batch-mode judge stands after :func:`advance`."""

    job: str
    state: Literal["done", "pending"]
    chain: str = Field(description="The context-chain choice, e.g. 'full (4 waves)'")
    waves: int = Field(description="Provider batches submitted for this job so far")
    in_flight: list[str] = Field(default_factory=list, description="Provider batch ids")
    submitted_now: int = Field(default=0, description="Requests submitted by this call")
    lines: int = Field(default=0, description="Requests sent in this job's batches")
    answered: int = 0
    errored: int = 0
    rows: list[JudgmentRow] = Field(default_factory=list, description="When done")
    cost_usd: float = Field(default=0.0, description="Batch price of the answers so far")
    batch_ids: list[str] = Field(default_factory=list)


def job_scope(config: JudgeConfig, partitions: Sequence[str]) -> str:
    """One job per judge, judge identity and set of partitions: a rerun of the same work
    finds the open job (and its batch ids); a changed model starts another."""
    material = json.dumps({"judge": config.name, "identity": call_identity(config),
                           "waves": config.batch_waves, "partitions": sorted(partitions)},
                          sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:24]


# -- the replay judge ------------------------------------------------------------------------

@dataclass
class _Answers:
    """The ledger's lines of one job, by the key of the request they answer."""

    final: dict[str, LedgerLine] = field(default_factory=dict)  # the latest ended line
    in_flight: set[str] = field(default_factory=set)
    failures: dict[str, int] = field(default_factory=dict)  # retryable errors seen
    answered_keys: set[str] = field(default_factory=set)  # cache keys answered in this job

    @classmethod
    def of(cls, lines: Sequence[LedgerLine]) -> _Answers:
        answers = cls()
        for line in lines:  # in wave order: a later line supersedes an earlier one
            if line.state == "pending":
                answers.in_flight.add(line.request_key)
                continue
            answers.final[line.request_key] = line
            if line.state == "errored" and line.retryable:
                answers.failures[line.request_key] = answers.failures.get(
                    line.request_key, 0) + 1
            if line.state in ("answered", "unreadable"):
                answers.answered_keys.add(line.cache_key)
        return answers


class ReplayJudge:
    """A judge whose provider is the batch ledger: answers a request from its line, raises
    the line's error, or records the request as needed for the next wave."""

    def __init__(self, judge: Judge, answers: _Answers, max_retries: int) -> None:
        self._judge = judge
        self.name, self.provider, self.model = judge.name, judge.provider, judge.model
        self.reply_mode = judge.reply_mode
        self.reply_mode_note = judge.reply_mode_note
        self.secrets = tuple(getattr(judge, "secrets", ()) or ())
        self._identity = call_identity_of(judge)
        self.answers = answers
        self.max_retries = max_retries
        self.needed: dict[str, tuple[JudgeRequest, str]] = {}  # request key -> (req, cache key)
        self.waiting: set[str] = set()
        self._current_cache_key = ""
        self._repeat = 0
        self.blocked = 0  # requests without a final answer, counted as the walk meets them

    def cache_identity(self) -> dict[str, Any]:
        return self._identity

    def key_of(self, request: JudgeRequest, repeat: int = 0) -> str:
        """The key of one request as repeat ``repeat`` of its judgment: the ledger's
        request key, and the live cache key of that repeat."""
        return cache_key(self._identity, request, repeat)

    def asking_for(self, cache_key_: str, repeat: int = 0) -> None:
        """The cache key the judgment being walked stores its answer under, and which of
        its repeats this is (its requests, a repair too, are keyed by it)."""
        self._current_cache_key = cache_key_
        self._repeat = repeat

    async def score(self, request: JudgeRequest) -> JudgeReply:
        key = self.key_of(request, self._repeat)
        if key in self.answers.in_flight:
            self.waiting.add(key)
            self.blocked += 1
            raise _Pending(key)
        line = self.answers.final.get(key)
        if line is None or (line.state == "errored" and line.retryable
                            and self.answers.failures.get(key, 0) <= self.max_retries):
            self.needed.setdefault(key, (request, self._current_cache_key or key))
            self.blocked += 1
            raise _Pending(key)
        if line.state == "answered" and line.reply is not None:
            return line.reply
        if line.state == "unreadable":
            raise InvalidOutput(line.error or "unreadable answer", raw_response=line.raw,
                                tokens_in=line.tokens_in, tokens_out=line.tokens_out)
        raise JudgeError(line.error or "batch line failed")

    async def aclose(self) -> None:
        return None


def call_identity_of(judge: Judge) -> dict[str, Any]:
    identity = getattr(judge, "cache_identity", None)
    if identity is None:
        raise ValueError(f"judge {judge.name!r} has no cache identity")
    return dict(identity())


class _JobCache(JudgeCache):
    """The judge cache, blind to the answers of the current job: those rows are this run's
    answers, paid at the batch price, not cache hits (a second run sees them as hits)."""

    def __init__(self, inner: JudgeCache, hidden: set[str]) -> None:  # no super(): a view
        self.inner, self.hidden, self.path = inner, hidden, inner.path

    def get(self, key: str) -> JudgeReply | None:
        return None if key in self.hidden else self.inner.get(key)

    def put(self, key: str, judge: str, model: str, reply: JudgeReply) -> None:
        self.inner.put(key, judge, model, reply)

    async def aget(self, key: str) -> JudgeReply | None:
        return self.get(key)

    async def aput(self, key: str, judge: str, model: str, reply: JudgeReply) -> None:
        if key not in self.hidden:  # already stored when its batch was collected
            self.inner.put(key, judge, model, reply)

    def __len__(self) -> int:
        return len(self.inner)

    def close(self) -> None:
        return None


# -- the walk --------------------------------------------------------------------------------

async def _walk(replay: ReplayJudge, tasks: Sequence[ClipTask], config: JudgeConfig,
                runtime: JudgeRuntime) -> tuple[list[JudgmentRow], bool]:
    """Every judgment in the live runner's order; (rows, complete). Rows of a trajectory
    whose walk stopped at a request without an answer are left out (not complete)."""
    by_trajectory: dict[str, list[ClipTask]] = {}
    for task in tasks:
        by_trajectory.setdefault(task.trajectory_id, []).append(task)
    rows: list[JudgmentRow] = []
    stretch = config.batch_waves
    for trajectory in by_trajectory.values():
        if EVAL_KIND_CLIP in config.evaluations:
            summaries: list[str] = []
            by_index: dict[int, JudgmentRow] = {}
            blocked = False
            for position, task in enumerate(sorted(trajectory, key=lambda t: t.clip_index)):
                if stretch is not None and position % stretch == 0:
                    summaries, blocked = [], False  # a new stretch: the chain starts over
                if blocked:
                    continue  # this clip needs the summary of one still unanswered
                context, dropped = chain_context(summaries, runtime.context_budget_chars)
                judged = await _judgment(replay, build_request(task, context), runtime,
                                         config.repeats, context_dropped=dropped)
                if judged is None:
                    blocked = True
                    continue
                row, summary = judged
                rows.append(row)
                by_index[task.clip_index] = row
                if summary:
                    summaries.append(summary)
            if len(by_index) == len(trajectory):  # every clip has its row: the assessments
                rows += await _assessments(replay, trajectory, by_index, config, runtime)
        for request in build_react_requests(trajectory, config.evaluations):
            judged = await _judgment(replay, request, runtime, config.repeats)
            if judged is not None:
                rows.append(judged[0])
    complete = not replay.needed and not replay.waiting
    return rows, complete


async def _judgment(replay: ReplayJudge, request: JudgeRequest, runtime: JudgeRuntime,
                    repeats: int, *, context_dropped: int = 0
                    ) -> tuple[JudgmentRow, str] | None:
    """The judgment's one row over its ``repeats`` and the summary the chain carries on
    (repeat 0's, "" when it failed, as live), or None while an answer is not in. Every
    repeat is asked even when an earlier one is not in, so all of them that are needed go
    out in the same wave."""
    before = replay.blocked
    rows: list[JudgmentRow] = []
    for repeat in range(repeats):
        replay.asking_for(replay.key_of(request, repeat), repeat)
        rows.append(await judge_one(replay, request, runtime,
                                    context_dropped=context_dropped, repeat=repeat))
    if replay.blocked > before:
        return None
    first = rows[0]
    return (first if repeats == 1 else combine_repeats(rows),
            first.summary if first.success else "")


async def _ask(replay: ReplayJudge, request: JudgeRequest, runtime: JudgeRuntime,
               repeats: int) -> JudgmentRow | None:
    """The row of one judgment, or None while an answer is not in (it is then needed)."""
    judged = await _judgment(replay, request, runtime, repeats)
    return None if judged is None else judged[0]


async def _assessments(replay: ReplayJudge, trajectory: Sequence[ClipTask],
                       by_index: dict[int, JudgmentRow], config: JudgeConfig,
                       runtime: JudgeRuntime) -> list[JudgmentRow]:
    """A trajectory's category assessments (the wave after its last clip), then its
    trajectory assessment (the wave after those), as the live runner builds them."""
    kinds = set(config.evaluations)
    ordered = sorted(trajectory, key=lambda t: t.clip_index)
    rows: list[JudgmentRow] = []
    category_rows: dict[str, JudgmentRow] = {}
    complete = True
    if EVAL_CATEGORY_ASSESSMENT in kinds:
        for category, tasks in categories_of(ordered).items():
            row = await _ask(replay, category_request(category, tasks, by_index), runtime,
                             config.repeats)
            if row is None:
                complete = False
            else:
                category_rows[category] = row
    rows += category_rows.values()
    if EVAL_TRAJECTORY_ASSESSMENT in kinds and complete and ordered:
        row = await _ask(replay, trajectory_request(
            ordered, by_index,
            category_rows if EVAL_CATEGORY_ASSESSMENT in kinds else None), runtime,
            config.repeats)
        if row is not None:
            rows.append(row)
    return rows


def _runtime(config: JudgeConfig, cache: JudgeCache | None) -> JudgeRuntime:
    """The walk's machinery: the batch price; no per-minute limits or breaker (the walk
    calls no provider; an errored line is one failed row, never the breaker's business)."""
    endpoint = resolve_endpoint(config)
    return JudgeRuntime(
        cache=cache, limiter=CallLimiter(1 << 20), retry=RetryPolicy(max_retries=0),
        breaker=CircuitBreaker(1 << 30), budget=BudgetGuard(config.budget_usd),
        price=batch_price_for(config, endpoint.model, local=endpoint.local),
        max_tokens=config.max_tokens, context_budget_chars=config.context_budget_chars)


# -- collecting and submitting --------------------------------------------------------------

def _custom_id(request_key: str) -> str:
    """Unique per request in a batch, and within Anthropic's ``^[a-zA-Z0-9_-]{1,64}$``."""
    return f"r{request_key[:40]}"


async def _collect(batch: LedgerBatch, transport: BatchTransport, ledger: BatchLedger,
                   cache: JudgeCache | None, judge: Judge) -> bool:
    """Collect an ended batch: outcomes into the ledger, valid answers into the cache.
    False when the batch is still running."""
    status = await transport.status(batch.batch_id)
    ledger.set_status(batch.batch_id, status.status, status.done, status.ended)
    if not status.ended:
        return False
    lines = ledger.lines(batch_id=batch.batch_id)
    requests = {line.custom_id: line.request for line in lines}
    results = {r.custom_id: r for r in await transport.results(batch.batch_id, requests)}
    outcomes: list[LedgerLine] = []
    for line in lines:
        result = results.get(line.custom_id) or LineResult(
            custom_id=line.custom_id, state="errored", retryable=True,
            error=f"batch line failed: no result (batch {status.status})")
        reply = JudgeReply.model_validate_json(result.reply_json) if result.reply_json else None
        outcome = line.model_copy(update={
            "state": result.state, "reply": reply, "error": result.error, "raw": result.raw,
            "retryable": result.retryable, "tokens_in": result.tokens_in,
            "tokens_out": result.tokens_out})
        outcomes.append(outcome)
        if reply is not None and cache is not None:
            try:
                validate_reply(reply, line.request.metrics, line.request.labels)
            except InvalidReply:
                continue  # the walk sends it back for its one repair
            cache.put(line.cache_key, judge.name, judge.model, reply)
    ledger.record_outcomes(batch.batch_id, outcomes, status.status)
    return True


async def _submit(needed: dict[str, tuple[JudgeRequest, str]], job: str,
                  transport: BatchTransport, ledger: BatchLedger, judge: Judge) -> int:
    """One provider batch with the needed requests; recorded the moment it has an id. A
    refused submission is recorded as errored lines (a provider fault is retried in a
    later wave; a refused key or model fails the rows), never raised."""
    items = [(_custom_id(key), key, request, cache_key_)
             for key, (request, cache_key_) in needed.items()]
    lines = [LedgerLine(batch_id="", custom_id=custom_id, request_key=key, cache_key=ck,
                        request=request) for custom_id, key, request, ck in items]
    try:
        status = await transport.submit([(c, r) for c, _, r, _ in items],
                                        {"eval_pipeline_job": job[:500]})
    except Exception as exc:
        from eval_pipeline.judges.sdk_judge import translate_sdk_error

        sdk = getattr(judge, "sdk", None)
        secrets = tuple(s for s in getattr(judge, "secrets", ()) if s)
        timeout = float(getattr(getattr(judge, "config", None), "timeout_s", 60.0))
        error = (translate_sdk_error(exc, sdk, timeout, secrets)
                 if sdk is not None else JudgeError(redact(str(exc), secrets)))
        transient = isinstance(error, TransientJudgeError)
        failed = [line.model_copy(update={
            "batch_id": f"unsubmitted-{job}-{len(ledger.batches(job)) + 1}",
            "state": "errored", "retryable": transient,
            "error": f"batch submission failed: {error}"}) for line in lines]
        ledger.add_batch(job, failed[0].batch_id, "not submitted", failed, ended=True)
        return 0
    ledger.add_batch(job, status.batch_id, status.status,
                     [line.model_copy(update={"batch_id": status.batch_id}) for line in lines])
    return len(lines)


BUDGET_REFUSAL = "budget cap reached"


def _within_budget(config: JudgeConfig, needed: dict[str, tuple[JudgeRequest, str]],
                   ledger: BatchLedger, job: str) -> dict[str, tuple[JudgeRequest, str]]:
    """The needed requests whose worst case (estimated input, ``max_tokens`` output, batch
    price) fits the budget left after what the job's answers cost, in walk order (longest
    chains' earliest clips first, as met). The rest are recorded as refused lines, never
    sent: their rows are ``skipped`` with the reason, as in live mode."""
    if config.budget_usd is None:
        return needed
    from eval_pipeline.judges._common import estimate_tokens

    endpoint = resolve_endpoint(config)
    price = batch_price_for(config, endpoint.model, local=endpoint.local)
    if price is None:
        return needed
    spent = sum(price.cost(line.tokens_in, line.tokens_out) for line in ledger.lines(job=job))
    kept: dict[str, tuple[JudgeRequest, str]] = {}
    refused: list[LedgerLine] = []
    for key, (request, cache_key_) in needed.items():
        worst = price.cost(estimate_tokens(request.system_prompt, request.user_prompt),
                           config.max_tokens)
        if spent + worst <= config.budget_usd:
            spent += worst
            kept[key] = (request, cache_key_)
            continue
        refused.append(LedgerLine(
            batch_id="", custom_id=_custom_id(key), request_key=key, cache_key=cache_key_,
            request=request, state="errored", retryable=False,
            error=f"{BUDGET_REFUSAL}: ${spent:.4f} committed of ${config.budget_usd:.4f}; "
                  "request not submitted"))
    if refused:
        batch_id = f"unsubmitted-{job}-{len(ledger.batches(job)) + 1}"
        ledger.add_batch(job, batch_id, "not submitted",
                         [line.model_copy(update={"batch_id": batch_id}) for line in refused],
                         ended=True)
    return kept


async def advance(config: JudgeConfig, judge: Judge, tasks: Sequence[ClipTask],
                  partitions: Sequence[str], ledger: BatchLedger, cache: JudgeCache | None,
                  *, transport: BatchTransport | None = None,
                  log: Callable[[str], None] | None = None) -> BatchRun:
    """Move a batch-mode judge's work on ``tasks`` as far as it goes without waiting.

    Collect every batch of the job that has ended (answers into the cache), walk the
    judgments, submit the next wave when nothing is in flight; ``done`` with the rows when
    every judgment has its answer or its failure. Safe to call again at any time, from any
    process: the ledger holds the job, so nothing is submitted twice.
    """
    transport = transport or transport_for(judge)
    job = ledger.open_job(config.name, job_scope(config, partitions), partitions)
    say = log or (lambda _: None)
    for batch in ledger.uncollected(job.job):
        if await _collect(batch, transport, ledger, cache, judge):
            say(f"judge {config.name!r}: collected batch {batch.batch_id} (wave {batch.wave})")
    submitted = 0
    for _ in range(config.max_retries + 3):  # a refused submission walks again (bounded)
        answers = _Answers.of(ledger.lines(job=job.job))
        replay = ReplayJudge(judge, answers, config.max_retries)
        view = _JobCache(cache, answers.answered_keys) if cache is not None else None
        rows, complete = await _walk(replay, tasks, config, _runtime(config, view))
        if complete:
            ledger.close_job(job.job)
            rows = [r.model_copy(update={"status": "skipped"})
                    if r.status == "failed" and (r.error or "").startswith(BUDGET_REFUSAL)
                    else r for r in rows]
            return _summary(job.job, "done", config, tasks, ledger, rows=rows)
        if replay.waiting or not replay.needed:
            break
        needed = _within_budget(config, replay.needed, ledger, job.job)
        if not needed:
            continue  # every needed request was over the budget: skipped, walk again
        submitted = await _submit(needed, job.job, transport, ledger, judge)
        if submitted:
            say(f"judge {config.name!r}: submitted {submitted} request(s), wave "
                f"{len(ledger.batches(job.job))}")
            break
    return _summary(job.job, "pending", config, tasks, ledger, submitted=submitted)


def _summary(job: str, state: Literal["done", "pending"], config: JudgeConfig,
             tasks: Sequence[ClipTask], ledger: BatchLedger, *,
             rows: list[JudgmentRow] | None = None, submitted: int = 0) -> BatchRun:
    batches = [b for b in ledger.batches(job) if b.status != "not submitted"]
    lines = ledger.lines(job=job)
    endpoint = resolve_endpoint(config)
    price = batch_price_for(config, endpoint.model, local=endpoint.local)
    cost = sum(price.cost(line.tokens_in, line.tokens_out) for line in lines) if price else 0.0
    return BatchRun(
        job=job, state=state, chain=chain_description(config, tasks), waves=len(batches),
        in_flight=[b.batch_id for b in batches if not b.collected], submitted_now=submitted,
        lines=len(lines), answered=sum(line.state == "answered" for line in lines),
        errored=sum(line.state == "errored" for line in lines), rows=rows or [],
        cost_usd=round(cost, 8), batch_ids=[b.batch_id for b in batches])


async def poll(judge: Judge, ledger: BatchLedger, *, transport: BatchTransport | None = None,
               jobs: Sequence[str] | None = None) -> dict[str, list[LedgerBatch]]:
    """Ask the provider about every batch in flight of the judge's open jobs (or of
    ``jobs``); record what it says. Job -> its in-flight batches that have now ended: the
    jobs a run can move on."""
    transport = transport or transport_for(judge)
    ended: dict[str, list[LedgerBatch]] = {}
    for job in ledger.open_jobs(judge.name):
        if jobs is not None and job.job not in jobs:
            continue
        for batch in ledger.uncollected(job.job):
            status = await transport.status(batch.batch_id)
            ledger.set_status(batch.batch_id, status.status, status.done, status.ended)
            if status.ended:
                ended.setdefault(job.job, []).append(ledger.batch(batch.batch_id))
    return ended
