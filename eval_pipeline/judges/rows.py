"""The row contract of every judgments table, and the totals drawn from it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from eval_pipeline.rubrics import EvaluationKind

__all__ = ["JudgmentRow", "JudgmentStatus", "RunSummary", "summarize_rows"]

# ok: scores from a valid reply; failed: the error says why, no score; skipped: not asked
# (the budget ran out before the call).
JudgmentStatus = Literal["ok", "failed", "skipped"]


class JudgmentRow(BaseModel):
    """The row contract of every ``judgments__<judge>`` asset."""

    trajectory_id: str
    clip_index: int
    evaluation_kind: EvaluationKind
    tool_type: str
    judge: str
    provider: str
    model: str
    status: JudgmentStatus
    success: bool
    scores: str = Field(description="JSON object metric -> score in [0, 1]; '{}' unless ok")
    label: str | None = None
    summary: str = ""
    reasoning: str = ""
    raw_response: str = ""
    error: str | None = None
    previous_context: str = ""
    prompt_hash: str
    prompt_chars: int = Field(
        default=0, description="len(system prompt) + len(user prompt) of the request this "
        "row answers, as built for the judge (0 in rows made before it was recorded)")
    template_version: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = Field(default=0.0, description="Spent by this run; 0 for a cache hit")
    latency_s: float = 0.0
    cached: bool = False
    attempts: int = Field(default=0, description="Provider requests made, retries included")
    repaired: bool = Field(default=False, description="Valid only after the repair attempt")
    reply_mode: str = Field(default="", description="The judge's reply mode for this row")
    context_dropped: int = Field(
        default=0, description="Earlier clip summaries left out by context_budget_chars")
    truncated_chars: int = Field(
        default=0, description="Characters left out of the trajectory fields in this row's "
        "prompt by the judge's input_max_chars (head and tail kept around a marker)")
    repeats_ok: int = Field(
        default=0, description="Repeats of this judgment that answered (the judge's "
        "``repeats``; 1 for an ok row of a judge that asks once, 0 for a failed row); the "
        "scores are their mean")
    score_std: str = Field(
        default="{}", description="JSON object metric -> population standard deviation of "
        "the ok repeats' scores; '{}' with fewer than two ok repeats (no spread measured)")
    straddles: bool = Field(
        default=False, description="The ok repeats fall on both sides of the pass "
        "threshold (0.5) for some metric, or, for a ReAct kind, their labels disagree")


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
    reply_modes: dict[str, int] = Field(
        default_factory=dict, description="Rows per reply mode (after any fallback)")


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
        reply_modes=dict(Counter(r.reply_mode for r in rows if r.reply_mode)),
    )
