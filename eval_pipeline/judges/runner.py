"""Run one judge over a batch of clips: context chaining, validation, failed rows.

Clips of one trajectory are judged in order on their rubric, because each prompt carries
the summaries of the earlier clips (the original tool's context chain); trajectories run
concurrently. The ReAct evaluations (thought-to-tool and query-to-thought per tool clip,
sequence optimality per trajectory) do not use that chain: each is an independent request
and runs concurrently with everything else under the same limits. Whatever goes wrong,
every requested judgment gets exactly one row, and a failed row carries no scores.

Per call, in order: the cache (a hit costs nothing), the circuit breaker, the budget, the
rate limits, then the provider with retries on transient failures. An answer that is not
valid earns one repair attempt (the error goes back to the model); after that the row
fails with the error and the raw answer. If the breaker opens, the run raises
:class:`CircuitOpenError` once in-flight calls finish, so the step fails while the cache
keeps every finished call and a rerun resumes where this one stopped.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eval_pipeline.judges._common import estimate_tokens
from eval_pipeline.judges.base import ClipTask, Judge, JudgeError, JudgeReply, JudgeRequest
from eval_pipeline.judges.breaker import CircuitBreaker
from eval_pipeline.judges.budget import BudgetGuard
from eval_pipeline.judges.cache import JudgeCache, cache_key
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import (
    CircuitOpenError,
    FatalProviderError,
    InvalidOutput,
    redact,
)
from eval_pipeline.judges.limits import CallLimiter
from eval_pipeline.judges.pricing import Price, price_for
from eval_pipeline.judges.reply import InvalidReply, validate_reply
from eval_pipeline.judges.requests import (
    build_react_requests,
    build_request,
    prompt_hash,
    repair_request,
)
from eval_pipeline.judges.retry import RetryPolicy, with_retries
from eval_pipeline.judges.rows import JudgmentRow, RunSummary, summarize_rows
from eval_pipeline.rubrics import ALL_EVALUATIONS, EVAL_KIND_CLIP

__all__ = [
    "CircuitOpenError",
    "ClipTask",
    "InvalidReply",
    "JudgeRuntime",
    "JudgmentRow",
    "RunSummary",
    "build_react_requests",
    "build_request",
    "judge_one",
    "run_judge",
    "summarize_rows",
    "validate_reply",
]


@dataclass
class JudgeRuntime:
    """The per-run machinery around one judge: cache, limits, retries, breaker, budget.

    Built once per run (limiters bind to the running event loop). ``JudgeRuntime()`` with
    no arguments is the plain runner: no cache, no limits, no budget.
    """

    cache: JudgeCache | None = None
    limiter: CallLimiter | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    budget: BudgetGuard = field(default_factory=lambda: BudgetGuard(None))
    price: Price | None = None
    max_tokens: int = 2000

    @classmethod
    def from_config(cls, config: JudgeConfig, *, cache: JudgeCache | None = None,
                    retry_base_s: float = 0.5, breaker_threshold: int = 3) -> JudgeRuntime:
        local = False
        model = config.model
        if config.provider != "heuristic":
            from eval_pipeline.judges.presets import resolve_endpoint

            endpoint = resolve_endpoint(config)
            local, model = endpoint.local, endpoint.model
        price = price_for(config, model, local=local)
        if config.budget_usd is not None and price is None:
            raise ValueError(
                f"judge {config.name!r}: budget_usd is set but model {model!r} has no known "
                "price; set input_price_per_mtok and output_price_per_mtok"
            )
        return cls(
            cache=cache if config.provider != "heuristic" else None,
            limiter=CallLimiter(config.concurrency, config.requests_per_minute,
                                config.tokens_per_minute),
            retry=RetryPolicy(max_retries=config.max_retries, base_delay_s=retry_base_s),
            breaker=CircuitBreaker(breaker_threshold),
            budget=BudgetGuard(config.budget_usd),
            price=price,
            max_tokens=config.max_tokens,
        )

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return self.price.cost(tokens_in, tokens_out) if self.price else 0.0

    def worst_case_cost(self, request: JudgeRequest) -> float:
        return self.cost(estimate_tokens(request.system_prompt, request.user_prompt),
                         self.max_tokens)


@dataclass
class _Tally:
    attempts: int = 0
    tokens_in: int = 0
    tokens_out: int = 0


async def _call(judge: Judge, request: JudgeRequest, runtime: JudgeRuntime,
                tally: _Tally) -> JudgeReply:
    estimated = estimate_tokens(request.system_prompt, request.user_prompt) + runtime.max_tokens

    async def once() -> JudgeReply:
        tally.attempts += 1
        if runtime.limiter is None:
            return await judge.score(request)
        async with runtime.limiter.slot(estimated):
            return await judge.score(request)

    try:
        reply = await with_retries(once, runtime.retry,
                                   should_stop=lambda: runtime.breaker.is_open)
    except InvalidOutput as exc:
        tally.tokens_in += exc.tokens_in
        tally.tokens_out += exc.tokens_out
        runtime.breaker.record_success()  # the provider answered; the model was wrong
        raise
    except FatalProviderError as exc:
        runtime.breaker.record_failure(str(exc), fatal=True)
        raise
    except JudgeError as exc:
        runtime.breaker.record_failure(str(exc))
        raise
    tally.tokens_in += reply.tokens_in
    tally.tokens_out += reply.tokens_out
    runtime.breaker.record_success()
    return reply


async def judge_one(judge: Judge, request: JudgeRequest,
                    runtime: JudgeRuntime | None = None) -> JudgmentRow:
    runtime = runtime or JudgeRuntime()
    secrets = tuple(getattr(judge, "secrets", ()) or ())
    base: dict[str, Any] = {
        "trajectory_id": request.trajectory_id,
        "clip_index": request.clip_index,
        "evaluation_kind": request.evaluation_kind,
        "tool_type": request.tool_type,
        "judge": judge.name,
        "provider": judge.provider,
        "model": judge.model,
        "previous_context": request.previous_context,
        "prompt_hash": prompt_hash(request),
        "template_version": request.template_version,
    }
    started = time.perf_counter()
    tally = _Tally()

    def finish(status: str, *, error: str | None = None, raw: str = "",
               reply: JudgeReply | None = None, scores: dict[str, float] | None = None,
               cached: bool = False, repaired: bool = False) -> JudgmentRow:
        ok = status == "ok"
        return JudgmentRow(
            **base, status=status, success=ok,
            scores=json.dumps(scores) if ok and scores is not None else "{}",
            label=reply.label if ok and reply else None,
            summary=reply.summary if ok and reply else "",
            reasoning=reply.reasoning if ok and reply else "",
            raw_response=redact(reply.raw_response if ok and reply else raw, secrets),
            error=redact(error, secrets) if error else None,
            tokens_in=tally.tokens_in if not cached else (reply.tokens_in if reply else 0),
            tokens_out=tally.tokens_out if not cached else (reply.tokens_out if reply else 0),
            cost_usd=0.0 if cached else runtime.cost(tally.tokens_in, tally.tokens_out),
            latency_s=time.perf_counter() - started, cached=cached,
            attempts=tally.attempts, repaired=repaired,
        )

    identity = getattr(judge, "cache_identity", None)
    key = cache_key(identity(), request) if runtime.cache is not None and identity else None
    if key is not None and runtime.cache is not None:
        hit = await runtime.cache.aget(key)
        if hit is not None:
            try:
                return finish("ok", reply=hit, scores=validate_reply(
                    hit, request.metrics, request.labels), cached=True)
            except InvalidReply:
                pass  # an entry from an older rubric shape: ask again
    if runtime.breaker.is_open:
        return finish("skipped", error=f"circuit breaker open: {runtime.breaker.reason}")

    attempt_request = request
    first_error: str | None = None
    raw = ""
    for repair in (False, True):
        worst = runtime.worst_case_cost(attempt_request)
        if not await runtime.budget.reserve(worst):
            if not repair:
                return finish("skipped", error=runtime.budget.refusal_reason())
            return finish("failed", raw=raw,
                          error=f"invalid output: {first_error}; repair not attempted: "
                                f"{runtime.budget.refusal_reason()}")
        spent_before = runtime.cost(tally.tokens_in, tally.tokens_out)
        try:
            reply = await _call(judge, attempt_request, runtime, tally)
            scores = validate_reply(reply, request.metrics, request.labels)
        except (InvalidOutput, InvalidReply) as exc:
            raw = getattr(exc, "raw_response", "") or ""
            if not repair:
                first_error = str(exc)
                attempt_request = repair_request(request, first_error, raw, secrets)
                continue
            return finish("failed", raw=raw,
                          error=f"invalid output after one repair attempt: {exc} "
                                f"(first attempt: {first_error})")
        except JudgeError as exc:
            return finish("failed", raw=getattr(exc, "raw_response", "") or "",
                          error=str(exc))
        except Exception as exc:  # a provider bug must still leave a failed row, not a hole
            return finish("failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            await runtime.budget.settle(
                worst, runtime.cost(tally.tokens_in, tally.tokens_out) - spent_before)
        if key is not None and runtime.cache is not None:
            await runtime.cache.aput(key, judge.name, judge.model, reply)
        return finish("ok", reply=reply, scores=scores, repaired=repair)
    raise AssertionError("unreachable")


async def _judge_trajectory(judge: Judge, tasks: list[ClipTask], gate: asyncio.Semaphore,
                            runtime: JudgeRuntime) -> list[JudgmentRow]:
    rows: list[JudgmentRow] = []
    previous_context = ""
    async with gate:
        for task in sorted(tasks, key=lambda t: t.clip_index):
            if runtime.breaker.is_open:
                break
            row = await judge_one(judge, build_request(task, previous_context.strip()),
                                  runtime)
            rows.append(row)
            if row.success and row.summary:
                previous_context += f" [Previous: {row.summary}]"
    return rows


async def _judge_gated(judge: Judge, request: JudgeRequest, gate: asyncio.Semaphore,
                       runtime: JudgeRuntime) -> list[JudgmentRow]:
    async with gate:
        return [await judge_one(judge, request, runtime)]


async def run_judge(judge: Judge, tasks: Sequence[ClipTask], concurrency: int = 4,
                    runtime: JudgeRuntime | None = None, *, close: bool = True,
                    evaluations: Sequence[str] = ALL_EVALUATIONS) -> list[JudgmentRow]:
    """Judge every clip on each requested evaluation kind (the judge's ``evaluations``).

    Returns one row per (clip or trajectory, kind), or raises :class:`CircuitOpenError` if
    the breaker opened. Rows come grouped by trajectory: its clip-rubric rows in clip
    order, then its ReAct rows.
    """
    runtime = runtime or JudgeRuntime()
    kinds = set(evaluations)
    by_trajectory: dict[str, list[ClipTask]] = {}
    for task in tasks:
        by_trajectory.setdefault(task.trajectory_id, []).append(task)
    gate = asyncio.Semaphore(concurrency)
    jobs = []
    expected = 0
    for trajectory in by_trajectory.values():
        if EVAL_KIND_CLIP in kinds:
            jobs.append(_judge_trajectory(judge, trajectory, gate, runtime))
            expected += len(trajectory)
        for request in build_react_requests(trajectory, evaluations):
            jobs.append(_judge_gated(judge, request, gate, runtime))
            expected += 1
    try:
        results = await asyncio.gather(*jobs)
    finally:
        if close:
            await judge.aclose()
    rows = [row for rows in results for row in rows]
    if runtime.breaker.is_open:
        done = sum(r.status == "ok" for r in rows)
        secrets = tuple(getattr(judge, "secrets", ()) or ())
        unit = "clips" if kinds == {EVAL_KIND_CLIP} else "judgments"
        raise CircuitOpenError(redact(
            f"judge {judge.name!r} ({judge.provider}, {judge.model}): circuit breaker open, "
            f"stopped calling the provider: {runtime.breaker.reason}. {done} of {expected} "
            f"{unit} finished and are cached; rerun to resume from there.", secrets), rows)
    return rows
