"""Dry run: how many calls, tokens and dollars a batch would cost, without calling anything.

Prompts are rendered exactly as the runner would render them. The context chain of a
trajectory is followed through the cache while it hits (a cached clip costs nothing and
its summary is known); past the first miss the earlier summaries are unknown, so a
typical summary length stands in for each. Output tokens are a typical JSON answer;
the ReAct evaluations the judge is configured for (``evaluations``) are counted as the
independent calls they are, each checked against the cache on its own;
``max_cost_usd`` assumes every call uses its whole ``max_tokens``, the bound the budget
guard reserves against. A judge with ``repeats: N`` asks every judgment N times, each
repeat its own call and cache entry, so its calls (those not cached) count N times.
Repair attempts and retries are not included. Beside the live estimate stands what the
same calls cost through the provider's batch API (``batch cost``; half price at OpenAI and
Anthropic) and, for a judge in ``mode: batch``, how many waves its context chain needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field
from tabulate import tabulate

from eval_pipeline.judges._common import estimate_tokens
from eval_pipeline.judges.base import ClipTask
from eval_pipeline.judges.batch.waves import expected_waves
from eval_pipeline.judges.cache import JudgeCache, cache_key
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.presets import call_identity, resolve_endpoint
from eval_pipeline.judges.pricing import batch_price_for, price_for
from eval_pipeline.judges.requests import (
    build_react_requests,
    build_request,
    chain_context,
    fit_tasks,
)
from eval_pipeline.rubrics import EVAL_KIND_CLIP

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
            if hits[0] is not None:
                if hits[0].summary:  # as the run's chain: an empty summary adds nothing
                    summaries.append(hits[0].summary)
                continue
            hits_so_far = False
            summaries.append(_PLACEHOLDER_SUMMARY)
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
