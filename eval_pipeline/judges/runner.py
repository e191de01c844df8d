"""Run judges over a batch of clips: request-level scheduling, context chains, one row each.

Clips of one trajectory are judged in order on their rubric, because each prompt carries
the summaries of the earlier clips (the original tool's context chain, bounded by
``context_budget_chars`` when set). The chain ends with the original tool's assessments:
one per tool category once that category's clips are judged, then one of the whole
trajectory (:mod:`eval_pipeline.judges.assessments`). The ReAct evaluations (thought-to-tool and
query-to-thought per tool clip, sequence optimality per trajectory) are independent
requests. Every request of a judge's run goes through that judge's one
:class:`~eval_pipeline.judges.limits.CallLimiter`: a chain holds a slot only while one of its
requests is in flight, so with enough trajectories the provider sees ``concurrency``
requests at all times. Waiting requests are served longest remaining chain first (the
critical path of the run; Hu's list scheduling for chains), then the independent ones.

Whatever goes wrong, every requested judgment gets exactly one row and a failed row carries
no scores. A judge whose circuit breaker opens stops calling its provider; its judgments
not yet done become failed rows ("circuit breaker open: <reason>") and nothing is raised:
the cache keeps every finished call, so a rerun resumes where this one stopped. Several
judges run at the same time in one event loop (:func:`run_judges`); one dead provider never
costs the others' work. A judge with ``repeats: N`` asks each judgment N times and still
leaves one row per judgment (:mod:`eval_pipeline.judges.repeats`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from eval_pipeline.judges.assessments import categories_of, category_request, trajectory_request
from eval_pipeline.judges.base import ClipTask, Judge, JudgeRequest
from eval_pipeline.judges.errors import redact
from eval_pipeline.judges.judgment import JudgeRuntime, judge_one
from eval_pipeline.judges.limits import CallLimiter
from eval_pipeline.judges.repeats import judge_repeated
from eval_pipeline.judges.reply import InvalidReply, validate_reply
from eval_pipeline.judges.requests import build_react_requests, build_request, chain_context
from eval_pipeline.judges.rows import JudgmentRow, RunSummary, summarize_rows
from eval_pipeline.rubrics import (
    ALL_EVALUATIONS,
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_KIND_CLIP,
    EVAL_TRAJECTORY_ASSESSMENT,
)

__all__ = [
    "ClipTask",
    "InvalidReply",
    "JudgeJob",
    "JudgeRunResult",
    "JudgeRuntime",
    "JudgmentRow",
    "RunSummary",
    "build_react_requests",
    "build_request",
    "judge_one",
    "run_judge",
    "run_judges",
    "summarize_rows",
    "validate_reply",
]

log = logging.getLogger(__name__)


@dataclass
class JudgeJob:
    """One judge's share of a run: the judge, its per-run machinery, what it evaluates.

    ``close``: close the judge's client when its run ends (the job owns the judge).
    ``progress``: told ``(0, planned)`` once the judgments are known, then ``(1, 0)`` as
    each row is done, so a progress bar can follow a long run; None costs nothing.
    """

    judge: Judge
    runtime: JudgeRuntime = field(default_factory=JudgeRuntime)
    evaluations: Sequence[str] = ALL_EVALUATIONS
    close: bool = True
    progress: Callable[[int, int], None] | None = None


@dataclass
class JudgeRunResult:
    """What one judge produced: a row for every requested judgment, and how it went."""

    name: str
    rows: list[JudgmentRow]
    summary: RunSummary
    reply_mode: str
    reply_mode_note: str | None
    breaker_open: bool
    breaker_reason: str | None
    rate_limited: int = 0  # 429s the provider answered
    lowest_concurrency: int | None = None  # the adaptive limit's lowest point, after 429s


def _assessment_count(tasks: Sequence[ClipTask], kinds: set[str]) -> int:
    """The assessment requests a trajectory's chain makes after (and beside) its clips."""
    count = len(categories_of(tasks)) if EVAL_CATEGORY_ASSESSMENT in kinds else 0
    return count + (EVAL_TRAJECTORY_ASSESSMENT in kinds)


async def _judge_chain(judge: Judge, tasks: list[ClipTask], runtime: JudgeRuntime,
                       progress: Callable[[int, int], None] | None = None,
                       kinds: frozenset[str] = frozenset()) -> list[JudgmentRow]:
    """A trajectory's clips in order, each prompt carrying the earlier clips' summaries,
    then the assessments the ``kinds`` ask for (:mod:`eval_pipeline.judges.assessments`).

    A category's assessment is sent as soon as the last clip of that category has its row,
    while the chain goes on; the trajectory assessment once every clip and every category
    assessment has its row. A request's priority is minus the requests on its longest path
    to the chain's end (the trajectory assessment counted), so the longest remaining chains
    go first whenever requests wait for a slot.
    """
    rows: list[JudgmentRow] = []
    summaries: list[str] = []
    ordered = sorted(tasks, key=lambda t: t.clip_index)
    categories = categories_of(ordered) if EVAL_CATEGORY_ASSESSMENT in kinds else {}
    last_clip = {ts[-1].clip_index: c for c, ts in categories.items()}
    tail = 1 if EVAL_TRAJECTORY_ASSESSMENT in kinds else 0
    by_index: dict[int, JudgmentRow] = {}
    pending: dict[str, asyncio.Task[list[JudgmentRow]]] = {}
    try:
        for done, task in enumerate(ordered):
            context, dropped = chain_context(summaries, runtime.context_budget_chars)
            row, summary = await judge_repeated(judge, build_request(task, context), runtime,
                                                priority=-(len(ordered) - done + tail),
                                                context_dropped=dropped)
            rows.append(row)
            by_index[task.clip_index] = row
            if progress is not None:
                progress(1, 0)
            if summary:
                summaries.append(summary)
            category = last_clip.get(task.clip_index)
            if category is not None:  # every clip of this category has its row
                request = category_request(category, categories[category], by_index)
                pending[category] = asyncio.ensure_future(_judge_single(
                    judge, request, runtime, progress, priority=-(1 + tail)))
        category_rows = {c: (await unit)[0] for c, unit in pending.items()}
    finally:
        for unit in pending.values():
            unit.cancel()  # only the chain's own cancellation leaves one running
    rows += category_rows.values()
    if tail and ordered:
        request = trajectory_request(ordered, by_index,
                                     category_rows if EVAL_CATEGORY_ASSESSMENT in kinds
                                     else None)
        rows += await _judge_single(judge, request, runtime, progress)
    return rows


async def _judge_single(judge: Judge, request: JudgeRequest, runtime: JudgeRuntime,
                        progress: Callable[[int, int], None] | None = None,
                        priority: float = -1) -> list[JudgmentRow]:
    row, _ = await judge_repeated(judge, request, runtime, priority=priority)
    if progress is not None:
        progress(1, 0)
    return [row]


async def _close(judge: Judge) -> None:
    try:
        await judge.aclose()
    except Exception as exc:  # closing a client must not cost the rows
        log.warning("judge %s: closing the client failed: %s", judge.name, exc)


async def run_job(job: JudgeJob, tasks: Sequence[ClipTask], concurrency: int = 4
                  ) -> JudgeRunResult:
    """Judge every clip on each requested evaluation kind; never raises.

    Rows come grouped by trajectory: its clip-rubric rows in clip order, its category
    assessments in the order of their categories' last clips, its trajectory assessment,
    then its ReAct rows. ``concurrency`` applies only when the runtime has no limiter of its own.
    """
    judge, runtime = job.judge, job.runtime
    if runtime.limiter is None:
        runtime = dataclasses.replace(runtime, limiter=CallLimiter(concurrency))
    kinds = set(job.evaluations)
    by_trajectory: dict[str, list[ClipTask]] = {}
    for task in tasks:
        by_trajectory.setdefault(task.trajectory_id, []).append(task)
    # (requests the unit makes, position in the output, the unit)
    units: list[tuple[int, int, Coroutine[Any, Any, list[JudgmentRow]]]] = []
    chain_kinds = frozenset(kinds)
    for trajectory in by_trajectory.values():
        if EVAL_KIND_CLIP in kinds:  # the assessments need the clips (JudgeConfig checks)
            units.append((len(trajectory) + _assessment_count(trajectory, kinds), len(units),
                          _judge_chain(judge, trajectory, runtime, job.progress,
                                       chain_kinds)))
        for request in build_react_requests(trajectory, job.evaluations):
            units.append((1, len(units), _judge_single(judge, request, runtime, job.progress)))
    if job.progress is not None:
        job.progress(0, sum(size for size, _, _ in units))
    # Started longest first: the first requests take free slots without queueing, so the
    # start order is the priority order there.
    units.sort(key=lambda unit: (-unit[0], unit[1]))
    try:
        results = await asyncio.gather(*(unit for _, _, unit in units))
    finally:
        if job.close:
            await _close(judge)
    in_order = sorted(zip((position for _, position, _ in units), results, strict=True))
    rows = [row for _, unit_rows in in_order for row in unit_rows]
    limiter = runtime.limiter
    assert limiter is not None
    reason = runtime.breaker.reason
    return JudgeRunResult(
        name=judge.name, rows=rows, summary=summarize_rows(rows),
        reply_mode=str(getattr(judge, "reply_mode", "") or ""),
        reply_mode_note=getattr(judge, "reply_mode_note", None),
        breaker_open=runtime.breaker.is_open,
        breaker_reason=redact(reason, tuple(getattr(judge, "secrets", ()) or ()))
        if reason else None,
        rate_limited=limiter.rate_limited,
        lowest_concurrency=limiter.lowest_limit if limiter.rate_limited else None,
    )


async def run_judge(judge: Judge, tasks: Sequence[ClipTask], concurrency: int = 4,
                    runtime: JudgeRuntime | None = None, *, close: bool = True,
                    evaluations: Sequence[str] = ALL_EVALUATIONS) -> list[JudgmentRow]:
    """The rows of one judge (see :func:`run_job`); never raises."""
    job = JudgeJob(judge, runtime or JudgeRuntime(), evaluations, close)
    return (await run_job(job, tasks, concurrency)).rows


async def run_judges(jobs: Sequence[JudgeJob], tasks: Sequence[ClipTask]
                     ) -> dict[str, JudgeRunResult]:
    """All judges at the same time in this event loop, each through its own limiter;
    keyed by judge name. One judge's failure (an open breaker, a dead provider) leaves
    failed rows in its own result and never touches the others'."""
    names = [job.judge.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"judge names must be unique in one run: {names}")
    results = await asyncio.gather(*(run_job(job, tasks) for job in jobs))
    return {result.name: result for result in results}
