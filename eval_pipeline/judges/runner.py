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
import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from eval_pipeline.judges._common import estimate_tokens
from eval_pipeline.judges.base import ClipView, Judge, JudgeError, JudgeReply, JudgeRequest
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
from eval_pipeline.judges.retry import RetryPolicy, with_retries
from eval_pipeline.models import FINAL_TOOL_TYPE
from eval_pipeline.rubrics import (
    ALL_EVALUATIONS,
    EVAL_KIND_CLIP,
    EVAL_QUERY_TO_THOUGHT,
    EVAL_SEQUENCE_OPTIMALITY,
    EVAL_THOUGHT_TO_TOOL,
    REACT_EVALUATIONS,
    TRAJECTORY_CLIP_INDEX,
    TRAJECTORY_TOOL_TYPE,
    render_clip_prompt,
    render_query_to_thought_prompt,
    render_sequence_prompt,
    render_thought_to_tool_prompt,
    rubric_for,
    templates_version,
    tool_definitions,
)

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


class ClipTask(BaseModel):
    """One clip to judge, as read from the ``clips`` table."""

    trajectory_id: str
    clip_index: int
    tool_type: str
    task_description: str
    clip: ClipView


class JudgmentRow(BaseModel):
    """The row contract of every ``judgments__<judge>`` asset."""

    trajectory_id: str
    clip_index: int
    evaluation_kind: str
    tool_type: str
    judge: str
    provider: str
    model: str
    status: str = Field(description="ok | failed | skipped")
    success: bool
    scores: str = Field(description="JSON object metric -> score in [0, 1]; '{}' unless ok")
    label: str | None = None
    summary: str = ""
    reasoning: str = ""
    raw_response: str = ""
    error: str | None = None
    previous_context: str = ""
    prompt_hash: str
    template_version: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = Field(default=0.0, description="Spent by this run; 0 for a cache hit")
    latency_s: float = 0.0
    cached: bool = False
    attempts: int = Field(default=0, description="Provider requests made, retries included")
    repaired: bool = Field(default=False, description="Valid only after the repair attempt")


class InvalidReply(ValueError):
    def __init__(self, message: str, raw_response: str = ""):
        super().__init__(message)
        self.raw_response = raw_response


def validate_reply(reply: JudgeReply, metrics: Sequence[str],
                   labels: Sequence[str] = ()) -> dict[str, float]:
    """Scores must be exactly the rubric's metrics, each a finite number in [0, 1].

    With ``labels`` (a ReAct kind) the label must be one of them and the single score must
    agree with it (1.0 for the positive label, 0.0 for the negative): a reply whose score
    contradicts its own label is not used, it goes back for repair.
    """
    missing = [m for m in metrics if m not in reply.scores]
    if missing:
        raise InvalidReply(f"missing metrics: {missing}", reply.raw_response)
    extra = sorted(set(reply.scores) - set(metrics))
    if extra:
        raise InvalidReply(f"unexpected metrics: {extra}", reply.raw_response)
    scores: dict[str, float] = {}
    for metric in metrics:
        value = reply.scores[metric]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidReply(f"score {metric!r} is not a number: {value!r}", reply.raw_response)
        value = float(value)
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise InvalidReply(f"score {metric!r} out of range [0, 1]: {value!r}",
                               reply.raw_response)
        scores[metric] = value
    if labels:
        if reply.label not in labels:
            raise InvalidReply(f"label must be one of {list(labels)}, got {reply.label!r}",
                               reply.raw_response)
        expected = 1.0 if reply.label == labels[0] else 0.0
        for metric, value in scores.items():
            if value != expected:
                raise InvalidReply(
                    f"score {metric!r} = {value} contradicts label {reply.label!r} "
                    f"(expected {expected})", reply.raw_response)
    return scores


def build_request(task: ClipTask, previous_context: str) -> JudgeRequest:
    system, user = render_clip_prompt(
        tool_type=task.tool_type,
        task_description=task.task_description,
        previous_context=previous_context,
        clip_content=task.clip.content,
    )
    return JudgeRequest(
        trajectory_id=task.trajectory_id,
        clip_index=task.clip_index,
        tool_type=task.tool_type,
        metrics=rubric_for(task.tool_type).metric_names,
        task_description=task.task_description,
        previous_context=previous_context,
        clip=task.clip,
        system_prompt=system,
        user_prompt=user,
        template_version=templates_version(),
    )


def _is_tool_clip(task: ClipTask) -> bool:
    return task.tool_type != FINAL_TOOL_TYPE


def _react_request(task: ClipTask, kind: str, system: str, user: str) -> JudgeRequest:
    spec = REACT_EVALUATIONS[kind]
    return JudgeRequest(
        trajectory_id=task.trajectory_id, clip_index=task.clip_index, evaluation_kind=kind,
        tool_type=task.tool_type, metrics=[spec.metric], labels=spec.labels,
        task_description=task.task_description, previous_context="", clip=task.clip,
        system_prompt=system, user_prompt=user, template_version=templates_version(),
    )


def build_react_requests(tasks: Sequence[ClipTask], evaluations: Sequence[str] = ALL_EVALUATIONS
                         ) -> list[JudgeRequest]:
    """The ReAct requests for ONE trajectory's clips, in a stable order.

    - thought_to_tool: one per tool clip (the final clip has no call, so it is skipped);
    - query_to_thought: one per tool clip that states a thought (a clip without a thought
      has nothing to align with the query, so it gets no row rather than a made-up label);
    - sequence_optimality: one per trajectory (clip_index -1, tool_type "trajectory"),
      over the ordered (thought, tool, input, short result) of all its tool clips.
    """
    if not tasks:
        return []
    ordered = sorted(tasks, key=lambda t: t.clip_index)
    tool_clips = [t for t in ordered if _is_tool_clip(t)]
    kinds = set(evaluations)
    tools_text = tool_definitions([(t.clip.tool_name or t.tool_type, t.tool_type)
                                   for t in tool_clips])
    requests: list[JudgeRequest] = []
    for task in tool_clips:
        clip = task.clip
        if EVAL_THOUGHT_TO_TOOL in kinds:
            system, user = render_thought_to_tool_prompt(
                original_question=task.task_description, thought=clip.thought.strip(),
                tool_call=clip.tool_name or task.tool_type, action_input=clip.action_input,
                tool_definitions=tools_text)
            requests.append(_react_request(task, EVAL_THOUGHT_TO_TOOL, system, user))
        if EVAL_QUERY_TO_THOUGHT in kinds and clip.thought.strip():
            system, user = render_query_to_thought_prompt(
                original_question=task.task_description, thought=clip.thought.strip())
            requests.append(_react_request(task, EVAL_QUERY_TO_THOUGHT, system, user))
    if EVAL_SEQUENCE_OPTIMALITY in kinds:
        first = ordered[0]
        system, user = render_sequence_prompt(
            original_question=first.task_description,
            steps=[(t.clip.thought.strip(), t.clip.tool_name or t.tool_type,
                    t.clip.action_input, t.clip.result) for t in tool_clips])
        closing = ordered[-1] if not _is_tool_clip(ordered[-1]) else None
        spec = REACT_EVALUATIONS[EVAL_SEQUENCE_OPTIMALITY]
        requests.append(JudgeRequest(
            trajectory_id=first.trajectory_id, clip_index=TRAJECTORY_CLIP_INDEX,
            evaluation_kind=EVAL_SEQUENCE_OPTIMALITY, tool_type=TRAJECTORY_TOOL_TYPE,
            metrics=[spec.metric], labels=spec.labels,
            task_description=first.task_description, previous_context="",
            # The closing clip (answer or not) stands for the trajectory's end.
            clip=closing.clip if closing else ClipView(content=""),
            sequence=[t.clip for t in tool_clips],
            system_prompt=system, user_prompt=user, template_version=templates_version(),
        ))
    return requests


def repair_request(request: JudgeRequest, error: str, raw_response: str,
                   secrets: Sequence[str | None] = ()) -> JudgeRequest:
    """The same question again, with the rejected answer and why it was rejected."""
    label = (f", a \"label\" that is exactly one of {request.labels} (its score 1.0 for "
             f"\"{request.labels[0]}\", else 0.0)," if request.labels else "")
    note = (
        "\n\nYour previous reply could not be used: "
        f"{redact(error, secrets)}\n\nYour previous reply was:\n"
        f"{redact(raw_response[:4000], secrets)}\n\n"
        "Reply again with only the corrected JSON object: exactly the criteria listed "
        f"above under \"scores\", each a number from 0.0 to 1.0{label} plus \"summary\" "
        "and \"reasoning\" strings."
    )
    return request.model_copy(update={"user_prompt": request.user_prompt + note})


def prompt_hash(request: JudgeRequest) -> str:
    return hashlib.sha256(
        (request.system_prompt + "\x00" + request.user_prompt).encode("utf-8")
    ).hexdigest()[:16]


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


class RunSummary(BaseModel):
    """Totals for asset metadata and the CLI summary."""

    rows: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    cached: int = 0
    repaired: int = 0
    calls: int = Field(default=0, description="Provider requests made, retries included")
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0


def summarize_rows(rows: Sequence[JudgmentRow]) -> RunSummary:
    return RunSummary(
        rows=len(rows),
        ok=sum(r.status == "ok" for r in rows),
        failed=sum(r.status == "failed" for r in rows),
        skipped=sum(r.status == "skipped" for r in rows),
        cached=sum(r.cached for r in rows),
        repaired=sum(r.repaired for r in rows),
        calls=sum(r.attempts for r in rows),
        tokens_in=sum(r.tokens_in for r in rows if not r.cached),
        tokens_out=sum(r.tokens_out for r in rows if not r.cached),
        cost_usd=round(sum(r.cost_usd for r in rows), 8),
    )
