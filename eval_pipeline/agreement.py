"""How well the judges' scores agree with the labels a source carries.

Real corpora come with ground truth of their own: an outcome per trajectory (success, reward,
a +1/-1 final label) and sometimes a human label per step. The question a user asks of a
judge is whether it ranks good work above bad, so the measure is the AUC: the probability
that a randomly chosen positive item scores higher than a randomly chosen negative one
(ties count half). 0.5 is chance, 1.0 a perfect ranking; no figure without both classes.

A user also asks whether the judges agree with each other, and how often a judge's verdict is
the human's. For those: Krippendorff's alpha (interval) over the judges' scores, from the
``krippendorff`` package, because it takes any number of judges and missing scores (a judge
that failed on a clip) as they come; Fleiss' kappa over the judges' labels; and, against a
human label, accuracy, Cohen's kappa and a confusion matrix of binary decisions. Both kappas
are a few lines of numpy here: the libraries that have them (statsmodels, scikit-learn) bring
scipy along, which the pipeline does not otherwise need; the tests check these against
statsmodels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import krippendorff
import numpy as np
from pydantic import BaseModel

PASS_THRESHOLD = 0.5
"""A score at or above this is a judge's "good" (pass) decision, below it "bad": scores are
in [0, 1] and the rubrics read 0.5 as the middle, so this is the one cut that favours
neither side."""


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


def passes(score: float, threshold: float = PASS_THRESHOLD) -> bool:
    """A judge's binary decision from its score (see :data:`PASS_THRESHOLD`)."""
    return score >= threshold


def krippendorff_interval(matrix: Any) -> float | None:
    """Krippendorff's alpha, interval metric, of a judges x items matrix (NaN: no score).

    Only items that two or more judges scored carry information; None when there are none,
    fewer than two judges, or every score is the same value (no expected disagreement, so
    alpha is 0/0: perfect agreement that says nothing about the judges).
    """
    data = np.asarray(matrix, dtype=float)
    if data.ndim != 2 or data.shape[0] < 2:
        return None
    data = data[:, np.sum(~np.isnan(data), axis=0) >= 2]
    values = data[~np.isnan(data)]
    if values.size == 0 or np.all(values == values[0]):
        return None
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement="interval"))


def fleiss_kappa(counts: Any) -> float | None:
    """Fleiss' kappa of an items x categories table of rater counts (every row the same total).

    None with fewer than one item or two raters, or when every rating falls in one category
    (chance agreement is 1, kappa 0/0).
    """
    table = np.asarray(counts, dtype=float)
    if table.ndim != 2 or table.shape[0] == 0:
        return None
    raters = table.sum(axis=1)
    if raters[0] < 2 or not np.all(raters == raters[0]):
        return None
    n = raters[0]
    shares = table.sum(axis=0) / table.sum()
    observed = float(np.mean((np.sum(table * table, axis=1) - n) / (n * (n - 1))))
    chance = float(np.sum(shares * shares))
    if chance >= 1.0:
        return None
    return (observed - chance) / (1.0 - chance)


class BinaryAgreement(BaseModel):
    """A judge's pass/fail decisions against the human's good/bad: the human is the truth."""

    items: int
    accuracy: float | None
    cohen_kappa: float | None
    true_positive: int
    false_positive: int
    false_negative: int
    true_negative: int


def binary_agreement(pairs: Iterable[tuple[bool, bool]]) -> BinaryAgreement:
    """Accuracy, Cohen's kappa and the confusion matrix of (human good, judge pass) pairs.

    Kappa is None when chance agreement is 1 (both sides gave one answer to everything).
    """
    tp = fp = fn = tn = 0
    for human, judge in pairs:
        if human and judge:
            tp += 1
        elif judge:
            fp += 1
        elif human:
            fn += 1
        else:
            tn += 1
    n = tp + fp + fn + tn
    if not n:
        return BinaryAgreement(items=0, accuracy=None, cohen_kappa=None, true_positive=0,
                               false_positive=0, false_negative=0, true_negative=0)
    observed = (tp + tn) / n
    human_good, judge_pass = (tp + fn) / n, (tp + fp) / n
    chance = human_good * judge_pass + (1 - human_good) * (1 - judge_pass)
    kappa = (observed - chance) / (1 - chance) if chance < 1 else None
    return BinaryAgreement(items=n, accuracy=observed, cohen_kappa=kappa, true_positive=tp,
                           false_positive=fp, false_negative=fn, true_negative=tn)
