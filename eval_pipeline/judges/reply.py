"""The one check every reply passes before it becomes an ok row, wherever it came from
(a provider this run, or the cache from an earlier one)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from eval_pipeline.judges.base import JudgeReply

__all__ = ["InvalidReply", "validate_reply"]


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
