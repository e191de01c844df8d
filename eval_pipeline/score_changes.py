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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from eval_pipeline.contracts import failed_share
from eval_pipeline.frame_columns import series_values
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


# The scanner of a decoder with json.loads' default options (not in the stubs: set in its
# __init__, the C scanner where there is one).
_SCAN_ONCE: Callable[[str, int], tuple[Any, int]] = (
    json.JSONDecoder().scan_once)  # type: ignore[attr-defined]


def loads_json(text: Any) -> Any:
    """``json.loads(text)``: the same value, or the same error, in 40 % of its time on the
    score objects of a batch (5.4 against 13.4 ms for the 3,971 of a corpora run's largest,
    #12.4).

    ``json.loads`` skips whitespace around the value, with a regular expression each side,
    around the C scanner. A text that the scanner reads whole from its first character has
    no whitespace around it, and ``json.loads`` would read it with the same call: its value
    is returned. Anything else (whitespace, extra data, an error, bytes) goes to
    ``json.loads``, which answers or raises as before.
    """
    if type(text) is str:
        try:
            value, end = _SCAN_ONCE(text, 0)
        except (StopIteration, ValueError):
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


def _parsed(value: object) -> dict[str, float]:
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    if isinstance(value, str) and value and value != "{}":
        return {str(k): float(v) for k, v in loads_json(value).items()}
    return {}


def _decoded(value: object) -> Mapping[Any, object]:
    """:func:`_parsed` without its copy of a JSON object: the object as decoded. Its keys are
    strings and, where :func:`metric_means_counts` takes it (every value a float or a small
    int), its values are what ``float`` makes of them; else the caller asks :func:`_parsed`.
    """
    if isinstance(value, str) and value and value != "{}":
        decoded = loads_json(value)
        if type(decoded) is dict:
            return decoded
    return _parsed(value)


_EXACT_INT = 1 << 31
"""An int score below this (in magnitude) is summed as its float: sums of such ints stay
exact in float64, as pandas' sum of an int column (cast to float64) is."""


def metric_means_counts(rows: Sequence[Mapping[Any, object]]
                        ) -> dict[Any, tuple[float, int]] | None:
    """Per metric, in order of first appearance: the mean over the rows holding a number for
    it and how many do, as ``pd.DataFrame(rows)``'s ``mean()`` and ``count()`` give them,
    bit for bit (a NaN counts as missing). None when a value is not a float or a small int:
    the caller asks pandas, which has its own rules for other values.

    Without the frame: the frames of ``metric_stats`` and ``metric_means`` were most of
    judgment_changes (2.0 %), averaged_changes (2.7 %), judgment_metadata (2.6 %) and
    averaged_metadata (1.6 %) of a corpora run's CPU (452 batches, py-spy, #12.4), for the
    means and counts of a few metrics. The mean is pandas' own sum: its block of a frame
    built from dicts is one C-contiguous float64 array, metrics x rows, NaN set to 0 and
    summed along the rows (numpy's pairwise sum, whose grouping depends on the rows'
    positions, empty ones included), then divided by the count. The same array, laid out
    the same way and summed the same way, gives the same sums.
    """
    n = len(rows)
    columns: dict[Any, list[float]] = {}
    nan = float("nan")
    for i, row in enumerate(rows):
        for metric, value in row.items():
            if type(value) is not float:
                if type(value) is not int or not -_EXACT_INT < value < _EXACT_INT:
                    return None
                value = float(value)
            column = columns.get(metric)
            if column is None:
                column = columns[metric] = [nan] * n
            column[i] = value
    if not columns:
        return {}
    block = np.array(list(columns.values()), dtype=np.float64)
    missing = np.isnan(block)
    counts = (n - missing.sum(axis=1)).tolist()
    block[missing] = 0.0
    sums = block.sum(axis=1).tolist()
    return {metric: (total / count if count else nan, count)
            for metric, total, count in zip(columns, sums, counts, strict=True)}


def metric_stats(scores: Iterable[object]) -> dict[str, tuple[float, int]]:
    """Per metric: mean and number of rows holding it (``scores`` JSON objects, or dicts).

    The means of :func:`metric_means_counts`, the frame's ``mean()`` bit for bit without
    building it (a frame per batch for the judgments and one for the averages, most of
    their stats' 2.0 and 2.7 % of a corpora run's CPU, #12.4).
    """
    values = series_values(scores) if isinstance(scores, pd.Series) else list(scores)
    stats = metric_means_counts([_decoded(s) for s in values])
    if stats is None:  # a value that is not a number: converted by _parsed (or raising)
        stats = metric_means_counts([_parsed(s) for s in values])
    assert stats is not None  # _parsed makes every value a float
    return {metric: (round(mean, 4), count)
            for metric, (mean, count) in sorted(stats.items()) if count}


def failure_rate(status: pd.Series | Sequence[object]) -> float | None:
    """Failed among the attempted rows (skipped rows were not attempted); None: none were.
    A missing status counts as attempted and failed.

    The statuses as Python values, not two comparisons, a mask and a mean over Series (part
    of judgment_changes' and averaged_changes' CPU in a corpora run, #12.4); the same rate:
    a count over a count, divided once, either way.
    """
    rate = failed_share(series_values(status) if isinstance(status, pd.Series) else status)
    return round(rate, 4) if rate is not None else None


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
