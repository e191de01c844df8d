"""The tables' contracts as plain functions, each counting its violations in one batch.

The asset checks (``eval_pipeline.defs.pipeline.assets.contracts``) run them on every batch a
run materializes; kept here, without Dagster, so each rule is tested as plain code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd


def missing_columns(table: pd.DataFrame, expected: Sequence[str]) -> list[str]:
    """Columns of the contract the table lacks (extra columns are allowed)."""
    return [c for c in expected if c not in table.columns]


def scores_outside_unit_interval(table: pd.DataFrame) -> int:
    """Ok rows with a metric outside [0, 1] (a score column holds JSON objects)."""
    ok = table[table["status"] == "ok"]
    return sum(any(not 0.0 <= float(v) <= 1.0 for v in json.loads(s).values())
               for s in ok["scores"] if s)


def failure_rate_over(table: pd.DataFrame, threshold: float) -> float | None:
    """The failed share of attempted rows when it exceeds ``threshold``, else None."""
    attempted = table[table["status"] != "skipped"]
    if not len(attempted):
        return None
    rate = float((attempted["status"] != "ok").mean())
    return round(rate, 4) if rate > threshold else None


def disagreements(table: pd.DataFrame, max_spread: float) -> int:
    """Averaged rows whose judges' scores for one metric lie further apart than allowed."""
    ok = table[(table["status"] == "ok") & table["spread"].notna()]
    return int((ok["spread"] > max_spread).sum())


def unaccounted(read: int, kept: int, removed: int, quarantined: int) -> bool:
    """True when kept + removed + quarantined is not the number of records read."""
    return kept + removed + quarantined != read
