"""Run one judge over a batch of clips: context chaining, validation, failed rows.

Clips of one trajectory are judged in order, because each prompt carries the summaries of
the earlier clips (the original tool's context chain); trajectories run concurrently.
Whatever goes wrong, every clip gets exactly one row, and a failed row carries no scores.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from eval_pipeline.judges.base import ClipView, Judge, JudgeError, JudgeReply, JudgeRequest
from eval_pipeline.rubrics import render_clip_prompt, rubric_for, templates_version


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
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cached: bool = False


class InvalidReply(ValueError):
    pass


def validate_reply(reply: JudgeReply, metrics: Sequence[str]) -> dict[str, float]:
    """Scores must be exactly the rubric's metrics, each a finite number in [0, 1]."""
    missing = [m for m in metrics if m not in reply.scores]
    if missing:
        raise InvalidReply(f"missing metrics: {missing}")
    scores: dict[str, float] = {}
    for metric in metrics:
        value = reply.scores[metric]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidReply(f"score {metric!r} is not a number: {value!r}")
        value = float(value)
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise InvalidReply(f"score {metric!r} out of range [0, 1]: {value!r}")
        scores[metric] = value
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


def prompt_hash(request: JudgeRequest) -> str:
    return hashlib.sha256(
        (request.system_prompt + "\x00" + request.user_prompt).encode("utf-8")
    ).hexdigest()[:16]


async def judge_one(judge: Judge, request: JudgeRequest) -> JudgmentRow:
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
    try:
        reply = await judge.score(request)
        scores = validate_reply(reply, request.metrics)
    except (JudgeError, InvalidReply) as exc:
        raw = getattr(exc, "raw_response", "") or ""
        return JudgmentRow(**base, status="failed", success=False, scores="{}", error=str(exc),
                           raw_response=raw, latency_s=time.perf_counter() - started)
    except Exception as exc:  # a provider bug must still leave a failed row, not a hole
        return JudgmentRow(**base, status="failed", success=False, scores="{}",
                           error=f"{type(exc).__name__}: {exc}",
                           latency_s=time.perf_counter() - started)
    return JudgmentRow(
        **base,
        status="ok",
        success=True,
        scores=json.dumps(scores),
        label=reply.label,
        summary=reply.summary,
        reasoning=reply.reasoning,
        raw_response=reply.raw_response,
        tokens_in=reply.tokens_in,
        tokens_out=reply.tokens_out,
        latency_s=time.perf_counter() - started,
    )


async def _judge_trajectory(judge: Judge, tasks: list[ClipTask],
                            gate: asyncio.Semaphore) -> list[JudgmentRow]:
    rows: list[JudgmentRow] = []
    previous_context = ""
    async with gate:
        for task in sorted(tasks, key=lambda t: t.clip_index):
            row = await judge_one(judge, build_request(task, previous_context.strip()))
            rows.append(row)
            if row.success and row.summary:
                previous_context += f" [Previous: {row.summary}]"
    return rows


async def run_judge(judge: Judge, tasks: Sequence[ClipTask], concurrency: int = 4
                    ) -> list[JudgmentRow]:
    by_trajectory: dict[str, list[ClipTask]] = {}
    for task in tasks:
        by_trajectory.setdefault(task.trajectory_id, []).append(task)
    gate = asyncio.Semaphore(concurrency)
    try:
        results = await asyncio.gather(
            *(_judge_trajectory(judge, ts, gate) for ts in by_trajectory.values())
        )
    finally:
        await judge.aclose()
    return [row for rows in results for row in rows]
