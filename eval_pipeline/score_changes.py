"""Why did this score change? Score statistics, deltas and version diffs between two
materializations of the same table, without Dagster.

A user who sees a batch's mean move wants, beside the number, what moved (the rows whose
score changed most) and why (which upstream version differs: the batch's content, the rubric
and template version, a judge's provider, model or parameters, the parser). The Dagster glue
(``eval_pipeline.defs.pipeline.assets.changes``) reads the previous materialization and turns
these values into metadata; everything computed lives here so it is tested as plain code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.presets import effective_model

MOVE_THRESHOLD = 0.1
"""A row whose score moved by more than this counts as moved (scores are in [0, 1])."""
TOP_MOVERS = 5

# Judge fields that shape its answers (the same ones its asset's code_version hashes), read
# one by one so a change names the field, not only "the judge changed".
_JUDGE_PARAMETERS = ("base_url", "preset", "output_mode", "schema_bounds", "score_steps",
                     "text_max_chars", "temperature", "max_tokens", "context_budget_chars",
                     "input_max_chars", "evaluations")


def content_hash(path: Path) -> str:
    """The batch file's content, hashed: its data version, so an identical re-drop (a new
    mtime, the same bytes) is the same version and makes nothing downstream stale."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def combined_hash(parts: Mapping[str, str]) -> str:
    """One version over several batches' versions (sorted, so order does not matter)."""
    return hashlib.sha256(json.dumps(sorted(parts.items())).encode()).hexdigest()[:16]


def judge_versions(config: JudgeConfig) -> dict[str, str]:
    """A judge's provider, model and each answer-shaping parameter, keyed by judge name."""
    values = config.model_dump(include=set(_JUDGE_PARAMETERS))
    prefix = f"judge.{config.name}"
    return {f"{prefix}.provider": config.provider, f"{prefix}.model": effective_model(config),
            **{f"{prefix}.{k}": json.dumps(values[k], sort_keys=True, default=str)
               for k in _JUDGE_PARAMETERS if k in values}}


def version_changes(previous: Mapping[str, str] | None, current: Mapping[str, str]
                    ) -> list[str]:
    """Each upstream version that differs, as ``name: old -> new`` (sorted).

    Nothing when there is no previous materialization or it predates version recording: a
    change is named only when both sides are known.
    """
    if not previous:
        return []
    names = sorted(set(previous) | set(current))
    return [f"{n}: {previous.get(n, '(none)')} -> {current.get(n, '(none)')}"
            for n in names if previous.get(n) != current.get(n)]


def _parsed(value: object) -> dict[str, float]:
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    if isinstance(value, str) and value and value != "{}":
        return {str(k): float(v) for k, v in json.loads(value).items()}
    return {}


def metric_stats(scores: Iterable[object]) -> dict[str, tuple[float, int]]:
    """Per metric: mean and number of rows holding it (``scores`` JSON objects)."""
    frame = pd.DataFrame([_parsed(s) for s in scores])
    if frame.empty:
        return {}
    # One reduction over the frame, not two per metric (some 40 metrics: 1.7 ms a table,
    # for every batch of judgments and averages, #12.4); the same means, bit for bit.
    means, counts = frame.mean(), frame.count()
    return {str(m): (round(float(means[m]), 4), int(counts[m]))
            for m in sorted(frame.columns) if counts[m]}


def failure_rate(status: pd.Series) -> float | None:
    """Failed among the attempted rows (skipped rows were not attempted); None: none were."""
    attempted = status[status != "skipped"]
    return round(float((attempted != "ok").mean()), 4) if len(attempted) else None


def row_scores(table: pd.DataFrame, keys: Sequence[str], score: str) -> pd.Series:
    """One score per row, indexed by ``keys`` joined with '/'.

    ``score`` names a numeric column, or ``scores`` (a JSON object per row, averaged over
    its metrics). Rows without a score are left out: a failure is not a score of 0.
    """
    if table.empty or score not in table.columns:
        return pd.Series(dtype=float)
    if score == "scores":
        values = [sum(p.values()) / len(p) if (p := _parsed(s)) else None
                  for s in table["scores"]]
    else:
        values = [None if pd.isna(v) else float(v) for v in table[score]]
    index = table[list(keys)].astype(str).agg("/".join, axis=1)
    series = pd.Series(values, index=index.to_numpy(), dtype=float).dropna()
    return series[~series.index.duplicated(keep="first")]


@dataclass(frozen=True)
class ScoreDelta:
    """What changed between the previous and the current scores of one table."""

    mean: float | None
    previous_mean: float | None
    compared: int
    """Rows scored in both."""
    moved: int
    """Of those, rows whose score moved by more than the threshold."""
    added: int
    removed: int
    movers: list[dict[str, object]] = field(default_factory=list)
    """The largest moves, largest first: key, previous, current, change."""

    @property
    def mean_change(self) -> float | None:
        if self.mean is None or self.previous_mean is None:
            return None
        return round(self.mean - self.previous_mean, 4)


def compare_scores(previous: pd.Series | None, current: pd.Series,
                   threshold: float = MOVE_THRESHOLD, top: int = TOP_MOVERS
                   ) -> ScoreDelta | None:
    """The change from ``previous`` to ``current`` (see :func:`row_scores`); None without a
    previous materialization to compare with."""
    if previous is None:
        return None
    both = previous.index.intersection(current.index)
    change = (current[both] - previous[both]).round(4)
    moved = change[change.abs() > threshold]
    order = moved.abs().sort_values(ascending=False, kind="stable").index[:top]
    return ScoreDelta(
        mean=round(float(current.mean()), 4) if len(current) else None,
        previous_mean=round(float(previous.mean()), 4) if len(previous) else None,
        compared=len(both), moved=len(moved),
        added=len(current.index.difference(previous.index)),
        removed=len(previous.index.difference(current.index)),
        movers=[{"key": str(k), "previous": round(float(previous[k]), 4),
                 "current": round(float(current[k]), 4), "change": float(change[k])}
                for k in order],
    )
