"""Asset checks on the tables' contracts, one result per check and run (a run may hold many
batches; the failing ones are named in ``failed_batches``), emitted in the asset's own step so
they cost no extra step. Warnings (judge failure rate, inter-judge disagreement) have
thresholds in the ``pipeline`` resource; the rules are in :mod:`eval_pipeline.contracts`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import dagster as dg
import pandas as pd

Frames = Mapping[str, pd.DataFrame]


def batch_check(key: dg.AssetKey, name: str, tables: Frames,
                violation: Callable[[pd.DataFrame], object],
                severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
                **metadata: float) -> dg.AssetCheckResult:
    """``violation`` returns a falsy value for a batch that keeps the contract."""
    failed = {b: v for b, t in tables.items() if (v := violation(t))}
    return dg.AssetCheckResult(
        asset_key=key, check_name=name, passed=not failed, severity=severity,
        metadata={"batches": len(tables), "failed": len(failed),
                  "failed_batches": dg.MetadataValue.json(failed), **metadata})


def spec(key: dg.AssetKey | str, name: str, description: str,
         warn: bool = False) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(name, asset=key, description=description + (
        " (a warning: the asset is still materialized)" if warn else ""))
