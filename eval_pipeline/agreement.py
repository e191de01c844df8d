"""How well the judges' scores agree with the labels a source carries.

Real corpora come with ground truth of their own: an outcome per trajectory (success, reward,
a +1/-1 final label) and sometimes a human label per step. The question a user asks of a
judge is whether it ranks good work above bad, so the measure is the AUC: the probability
that a randomly chosen positive item scores higher than a randomly chosen negative one
(ties count half). 0.5 is chance, 1.0 a perfect ranking; no figure without both classes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel


class Agreement(BaseModel):
    auc: float | None
    positives: int
    negatives: int


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def auc(pairs: Iterable[tuple[Any, bool | None]]) -> Agreement:
    """AUC of (score, is_positive) pairs; pairs with no score or no label are left out."""
    pos: list[float] = []
    neg: list[float] = []
    for score, positive in pairs:
        value = _finite(score)
        if value is None or positive is None:
            continue
        (pos if positive else neg).append(value)
    if not pos or not neg:
        return Agreement(auc=None, positives=len(pos), negatives=len(neg))
    ranked = sorted([(v, 1) for v in pos] + [(v, 0) for v in neg])
    rank_sum, i = 0.0, 0
    while i < len(ranked):  # average ranks over ties
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        average_rank = (i + 1 + j) / 2
        rank_sum += average_rank * sum(flag for _, flag in ranked[i:j])
        i = j
    u = rank_sum - len(pos) * (len(pos) + 1) / 2
    return Agreement(auc=u / (len(pos) * len(neg)), positives=len(pos), negatives=len(neg))


def outcome_of(row: Mapping[Any, Any]) -> bool | None:
    """A trajectory's outcome label: final_label, else reward, else success."""
    final = _finite(row.get("final_label"))
    if final is not None and final != 0:
        return final > 0
    reward = _finite(row.get("reward"))
    if reward is not None:
        return reward >= 1.0
    success = row.get("success")
    if isinstance(success, bool):
        return success
    return None


def step_label_positive(label: Any) -> bool | None:
    """A clip's human label: above 0 is good, below 0 harmful, 0 (neutral) is left out."""
    value = _finite(label)
    if value is None or value == 0:
        return None
    return value > 0
