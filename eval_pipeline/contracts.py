"""The tables' contracts as plain functions, each counting its violations in one batch.

The asset checks (``eval_pipeline.defs.pipeline.assets.contracts``) run them on every batch a
run materializes; kept here, without Dagster, so each rule is tested as plain code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import pandas as pd

from eval_pipeline.frame_columns import column_values


def missing_columns(table: pd.DataFrame, expected: Sequence[str]) -> list[str]:
    """Columns of the contract the table lacks (extra columns are allowed)."""
    return [c for c in expected if c not in table.columns]


def scores_outside_unit_interval(table: pd.DataFrame) -> int:
    """Ok rows with a metric outside [0, 1] (a score column holds JSON objects)."""
    return sum(any(not 0.0 <= float(v) <= 1.0 for v in json.loads(s).values())
               for status, s in zip(column_values(table, "status"),
                                    column_values(table, "scores"), strict=True)
               if status == "ok" and s)


# The checks below read one or two columns as Python values: a boolean mask over the whole
# table (30 columns, long texts among them) for each check of each batch cost 1.3 % of a
# corpora run's CPU (#12.4). A missing status (NaN) counts as attempted and not ok, as
# pandas' comparisons count it.


def failed_share(statuses: Iterable[object]) -> float | None:
    """Failed among the attempted statuses (skipped ones were not attempted; a missing one
    was, and failed), unrounded; None when none were attempted. The failure-rate check and
    the judgments' ``failure_rate`` metadata both count it so."""
    attempted = [s for s in statuses if s != "skipped"]
    if not attempted:
        return None
    return sum(s != "ok" for s in attempted) / len(attempted)


def failure_rate_over(table: pd.DataFrame, threshold: float) -> float | None:
    """The failed share of attempted rows when it exceeds ``threshold``, else None."""
    rate = failed_share(column_values(table, "status"))
    return round(rate, 4) if rate is not None and rate > threshold else None


def disagreements(table: pd.DataFrame, max_spread: float) -> int:
    """Averaged rows whose judges' scores for one metric lie further apart than allowed."""
    return sum(1 for status, spread in zip(column_values(table, "status"),
                                           column_values(table, "spread"), strict=True)
               if status == "ok" and not pd.isna(spread) and spread > max_spread)


def unaccounted(read: int, kept: int, removed: int, quarantined: int) -> bool:
    """True when kept + removed + quarantined is not the number of records read."""
    return kept + removed + quarantined != read
