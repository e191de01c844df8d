"""Dry run: how many calls, tokens and dollars a batch would cost, without calling anything.

Prompts are rendered exactly as the runner would render them. The context chain of a
trajectory is followed through the cache while it hits (a cached clip costs nothing and
its summary is known); past the first miss the earlier summaries are unknown, so a
typical summary length stands in for each. Output tokens are a typical JSON answer;
the ReAct evaluations the judge is configured for (``evaluations``) are counted as the
independent calls they are, each checked against the cache on its own; the category and
trajectory assessments as one call per tool category used and one per trajectory, their
prompts rendered from the cached clip evaluations where every clip they read was cached
(then looked up in the cache too) and from typical stand-ins otherwise;
``max_cost_usd`` assumes every call uses its whole ``max_tokens``, the bound the budget
guard reserves against. A judge with ``repeats: N`` asks every judgment N times, each
repeat its own call and cache entry, so its calls (those not cached) count N times.
Repair attempts and retries are not included. Beside the live estimate stands what the
same calls cost through the provider's batch API (``batch cost``; half price at OpenAI and
Anthropic) and, for a judge in ``mode: batch``, how many waves its context chain needs.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field
from tabulate import tabulate

from eval_pipeline.judges._common import estimate_tokens
from eval_pipeline.judges.assessments import (
    Answered,
    categories_of,
    category_request,
    trajectory_request,
)
from eval_pipeline.judges.base import ClipTask, JudgeReply, JudgeRequest
from eval_pipeline.judges.batch.waves import expected_waves
from eval_pipeline.judges.cache import JudgeCache, cache_key
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.presets import call_identity, resolve_endpoint
from eval_pipeline.judges.pricing import batch_price_for, price_for
from eval_pipeline.judges.reply import InvalidReply, validate_reply
from eval_pipeline.judges.requests import (
    build_react_requests,
    build_request,
    chain_context,
    fit_tasks,
)
from eval_pipeline.rubrics import (
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_KIND_CLIP,
    EVAL_TRAJECTORY_ASSESSMENT,
    assessment_rubrics,
    rubric_for,
)

TYPICAL_OUTPUT_TOKENS = 350
_PLACEHOLDER_SUMMARY = "x" * 140  # a typical summary's length


class JudgeEstimate(BaseModel):
    judge: str
    provider: str
    model: str
    clips: int
    calls: int
    cached: int
    est_tokens_in: int
    est_tokens_out: int
    est_cost_usd: float | None
    max_cost_usd: float | None
    budget_usd: float | None = None
    mode: str = "live"
    est_batch_cost_usd: float | None = Field(
        default=None, description="The same calls through the provider's batch API "
        "(half price at OpenAI and Anthropic); None where there is none (heuristic, local)")
    waves: int | None = Field(default=None, description="Batch mode: provider batches in "
                              "sequence the context chain needs (see batch_waves)")

    @property
    def over_budget(self) -> bool:
        return (self.budget_usd is not None and self.est_cost_usd is not None
                and self.est_cost_usd > self.budget_usd)


class DryRunEstimate(BaseModel):
    judges: list[JudgeEstimate]

    @property
    def calls(self) -> int:
        return sum(j.calls for j in self.judges)

    @property
    def est_tokens(self) -> int:
        return sum(j.est_tokens_in + j.est_tokens_out for j in self.judges)

    @property
    def est_cost_usd(self) -> float:
        return sum(j.est_cost_usd or 0.0 for j in self.judges)

    @property
    def max_cost_usd(self) -> float:
        return sum(j.max_cost_usd or 0.0 for j in self.judges)

    @property
    def est_batch_cost_usd(self) -> float:
        """Every judge that can batch at its batch price, the others at their live one."""
        return sum(j.est_batch_cost_usd if j.est_batch_cost_usd is not None
                   else (j.est_cost_usd or 0.0) for j in self.judges)

    def to_table(self) -> str:
        def usd(value: float | None) -> str:
            return "unpriced" if value is None else f"${value:.4f}"

        rows = [[j.judge, j.provider, j.model,
                 j.mode + (f" ({j.waves} waves)" if j.waves is not None else ""), j.clips,
                 j.calls, j.cached, j.est_tokens_in, j.est_tokens_out, usd(j.est_cost_usd),
                 "-" if j.est_batch_cost_usd is None else usd(j.est_batch_cost_usd),
                 usd(j.max_cost_usd),
                 "-" if j.budget_usd is None else
                 f"${j.budget_usd:.2f}{' (over)' if j.over_budget else ''}"]
                for j in self.judges]
        rows.append(["total", "", "", "", "", self.calls, sum(j.cached for j in self.judges),
                     sum(j.est_tokens_in for j in self.judges),
                     sum(j.est_tokens_out for j in self.judges), usd(self.est_cost_usd),
                     usd(self.est_batch_cost_usd), usd(self.max_cost_usd), ""])
        headers = ["judge", "provider", "model", "mode", "clips", "calls", "cached",
                   "tokens in", "tokens out", "est. cost (live)", "batch cost", "max cost",
                   "budget"]
        return tabulate(rows, headers=headers, tablefmt="simple")


def _cached_outcome(hits: Sequence[JudgeReply | None], metrics: Sequence[str]
                    ) -> Answered | None:
    """The clip row a run would make from these cached repeats (their mean scores, repeat
    0's summary, as :func:`~eval_pipeline.judges.repeats.combine_repeats`); None unless
    every repeat is cached."""
    if not hits or any(hit is None for hit in hits):
        return None
    try:
        scores = [validate_reply(hit, metrics) for hit in hits if hit is not None]
    except InvalidReply:
        return None  # the run would ask again
    mean = scores[0] if len(scores) == 1 else {
        m: statistics.fmean(s[m] for s in scores) for m in scores[0]}
    first = hits[0]
    return Answered("ok", json.dumps(mean), first.summary if first is not None else "")


def _placeholder(task: ClipTask) -> Answered:
    """A stand-in for a clip evaluation not known before the run: typical in length."""
    return Answered("ok", json.dumps(dict.fromkeys(rubric_for(task.tool_type).metric_names,
                                                   0.5)), _PLACEHOLDER_SUMMARY)


def _assessment_calls(trajectory: Sequence[ClipTask], config: JudgeConfig,
                      outcomes: Mapping[int, Answered | None], cache: JudgeCache | None,
                      identity: dict[str, Any]) -> tuple[int, int, int]:
    """(calls, cached, input tokens) of one trajectory's assessments. A category whose
    clips were all cached has its real prompt and is looked up in the cache; otherwise its
    prompt is rendered with stand-ins for the unknown evaluations and counted as calls
    (so is the trajectory assessment unless all its inputs were cached)."""
    known = {ci: o for ci, o in outcomes.items() if o is not None}
    rows = {t.clip_index: known.get(t.clip_index) or _placeholder(t) for t in trajectory}
    calls = cached = tokens = 0
    category_rows: dict[str, Answered] = {}
    all_known = len(known) == len(trajectory)

    def count(request: JudgeRequest, lookup: bool) -> Answered | None:
        nonlocal calls, cached, tokens
        hits = [cache.get(cache_key(identity, request, repeat)) if cache and lookup else None
                for repeat in range(config.repeats)]
        missed = sum(hit is None for hit in hits)
        cached += config.repeats - missed
        calls += missed
        tokens += missed * estimate_tokens(request.system_prompt, request.user_prompt)
        return _cached_outcome(hits, request.metrics)

    wanted = set(config.evaluations)
    if EVAL_CATEGORY_ASSESSMENT in wanted:
        for category, tasks in categories_of(trajectory).items():
            lookup = all(t.clip_index in known for t in tasks)
            found = count(category_request(category, tasks, rows), lookup)
            if found is None:
                all_known = False
            category_rows[category] = found or Answered(
                "ok", json.dumps(dict.fromkeys(
                    assessment_rubrics()[EVAL_CATEGORY_ASSESSMENT].metric_names, 0.5)),
                _PLACEHOLDER_SUMMARY)
    if EVAL_TRAJECTORY_ASSESSMENT in wanted and trajectory:
        count(trajectory_request(trajectory, rows, category_rows
                                 if EVAL_CATEGORY_ASSESSMENT in wanted else None), all_known)
    return calls, cached, tokens


def _estimate_one(tasks: Sequence[ClipTask], config: JudgeConfig,
                  cache: JudgeCache | None, output_tokens: int) -> JudgeEstimate:
    if config.provider == "heuristic":
        return JudgeEstimate(judge=config.name, provider="heuristic", model=config.model,
                             clips=len(tasks), calls=0, cached=0, est_tokens_in=0,
                             est_tokens_out=0, est_cost_usd=0.0, max_cost_usd=0.0)
    endpoint = resolve_endpoint(config)
    identity = call_identity(config)
    tasks = fit_tasks(tasks, config.input_max_chars)[0]  # as the run sends them
    price = price_for(config, endpoint.model, local=endpoint.local)
    by_trajectory: dict[str, list[ClipTask]] = {}
    for task in tasks:
        by_trajectory.setdefault(task.trajectory_id, []).append(task)
    calls = cached = tokens_in = 0
    for trajectory in by_trajectory.values():
        for request in build_react_requests(trajectory, config.evaluations):
            for repeat in range(config.repeats):
                if cache and cache.get(cache_key(identity, request, repeat)) is not None:
                    cached += 1
                    continue
                calls += 1
                tokens_in += estimate_tokens(request.system_prompt, request.user_prompt)
        if EVAL_KIND_CLIP not in config.evaluations:
            continue
        summaries: list[str] = []
        hits_so_far = True
        outcomes: dict[int, Answered | None] = {}  # None: not known before the run
        for task in sorted(trajectory, key=lambda t: t.clip_index):
            context, _ = chain_context(summaries, config.context_budget_chars)
            request = build_request(task, context)
            # The chain carries repeat 0's summary; the other repeats are the same prompt.
            hits = [cache.get(cache_key(identity, request, repeat))
                    if cache and hits_so_far else None for repeat in range(config.repeats)]
            missed = sum(hit is None for hit in hits)
            cached += config.repeats - missed
            calls += missed
            tokens_in += missed * estimate_tokens(request.system_prompt, request.user_prompt)
            outcomes[task.clip_index] = _cached_outcome(hits, request.metrics)
            if hits[0] is not None:
                if hits[0].summary:  # as the run's chain: an empty summary adds nothing
                    summaries.append(hits[0].summary)
                continue
            hits_so_far = False
            summaries.append(_PLACEHOLDER_SUMMARY)
        more = _assessment_calls(trajectory, config, outcomes, cache, identity)
        calls, cached, tokens_in = calls + more[0], cached + more[1], tokens_in + more[2]
    tokens_out = calls * min(output_tokens, config.max_tokens)
    batch = None if endpoint.local else batch_price_for(config, endpoint.model)
    return JudgeEstimate(
        judge=config.name, provider=config.provider, model=endpoint.model, clips=len(tasks),
        calls=calls, cached=cached, est_tokens_in=tokens_in, est_tokens_out=tokens_out,
        est_cost_usd=price.cost(tokens_in, tokens_out) if price else None,
        max_cost_usd=price.cost(tokens_in, calls * config.max_tokens) if price else None,
        budget_usd=config.budget_usd, mode=config.mode,
        est_batch_cost_usd=batch.cost(tokens_in, tokens_out) if batch else None,
        waves=expected_waves(config, tasks) if config.mode == "batch" else None,
    )


def estimate_cost(tasks: Sequence[ClipTask], configs: Sequence[JudgeConfig], *,
                  cache: JudgeCache | None = None,
                  output_tokens: int = TYPICAL_OUTPUT_TOKENS) -> DryRunEstimate:
    """Estimate every judge's calls and cost for ``tasks``; no provider is contacted."""
    return DryRunEstimate(judges=[_estimate_one(tasks, c, cache, output_tokens)
                                  for c in configs])
