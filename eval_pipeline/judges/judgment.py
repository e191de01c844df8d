"""One judgment: one request to one judge, turned into exactly one row.

Per call, in order: the cache (a hit costs nothing and takes no slot), the circuit
breaker, the budget, then the provider through the judge's :class:`CallLimiter` with
retries. An answer that is not valid earns one repair attempt (the error goes back to the
model); after that the row fails with the error and the raw answer. A failed row never
carries a score. A valid answer is in the cache before its call gives its slot back, so
a crash loses at most the calls holding a slot (the judge's concurrency).

What the breaker hears: a provider that answered (even with an unusable answer) is a
success; a call that still failed after its retries (5xx, timeout, connection error) is a
failure, and a fatal one (bad key, unknown model) opens the breaker at once; a 429 is
neither, it is back-pressure handled by the limiter and the retry budget.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from eval_pipeline.judges._common import estimate_tokens
from eval_pipeline.judges.base import Judge, JudgeError, JudgeReply, JudgeRequest
from eval_pipeline.judges.breaker import CircuitBreaker
from eval_pipeline.judges.budget import BudgetGuard
from eval_pipeline.judges.cache import JudgeCache, cache_key
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import (
    FatalProviderError,
    InvalidOutput,
    TransientJudgeError,
    redact,
)
from eval_pipeline.judges.limits import CallLimiter
from eval_pipeline.judges.pricing import Price, price_for
from eval_pipeline.judges.reply import InvalidReply, validate_reply
from eval_pipeline.judges.requests import prompt_hash, repair_request
from eval_pipeline.judges.retry import RetryBudget, RetryPolicy
from eval_pipeline.judges.rows import JudgmentRow

__all__ = ["CallNotMade", "JudgeRuntime", "breaker_error", "guarded_call", "judge_one"]


@dataclass
class JudgeRuntime:
    """The per-run machinery around one judge: cache, limits, retries, breaker, budget.

    Built once per run (the limiter binds to the running event loop). ``JudgeRuntime()``
    with no arguments is the plain runner: no cache, no per-minute limits, no budget, and
    the concurrency the runner is given.
    """

    cache: JudgeCache | None = None
    limiter: CallLimiter | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    budget: BudgetGuard = field(default_factory=lambda: BudgetGuard(None))
    price: Price | None = None
    max_tokens: int = 2000
    context_budget_chars: int | None = None
    repeats: int = 1  # times each judgment is asked (see eval_pipeline.judges.repeats)

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
            context_budget_chars=config.context_budget_chars,
            repeats=config.repeats,
        )

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return self.price.cost(tokens_in, tokens_out) if self.price else 0.0

    def worst_case_cost(self, request: JudgeRequest) -> float:
        return self.cost(estimate_tokens(request.system_prompt, request.user_prompt),
                         self.max_tokens)


def breaker_error(breaker: CircuitBreaker) -> str:
    return f"circuit breaker open: {breaker.reason}"


@dataclass
class _Tally:
    attempts: int = 0
    tokens_in: int = 0
    tokens_out: int = 0


class _BreakerOpened(Exception):
    """The breaker opened while this request waited: it is not sent."""


class CallNotMade(JudgeError):
    """:func:`guarded_call` did not call the provider: its breaker is open, or its budget
    cannot cover the call's worst case. The message says which, as a judgment's row does."""


class _Costed(Protocol):
    """What a provider's answer says it cost (a :class:`JudgeReply`, a routing turn)."""

    tokens_in: int
    tokens_out: int


R = TypeVar("R", bound=_Costed)


async def _attempt(call: Callable[[], Awaitable[R]]) -> R:
    """``call()``, with a garbled response body counted as the transient fault it is.

    The SDKs decode a 200's body themselves and let a body that is not JSON (a proxy's
    error page, a reply mangled on the way) escape as ``json.JSONDecodeError``, which no
    judge translates. It is the transport failing, not the model answering (the judges read
    the model's own text leniently and report it as ``InvalidOutput``), so it is retried
    like a reset and, if it persists, counts towards the breaker; before, it failed the row
    at once, unretried and unseen by the breaker.
    """
    try:
        return await call()
    except json.JSONDecodeError as exc:
        raise TransientJudgeError(f"malformed response body (not JSON): {exc}") from None


async def _send(call: Callable[[], Awaitable[R]], runtime: JudgeRuntime, tally: _Tally,
                priority: float, estimated_tokens: int,
                keep: Callable[[R], Awaitable[None]] | None = None) -> R:
    """Send one request, retrying transient failures, holding a slot only while in flight.

    After a 5xx, timeout or connection error the request keeps its slot through the
    backoff: a struggling provider gets no more load from us, and the breaker hears of
    ``threshold`` failed requests before more are tried. After a 429 it gives the slot
    back (the limiter has halved the concurrency) and waits outside.

    ``keep(reply)`` (the cache write) runs before the slot is given back, so a reply
    is in the cache before the next request can be sent: a process killed at any moment
    has lost at most the judge's concurrency of answered calls, those holding a slot.
    Written after the release, a finished call's write could wait behind the next call
    (on the writer thread, on another process's lock), and a crash lost those too.
    """
    limiter = runtime.limiter or CallLimiter(1 << 30)
    retries = RetryBudget(runtime.retry)
    while True:
        async with limiter.slot(estimated_tokens, priority) as ticket:
            while True:
                if runtime.breaker.is_open:
                    raise _BreakerOpened
                tally.attempts += 1
                try:
                    reply = await _attempt(call)
                except TransientJudgeError as exc:
                    wait = retries.wait_after(exc)
                    if wait is None:
                        raise
                    if exc.rate_limited:
                        limiter.rate_limited_by(ticket, exc.retry_after)
                        break  # wait outside the slot
                    await asyncio.sleep(wait)
                    continue
                except InvalidOutput:
                    limiter.succeeded()  # the provider answered; the model was wrong
                    raise
                limiter.succeeded()
                tally.tokens_in += reply.tokens_in
                tally.tokens_out += reply.tokens_out
                if keep is not None:
                    await keep(reply)
                return reply
        await asyncio.sleep(wait)


async def _call(call: Callable[[], Awaitable[R]], runtime: JudgeRuntime, tally: _Tally,
                priority: float, estimated_tokens: int,
                keep: Callable[[R], Awaitable[None]] | None = None) -> R:
    """:func:`_send`, telling the breaker how it went."""
    try:
        reply = await _send(call, runtime, tally, priority, estimated_tokens, keep)
    except InvalidOutput as exc:
        tally.tokens_in += exc.tokens_in
        tally.tokens_out += exc.tokens_out
        runtime.breaker.record_success()  # the provider answered; the model was wrong
        raise
    except TransientJudgeError as exc:
        if not exc.rate_limited:  # a 429 is back-pressure, never a breaker failure
            runtime.breaker.record_failure(str(exc))
        raise
    except FatalProviderError as exc:
        runtime.breaker.record_failure(str(exc), fatal=True)
        raise
    except JudgeError as exc:
        runtime.breaker.record_failure(str(exc))
        raise
    runtime.breaker.record_success()
    return reply


async def guarded_call(call: Callable[[], Awaitable[R]], runtime: JudgeRuntime, *,
                       estimated_input_tokens: int, priority: float = 0.0) -> R:
    """One provider call that is not a judgment (a routing suite's model turn) through a
    judge's machinery, so it is guarded as a judge's call is: refused while the circuit
    breaker is open, and the breaker told how it went (:func:`_call`); the worst case
    (``estimated_input_tokens`` in, ``max_tokens`` out, at the runtime's price) reserved
    against the budget first and settled at the actual cost; the limiter's slots,
    per-minute limits and 429 handling; the retries.

    Raises :class:`CallNotMade` when the breaker is open or the budget cannot cover the
    call, else whatever the call raised after its retries (a :class:`JudgeError`).
    """
    if runtime.breaker.is_open:
        raise CallNotMade(breaker_error(runtime.breaker))
    worst = runtime.cost(estimated_input_tokens, runtime.max_tokens)
    if not await runtime.budget.reserve(worst):
        raise CallNotMade(runtime.budget.refusal_reason())
    tally = _Tally()
    try:
        return await _call(call, runtime, tally, priority,
                           estimated_input_tokens + runtime.max_tokens)
    except _BreakerOpened:
        raise CallNotMade(breaker_error(runtime.breaker)) from None
    finally:
        await runtime.budget.settle(worst, runtime.cost(tally.tokens_in, tally.tokens_out))


async def judge_one(judge: Judge, request: JudgeRequest, runtime: JudgeRuntime | None = None,
                    *, priority: float = 0.0, context_dropped: int = 0,
                    repeat: int = 0) -> JudgmentRow:
    """Judge one request; never raises (a failure is a failed row).

    ``priority`` orders this request's provider calls among the judge's waiting ones
    (smaller first); ``context_dropped`` is recorded on the row (earlier summaries left
    out of ``previous_context`` by the chain bound); ``repeat`` is the index of this ask
    among the judge's ``repeats`` (its own cache entry from 1 on, see :func:`cache_key`).
    """
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
        "context_dropped": context_dropped,
        "prompt_hash": prompt_hash(request),
        "prompt_chars": len(request.system_prompt) + len(request.user_prompt),
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
            attempts=tally.attempts, repaired=repaired, repeats_ok=int(ok),
            reply_mode=str(getattr(judge, "reply_mode", "") or ""),
        )

    try:
        identity = getattr(judge, "cache_identity", None)
        key = (cache_key(identity(), request, repeat)
               if runtime.cache is not None and identity else None)
        if key is not None and runtime.cache is not None:
            hit = await runtime.cache.aget(key)
            if hit is not None:
                try:
                    return finish("ok", reply=hit, scores=validate_reply(
                        hit, request.metrics, request.labels), cached=True)
                except InvalidReply:
                    pass  # an entry from an older rubric shape: ask again
        return await _judge_uncached(judge, request, runtime, tally, finish, key, secrets,
                                     priority)
    except Exception as exc:  # a provider or cache bug must still leave a failed row
        return finish("failed", error=f"{type(exc).__name__}: {exc}")


async def _judge_uncached(judge: Judge, request: JudgeRequest, runtime: JudgeRuntime,
                          tally: _Tally, finish: Any, key: str | None,
                          secrets: tuple[str | None, ...], priority: float) -> JudgmentRow:
    attempt_request = request
    first_error: str | None = None
    raw = ""
    for repair in (False, True):
        if runtime.breaker.is_open:
            return finish("failed", raw=raw, error=breaker_error(runtime.breaker))
        worst = runtime.worst_case_cost(attempt_request)
        if not await runtime.budget.reserve(worst):
            if not repair:
                return finish("skipped", error=runtime.budget.refusal_reason())
            return finish("failed", raw=raw,
                          error=f"invalid output: {first_error}; repair not attempted: "
                                f"{runtime.budget.refusal_reason()}")
        spent_before = runtime.cost(tally.tokens_in, tally.tokens_out)
        kept: dict[str, float] | None = None

        async def keep(reply: JudgeReply) -> None:
            """Validate the reply and cache it if valid; runs while the call holds its
            slot (see :func:`_send`). An invalid reply is not cached: it is refused
            below, with its tokens counted, and earns the repair attempt."""
            nonlocal kept
            try:
                kept = validate_reply(reply, request.metrics, request.labels)
            except InvalidReply:
                return
            if key is not None and runtime.cache is not None:
                await runtime.cache.aput(key, judge.name, judge.model, reply)

        try:
            reply = await _call(partial(judge.score, attempt_request), runtime, tally,
                                priority, estimate_tokens(attempt_request.system_prompt,
                                                          attempt_request.user_prompt)
                                + runtime.max_tokens, keep)
            scores = (kept if kept is not None
                      else validate_reply(reply, request.metrics, request.labels))
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
        except _BreakerOpened:
            return finish("failed", raw=raw, error=breaker_error(runtime.breaker))
        finally:
            await runtime.budget.settle(
                worst, runtime.cost(tally.tokens_in, tally.tokens_out) - spent_before)
        return finish("ok", reply=reply, scores=scores, repaired=repair)
    raise AssertionError("unreachable")
