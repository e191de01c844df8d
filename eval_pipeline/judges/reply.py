"""The one check every reply passes before it becomes an ok row, wherever it came from
(a provider this run, in any reply mode, or the cache from an earlier one).

It accepts what real models send and refuses what would need inventing:

- a clip rubric needs every metric (names in any case or spacing: "Code Correctness" is
  ``code_correctness``), each a number or a numeric string in [0, 1]. A missing metric or a
  score out of range fails; nothing is filled in or clipped. Extra keys are ignored.
- a ReAct kind needs a label, one of the kind's two (trimmed, any case, quotes dropped).
  Its score follows from the label, as in the seed (positive 1.0, the other 0.0); a score
  the reply carries beside it is ignored, never a reason to fail.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from eval_pipeline.judges.base import JudgeReply
from eval_pipeline.judges.errors import InvalidOutput

__all__ = ["InvalidReply", "canonical_reply", "metric_key", "validate_reply"]


class InvalidReply(InvalidOutput, ValueError):
    """A reply that arrived but cannot be used as it is; it earns one repair attempt."""

    def __init__(self, message: str, raw_response: str = "", *, tokens_in: int = 0,
                 tokens_out: int = 0):
        super().__init__(message, raw_response=raw_response, tokens_in=tokens_in,
                         tokens_out=tokens_out)


_NON_WORD = re.compile(r"[^0-9a-z]+")


def metric_key(name: str) -> str:
    """``Code Correctness``, ``code-correctness`` and ``CODE_CORRECTNESS`` are one metric."""
    return _NON_WORD.sub("_", str(name).strip().lower()).strip("_")


def _number(metric: str, value: Any, raw: str) -> float:
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise InvalidReply(f"score {metric!r} is not a number: {value!r}", raw) from None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise InvalidReply(f"score {metric!r} is not a number: {value!r}", raw)
    number = float(number)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InvalidReply(f"score {metric!r} out of range [0, 1]: {value!r}", raw)
    return number


def _rubric_scores(given: Mapping[str, Any], metrics: Sequence[str], raw: str
                   ) -> dict[str, float]:
    by_key: dict[str, list[tuple[str, Any]]] = {}
    for name, value in given.items():
        by_key.setdefault(metric_key(name), []).append((name, value))
    missing = [m for m in metrics if metric_key(m) not in by_key]
    if missing:
        raise InvalidReply(f"missing metrics: {missing}", raw)
    scores: dict[str, float] = {}
    for metric in metrics:
        values = {_number(metric, v, raw) for _, v in by_key[metric_key(metric)]}
        if len(values) > 1:
            names = [n for n, _ in by_key[metric_key(metric)]]
            raise InvalidReply(f"metric {metric!r} given twice with different scores "
                               f"({names})", raw)
        scores[metric] = values.pop()
    return scores


def _canonical_label(label: str | None, labels: Sequence[str], raw: str) -> str:
    cleaned = (label or "").strip().strip("\"'`*.[]() ").lower()
    for allowed in labels:
        if cleaned == allowed.lower():
            return allowed
    raise InvalidReply(f"label must be one of {list(labels)}, got {label!r}", raw)


def canonical_reply(reply: JudgeReply, metrics: Sequence[str], labels: Sequence[str] = ()
                    ) -> JudgeReply:
    """The reply with exactly the rubric's metric names, float scores and the canonical
    label; raises :class:`InvalidReply` (with the raw answer) when it cannot be used."""
    raw = reply.raw_response
    label = reply.label
    if labels:
        label = _canonical_label(reply.label, labels, raw)
        scores = dict.fromkeys(metrics, 1.0 if label == labels[0] else 0.0)
    else:
        scores = _rubric_scores(reply.scores, metrics, raw)
    return reply.model_copy(update={"scores": scores, "label": label})


def validate_reply(reply: JudgeReply, metrics: Sequence[str],
                   labels: Sequence[str] = ()) -> dict[str, float]:
    """The scores of a usable reply, keyed by the rubric's metric names."""
    return canonical_reply(reply, metrics, labels).scores
