"""The figures the CLI prints about a run, added up one batch at a time (#12.3).

The summary used to be computed from whole-run DataFrames; here each batch's tables are
:meth:`RunFigures.add`-ed as the export reads them and only counts are kept, plus the few
float columns whose sum or mean is printed (one number per trajectory, judgment or
routing case), so a mean is computed over the same values in the same order, with the
same dtype, as over the concatenated column (``value_counts`` orders likewise, see
:func:`~eval_pipeline.exports.tables.value_counts`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from eval_pipeline.exports.pieces import Pieces
from eval_pipeline.preprocess import PreprocessStats

JUDGMENTS_PREFIX = "judgments__"
FIGURE_COLUMNS: dict[str, list[str]] = {
    "raw_trajectories": ["source_format"],
    "quarantine": ["reason"],
    "preprocess_report": ["reason"],
    "preprocessed_trajectories": ["format_corrected"],
    "clips": ["tool_type"],
    "routing_checks": ["passed", "partial_credit"],
    "trajectory_summaries": ["overall_trajectory_score"],
    JUDGMENTS_PREFIX: ["status", "cost_usd", "cached", "tokens_in", "tokens_out", "error"],
}
"""The columns each table's figures read (a judge's table by its prefix)."""


def _present(values: Iterable[Any]) -> list[Any]:
    return [v for v in values if v is not None and not (isinstance(v, float) and v != v)]


def _joined(pieces: Pieces[pd.Series] | None) -> pd.Series:
    joined = pieces.joined() if pieces is not None else None
    return joined if joined is not None else pd.Series(dtype="float64")


@dataclass
class JudgeFigures:
    """One judge's judgments: rows, statuses, cost, cache hits, tokens, first errors."""

    rows: int = 0
    status: Counter[str] = field(default_factory=Counter)
    ok: int = 0
    cached: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    costs: Pieces[pd.Series] = field(default_factory=Pieces)
    first_error: str | None = None
    first_breaker: str | None = None

    @property
    def cost(self) -> float:
        return float(_joined(self.costs).sum()) if self.rows else 0.0


@dataclass
class RunFigures:
    """What a run's summary reports, from each batch's tables (in the run's order, with
    the concatenated tables' dtypes: :meth:`Parts.read`)."""

    batches: int = 0
    tables: list[str] = field(default_factory=list)
    """The exported tables, by name (``evaluation_report`` last)."""
    rows: Counter[str] = field(default_factory=Counter)
    reasons: dict[str, Counter[Any]] = field(default_factory=dict)
    formats: Counter[Any] = field(default_factory=Counter)
    clip_tools: Counter[Any] = field(default_factory=Counter)
    judges: dict[str, JudgeFigures] = field(default_factory=dict)
    routing_passed: int = 0
    partial_credit: Pieces[pd.Series] | None = None
    scores: Pieces[pd.Series] = field(default_factory=Pieces)
    format_corrected: int = 0
    has_format_corrected: bool = False
    report_overall: dict[str, Any] | None = None
    """The report's ALL row."""
    routing_text: str | None = None
    """The routing report (``routing_report.txt``), when there were routing cases."""

    @classmethod
    def of_tables(cls, tables: Mapping[str, pd.DataFrame], batches: int = 1) -> RunFigures:
        """The figures of whole tables (each as one batch)."""
        figures = cls(batches=batches, tables=list(tables))
        for name, table in tables.items():
            figures.rows[name] += len(table)
            figures.add(name, table)
        return figures

    def add(self, name: str, frame: pd.DataFrame) -> None:
        """One batch of table ``name`` (its :data:`FIGURE_COLUMNS`; its rows are counted in
        :attr:`rows` by the caller, which reads the batch)."""
        if not len(frame):
            return
        if name == "raw_trajectories":
            if "source_format" in frame.columns:
                self.formats.update(_present(frame["source_format"]))
        elif name in ("quarantine", "preprocess_report"):
            self.reasons.setdefault(name, Counter()).update(_present(frame["reason"]))
        elif name == "preprocessed_trajectories" and "format_corrected" in frame.columns:
            self.has_format_corrected = True
            self.format_corrected += int(
                frame["format_corrected"].fillna(False).astype(bool).sum())
        elif name == "clips":
            self.clip_tools.update(_present(frame["tool_type"]))
        elif name == "routing_checks":
            self.routing_passed += int(frame["passed"].sum())
            if "partial_credit" in frame.columns:
                if self.partial_credit is None:
                    self.partial_credit = Pieces()
                self.partial_credit.append(frame["partial_credit"])
        elif name == "trajectory_summaries":
            self.scores.append(frame["overall_trajectory_score"].dropna())
        elif name.startswith(JUDGMENTS_PREFIX):
            self._judgments(name[len(JUDGMENTS_PREFIX):], frame)

    def _judgments(self, judge: str, frame: pd.DataFrame) -> None:
        figures = self.judges.setdefault(judge, JudgeFigures())
        figures.rows += len(frame)
        figures.status.update({str(k): int(v)
                               for k, v in frame["status"].value_counts().items()})
        figures.ok += int((frame["status"] == "ok").sum())
        figures.cached += int(frame["cached"].sum())
        figures.tokens_in += int(frame["tokens_in"].sum())
        figures.tokens_out += int(frame["tokens_out"].sum())
        figures.costs.append(frame["cost_usd"])
        if figures.first_breaker is None:
            errors = [e for e in frame["error"] if isinstance(e, str) and e]
            if figures.first_error is None and errors:
                figures.first_error = errors[0]
            figures.first_breaker = next((e for e in errors if "circuit breaker open" in e),
                                         None)

    def judge(self, name: str) -> JudgeFigures:
        return self.judges.get(name, JudgeFigures())

    @property
    def mean_score(self) -> tuple[float, int] | None:
        """The mean overall score and the trajectories scored (None: nothing scored)."""
        scored = _joined(self.scores)
        return (float(scored.mean()), len(scored)) if len(scored) else None

    @property
    def mean_partial_credit(self) -> float | None:
        return (float(_joined(self.partial_credit).mean())
                if self.partial_credit is not None else None)

    def preprocessing(self) -> PreprocessStats:
        """The original tool's PREPROCESSING STATISTICS (see ``cli.preprocessing_statistics``)."""
        kept, removed = self.rows["preprocessed_trajectories"], self.rows["preprocess_report"]
        reasons = self.reasons.get("preprocess_report", Counter())
        return PreprocessStats(
            total=(self.rows["raw_trajectories"] if "raw_trajectories" in self.tables
                   else kept + removed),
            valid=kept,
            removed_frequency=int(reasons.get("frequency", 0)),
            removed_duplicates=int(reasons.get("duplicates", 0)),
            format_issues_fixed=self.format_corrected if kept and self.has_format_corrected
            else 0)
