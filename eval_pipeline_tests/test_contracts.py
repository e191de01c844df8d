"""The contract counts read a column or two as Python values (#12.4); they count what the
pandas masks over the whole table counted, on every kind of row and value."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from eval_pipeline import contracts
from eval_pipeline.frame_columns import TEXT_DTYPE


def _reference_scores_outside(table: pd.DataFrame) -> int:
    ok = table[table["status"] == "ok"]
    return sum(any(not 0.0 <= float(v) <= 1.0 for v in json.loads(s).values())
               for s in ok["scores"] if s)


def _reference_failure_rate_over(table: pd.DataFrame, threshold: float) -> float | None:
    attempted = table[table["status"] != "skipped"]
    if not len(attempted):
        return None
    rate = float((attempted["status"] != "ok").mean())
    return round(rate, 4) if rate > threshold else None


def _reference_disagreements(table: pd.DataFrame, max_spread: float) -> int:
    ok = table[(table["status"] == "ok") & table["spread"].notna()]
    return int((ok["spread"] > max_spread).sum())


def _tables() -> list[pd.DataFrame]:
    rng = np.random.default_rng(7)
    statuses = ["ok", "failed", "skipped"]
    tables = []
    for n in (0, 1, 7, 300):
        status = [statuses[i] for i in rng.integers(0, 3, n)]
        scores = [json.dumps({"a": float(v), "b": float(w)})
                  for v, w in rng.uniform(-0.2, 1.2, (n, 2))]
        spread = rng.uniform(0, 0.6, n)
        tables.append(pd.DataFrame({
            "status": pd.array(status, dtype=TEXT_DTYPE),
            "scores": pd.array(scores, dtype=TEXT_DTYPE),
            "spread": spread, "text": ["long text " * 20] * n}))
    odd = pd.DataFrame({
        "status": pd.array(["ok", None, "ok", "skipped", "ok", "failed"], dtype=TEXT_DTYPE),
        "scores": pd.array(['{"a": 1.5}', "{}", "", '{"a": 0.5}', '{"a": 0}', None],
                           dtype=TEXT_DTYPE),
        "spread": pd.Series([0.5, np.nan, None, 0.9, 0.1, 0.7], dtype=object)})
    tables += [odd, odd.astype({"spread": float}), odd.astype({"status": object})]
    tables.append(pd.DataFrame({"status": ["skipped"] * 3, "scores": ["{}"] * 3,
                                "spread": [np.nan] * 3}))
    return tables


@pytest.mark.parametrize("index", range(8))
def test_contract_counts_are_the_masks_counts(index: int) -> None:
    table = _tables()[index]
    assert (contracts.scores_outside_unit_interval(table)
            == _reference_scores_outside(table))
    for threshold in (0.0, 0.2, 0.5, 1.0):
        assert (contracts.failure_rate_over(table, threshold)
                == _reference_failure_rate_over(table, threshold))
    for spread in (0.0, 0.3, 0.5):
        assert contracts.disagreements(table, spread) == _reference_disagreements(table, spread)


def test_the_counts_see_the_violations() -> None:
    """Not only equal to the old code: a score above 1, a failed row and a wide spread are
    each counted."""
    table = _tables()[4]
    assert contracts.scores_outside_unit_interval(table) == 1
    assert contracts.failure_rate_over(table, 0.1) == round(2 / 5, 4)
    assert contracts.disagreements(table, 0.3) == 1
