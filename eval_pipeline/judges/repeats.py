"""Judge stability: ask each judgment ``repeats`` times and keep one row with the spread.

An LLM judge sampled at a temperature above 0 (and, through batching and floating point,
often at 0) need not give a clip the same score twice. With ``repeats: N`` every judgment
is asked N times, each its own call and cache entry (the repeat index is in the cache key
from the second repeat on, so repeat 0 keeps the key a judge asking once has always used).
The judgments table keeps one row per judgment, the contract every later stage reads:

- its scores are the mean over the repeats that answered (a failed repeat is a failed
  repeat: it is never counted as a score), and ``repeats_ok`` says how many those were;
- ``score_std`` is the population standard deviation of those repeats' scores per metric
  (JSON, as ``scores``): the spread of the answers actually seen, defined for two or more;
  with fewer it is ``{}``, as one answer measures no spread;
- ``straddles`` says the repeats fell on both sides of the pass threshold for some metric
  (for a ReAct kind: their labels disagree), i.e. the judge's pass/fail for that clip is a
  coin it tosses, whatever the mean says.

A judgment whose repeats all failed is a failed row (all skipped: a skipped row). The
context chain of the clip rubric carries repeat 0's summary only, the one a judge asking
once would carry, so later clips' prompts, and their cache keys, do not depend on N.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections import Counter
from collections.abc import Sequence

from eval_pipeline.agreement import PASS_THRESHOLD
from eval_pipeline.judges.base import Judge, JudgeRequest
from eval_pipeline.judges.judgment import JudgeRuntime, judge_one
from eval_pipeline.judges.rows import JudgmentRow

__all__ = ["combine_repeats", "judge_repeated", "mean_per_clip_std", "straddling"]


async def judge_repeated(judge: Judge, request: JudgeRequest, runtime: JudgeRuntime, *,
                         priority: float = 0.0, context_dropped: int = 0
                         ) -> tuple[JudgmentRow, str]:
    """The judgment's one row over ``runtime.repeats`` asks, and the summary the context
    chain carries on (repeat 0's, "" when it failed); never raises.

    The repeats go to the judge's limiter together, at the judgment's priority.
    """
    if runtime.repeats == 1:
        row = await judge_one(judge, request, runtime, priority=priority,
                              context_dropped=context_dropped)
        return row, row.summary if row.success else ""
    rows = await asyncio.gather(*(
        judge_one(judge, request, runtime, priority=priority,
                  context_dropped=context_dropped, repeat=i)
        for i in range(runtime.repeats)))
    return combine_repeats(rows), rows[0].summary if rows[0].success else ""


def _spent(rows: Sequence[JudgmentRow]) -> dict[str, object]:
    """Tokens, cost and calls of the repeats together. A row is ``cached`` only when every
    repeat was a hit; otherwise its tokens are what this run spent (the hits' tokens were
    paid by an earlier run), as for a judge asking once."""
    all_cached = all(r.cached for r in rows)
    paid = rows if all_cached else [r for r in rows if not r.cached]
    return {
        "tokens_in": sum(r.tokens_in for r in paid),
        "tokens_out": sum(r.tokens_out for r in paid),
        "cost_usd": sum(r.cost_usd for r in rows),
        "cached": all_cached,
        "attempts": sum(r.attempts for r in rows),
        "latency_s": max(r.latency_s for r in rows),  # they ran side by side
    }


def _majority_label(labels: Sequence[str]) -> str:
    """The most frequent label; a tie goes to the one the earliest repeat gave."""
    counts = Counter(labels)
    top = max(counts.values())
    return next(label for label in labels if counts[label] == top)


def combine_repeats(rows: Sequence[JudgmentRow]) -> JudgmentRow:
    """One judgment's repeats (in repeat order) as its one row."""
    ok = [r for r in rows if r.status == "ok"]
    spent = _spent(rows)
    if not ok:
        failed = [r for r in rows if r.status == "failed"]
        first = failed[0] if failed else rows[0]
        return first.model_copy(update={
            **spent, "repeats_ok": 0, "score_std": "{}", "straddles": False,
            "error": f"all {len(rows)} repeats {first.status}: {first.error}"})
    scores = [json.loads(r.scores) for r in ok]
    metrics = list(scores[0])
    mean = {m: statistics.fmean(s[m] for s in scores) for m in metrics}
    std = ({m: statistics.pstdev([s[m] for s in scores]) for m in metrics}
           if len(ok) > 1 else {})
    labels = [r.label for r in ok if r.label is not None]
    if labels:
        straddles = len(set(labels)) > 1
    else:
        straddles = any(min(s[m] for s in scores) < PASS_THRESHOLD
                        <= max(s[m] for s in scores) for m in metrics)
    # The text of the row (summary, reasoning, raw answer) is repeat 0's when it answered,
    # the earliest answering repeat's otherwise.
    shown = ok[0]
    return shown.model_copy(update={
        **spent,
        "scores": json.dumps(mean),
        "label": _majority_label(labels) if labels else None,
        "repaired": any(r.repaired for r in ok),
        "repeats_ok": len(ok),
        "score_std": json.dumps(std),
        "straddles": straddles,
    })


def mean_per_clip_std(rows: Sequence[JudgmentRow]) -> float | None:
    """The judge's mean per-clip spread: per ok row with a measured spread, the mean of
    its metrics' standard deviations, averaged over those rows; None when no row has one
    (a judge asking once, or no judgment with two answering repeats)."""
    per_row = [statistics.fmean(std.values()) for r in rows
               if r.status == "ok" and (std := json.loads(r.score_std))]
    return statistics.fmean(per_row) if per_row else None


def straddling(rows: Sequence[JudgmentRow]) -> int:
    """Judgments whose repeats fell on both sides of the pass threshold."""
    return sum(r.straddles for r in rows)
