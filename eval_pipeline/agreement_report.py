"""Do the judges agree with each other, and with the humans? Per batch, two tables.

``judge_agreement`` has one row per comparison:

- ``between_judges``, per evaluation kind and metric: Krippendorff's alpha (interval) over
  the judges' scores, Fleiss' kappa over their labels (the ReAct kinds, whose labels are
  verdicts), the spread (max - min over the judges) per clip summarised as mean and max, and
  how many clips the judges disagree on by more than the threshold. Only with two or more
  judges: one judge agrees with itself.
- ``step_label`` and ``outcome``, per judge, wherever the source carries human labels: the
  judge's clip score (mean of its rubric metrics) against the clip's human step label, and
  its trajectory score (the original tool's ``overall_trajectory_score`` from that judge's
  clips alone) against the trajectory's outcome (``final_label``, ``reward``, ``success``).
  A score at or above :data:`~eval_pipeline.agreement.PASS_THRESHOLD` is the judge's "good":
  accuracy, Cohen's kappa and the confusion matrix compare those decisions, the AUC the
  ranking.

``judge_disagreements`` lists what a reviewer should look at: every clip and metric where
the judges' spread exceeds the threshold (with each judge's score), and every item where a
judge's decision is not the human's (human label, judge score).

The figures are per batch because every other asset is; a batch is a corpus file or a
slice of one, so the figures of a corpus come from running it as one batch (or from
:func:`build_agreement` over the concatenated tables, as the README's figures were made).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from pandas.core.dtypes.cast import maybe_box_native  # type: ignore[attr-defined]
from pydantic import BaseModel
from tabulate import tabulate

from eval_pipeline.agreement import (
    PASS_THRESHOLD,
    auc,
    binary_agreement,
    fleiss_kappa,
    krippendorff_interval,
    outcome_of,
    passes,
    step_label_positive,
)
from eval_pipeline.frame_columns import column_values, text_array
from eval_pipeline.rubrics import EVAL_KIND_CLIP, REACT_EVALUATIONS
from eval_pipeline.scoring.averaging import json_object, mean
from eval_pipeline.scoring.summaries import evaluation_metadata

DEFAULT_DISAGREEMENT_THRESHOLD = 0.5
"""Judges whose scores for one clip and metric differ by more than this disagree: on a 0..1
scale, more than half the range apart is one calling the step good and another bad."""

Comparison = Literal["between_judges", "step_label", "outcome"]


class AgreementRow(BaseModel):
    batch: str
    comparison: Comparison
    judge: str | None = None
    evaluation_kind: str | None = None
    metric: str | None = None
    items: int
    judges: int
    krippendorff_alpha: float | None = None
    fleiss_kappa: float | None = None
    mean_spread: float | None = None
    max_spread: float | None = None
    disagreements: int = 0
    accuracy: float | None = None
    cohen_kappa: float | None = None
    true_positive: int | None = None
    false_positive: int | None = None
    false_negative: int | None = None
    true_negative: int | None = None
    auc: float | None = None
    positives: int | None = None
    negatives: int | None = None


class DisagreementRow(BaseModel):
    batch: str
    comparison: Comparison
    judge: str | None = None
    trajectory_id: str
    task_id: str | None = None
    clip_index: int | None = None
    evaluation_kind: str | None = None
    metric: str | None = None
    human_label: float | None = None
    """The step label as the source has it (+1 good, 0 neutral, -1 bad; a clip spanning
    several steps has their mean); for an outcome, +1.0 good or -1.0 bad."""
    judge_score: float | None = None
    spread: float | None = None
    scores: str | None = None
    """Between judges: JSON object judge -> score."""


AGREEMENT_COLUMNS = list(AgreementRow.model_fields)
DISAGREEMENT_COLUMNS = list(DisagreementRow.model_fields)
_LONG_COLUMNS = ["judge", "trajectory_id", "clip_index", "evaluation_kind", "tool_type",
                 "metric", "score", "label"]
_JUDGMENT_COLUMNS = ["status", "trajectory_id", "clip_index", "evaluation_kind", "tool_type",
                     "scores"]
"""The columns of a judgments table the scores are read from (and ``label`` if present)."""
_OUTCOME_COLUMNS = ["trajectory_id", "task_id", "final_label", "reward", "success"]
"""The columns of the trajectories the comparison with humans reads: the ids and the three
labels :func:`~eval_pipeline.agreement.outcome_of` reads (the asset loads the same, its
``OUTCOME_COLUMNS``)."""

ScoreRow = tuple[str, Any, int, Any, Any, str, float, Any]
"""One row of :func:`judge_scores`' long table, in the order of its columns: judge,
trajectory_id, clip_index, evaluation_kind, tool_type, metric, score, label."""


def judge_scores(judgments: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every ok judgment's scores in long form: one row per judge, clip, kind and metric."""
    return pd.DataFrame(_score_rows(judgments), columns=_LONG_COLUMNS)


def _score_rows(judgments: Mapping[str, pd.DataFrame]) -> list[ScoreRow]:
    """:func:`judge_scores`' rows as tuples, read from the six columns' values (and the
    labels') and filtered in Python. ``table[table["status"] == "ok"]`` took every column of
    the judgments (some 30, the prompts and replies too) through a boolean mask to read six;
    the long frame was masked twice more per judge by the comparison with humans: with the
    rows' conversions, a 5 % share of the CPU of a run over 452 small batches of one judge
    went to build_agreement's pandas overhead, not its work (py-spy, #12.4)."""
    rows: list[ScoreRow] = []
    for judge, table in judgments.items():
        if not len(table):
            continue
        status, tids, clip_indexes, kinds, tools, scores = (
            column_values(table, name) for name in _JUDGMENT_COLUMNS)
        labels = (column_values(table, "label") if "label" in table.columns
                  else [None] * len(table))
        for ok, tid, ci, kind, tool, text, label in zip(
                status, tids, clip_indexes, kinds, tools, scores, labels, strict=True):
            if not _is_ok(ok):
                continue
            for metric, value in json_object(text).items():
                rows.append((judge, tid, int(ci), kind, tool, metric, float(value), label))
    return rows


def _is_ok(status: Any) -> bool:
    """``status == "ok"`` as the column's comparison has it: False for a missing status
    (NaN, None, ``pd.NA``) rather than the NA that ``pd.NA == "ok"`` is."""
    return isinstance(status, str) and status == "ok"


def _between_judges(batch: str, long: pd.DataFrame, judges: list[str], threshold: float
                    ) -> tuple[list[AgreementRow], list[DisagreementRow]]:
    rows: list[AgreementRow] = []
    listed: list[DisagreementRow] = []
    for (kind, metric), group in long.groupby(["evaluation_kind", "metric"], sort=True):
        # tool_type too: a trajectory's category assessments share clip_index -1.
        grid = group.pivot_table(index="judge",
                                 columns=["trajectory_id", "clip_index", "tool_type"],
                                 values="score", aggfunc="first").reindex(judges)
        values = grid.to_numpy(dtype=float)
        rated = np.sum(~np.isnan(values), axis=0)
        shared = rated >= 2
        spreads = (np.nanmax(values[:, shared], axis=0) - np.nanmin(values[:, shared], axis=0)
                   if shared.any() else np.array([]))
        units: list[tuple[str, int]] = [
            (str(u[0]), int(u[1])) for u, keep in zip(grid.columns, shared, strict=True)
            if keep]
        over = [(u, s, i) for i, (u, s) in enumerate(zip(units, spreads, strict=True))
                if s > threshold]
        kappa = None
        if kind in REACT_EVALUATIONS:
            kappa = _label_kappa(group, len(judges))
        rows.append(AgreementRow(
            batch=batch, comparison="between_judges", evaluation_kind=str(kind),
            metric=str(metric), items=int(shared.sum()), judges=len(judges),
            krippendorff_alpha=krippendorff_interval(values), fleiss_kappa=kappa,
            mean_spread=float(spreads.mean()) if spreads.size else None,
            max_spread=float(spreads.max()) if spreads.size else None,
            disagreements=len(over)))
        shared_values = values[:, shared]
        for (tid, ci), spread, i in over:
            per_judge = {j: float(v) for j, v in zip(judges, shared_values[:, i], strict=True)
                         if not np.isnan(v)}
            listed.append(DisagreementRow(
                batch=batch, comparison="between_judges", trajectory_id=str(tid),
                clip_index=int(ci), evaluation_kind=str(kind), metric=str(metric),
                spread=float(spread), scores=json.dumps(per_judge)))
    return rows, listed


def _label_kappa(group: pd.DataFrame, n_judges: int) -> float | None:
    """Fleiss' kappa over the clips every judge labelled (the statistic needs one count)."""
    per_unit: dict[tuple[str, int], list[str]] = defaultdict(list)
    for tid, ci, label in zip(group["trajectory_id"], group["clip_index"], group["label"],
                              strict=True):
        if isinstance(label, str) and label:
            per_unit[(tid, int(ci))].append(label)
    complete = [labels for labels in per_unit.values() if len(labels) == n_judges]
    categories = sorted({label for labels in complete for label in labels})
    if not complete or len(categories) < 1:
        return None
    table = [[labels.count(c) for c in categories] for labels in complete]
    return fleiss_kappa(table)


def _human_step_labels(clips: pd.DataFrame) -> dict[tuple[str, int], float]:
    """Each labelled clip's human step label, by (trajectory_id, clip_index)."""
    human_step: dict[tuple[str, int], float] = {}
    if "human_label" in clips.columns:
        for tid, ci, label in zip(column_values(clips, "trajectory_id"),
                                  column_values(clips, "clip_index"),
                                  column_values(clips, "human_label"), strict=True):
            if label is not None and not pd.isna(label):
                human_step[(tid, int(ci))] = float(label)
    return human_step


def _outcome_records(trajectories: pd.DataFrame) -> list[dict[str, Any]]:
    """``trajectories.to_dict("records")`` over only the columns the comparison with humans
    reads (:data:`_OUTCOME_COLUMNS`, those present), from their values: the same values
    (``to_dict`` boxes those of object and extension columns to Python ones with pandas'
    own ``maybe_box_native``, which every value goes through here; a numpy column's values
    are Python ones already). ``to_dict`` of the whole table converted every column (the
    texts, the steps) and built a Series per column for ~10 rows; one of the overheads
    behind build_agreement's 5 % of a run's CPU (#12.4). A table with rows but none of the
    columns gives empty records, whose missing ``trajectory_id`` raises as before."""
    names = [name for name in _OUTCOME_COLUMNS if name in trajectories.columns]
    if not names:
        return [{} for _ in range(len(trajectories))]
    columns = [[maybe_box_native(v) for v in column_values(trajectories, name)]
               for name in names]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _clip_rubric_scores(scores: Sequence[ScoreRow], judge: str
                        ) -> tuple[dict[tuple[str, int], dict[str, float]],
                                   dict[tuple[str, int], str]]:
    """One judge's clip rubric scores by clip, metric -> score, and each clip's tool type:
    the rows a boolean mask over the long frame per kind and per judge selected (#12.4)."""
    clip_metrics: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    tool_of: dict[tuple[str, int], str] = {}
    for name, tid, ci, kind, tool, metric, score, _label in scores:
        if kind == EVAL_KIND_CLIP and name == judge:
            clip_metrics[(tid, ci)][metric] = score
            tool_of[(tid, ci)] = tool
    return clip_metrics, tool_of


def _against_humans(batch: str, scores: Sequence[ScoreRow], judges: list[str],
                    clips: pd.DataFrame, trajectories: pd.DataFrame
                    ) -> tuple[list[AgreementRow], list[DisagreementRow]]:
    human_step = _human_step_labels(clips)
    outcomes: dict[str, bool] = {}
    task_ids: dict[str, str] = {}
    for record in _outcome_records(trajectories):
        task_ids[record["trajectory_id"]] = str(record.get("task_id"))
        outcome = outcome_of(record)
        if outcome is not None:
            outcomes[record["trajectory_id"]] = outcome
    rows: list[AgreementRow] = []
    listed: list[DisagreementRow] = []
    for judge in judges:
        clip_metrics, tool_of = _clip_rubric_scores(scores, judge)
        # The clip's score: the mean of the judge's rubric metrics, as averaged_scores has it.
        step_items = [(key, mean(list(m.values())), human_step[key])
                      for key, m in sorted(clip_metrics.items())
                      if key in human_step and step_label_positive(human_step[key]) is not None]
        per_traj: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for key, m in clip_metrics.items():
            per_traj[key[0]].append({"status": "ok", "tool_type": tool_of[key],
                                     "scores": m})
        traj_items = []
        for tid in sorted(per_traj):
            score = evaluation_metadata(per_traj[tid], [judge])["overall_trajectory_score"]
            if tid in outcomes and score is not None:
                traj_items.append((tid, float(score), outcomes[tid]))
        for comparison, items in (
                ("step_label", [(k, s, bool(step_label_positive(h)), h)
                                for k, s, h in step_items]),
                ("outcome", [((tid, None), s, good, 1.0 if good else -1.0)
                             for tid, s, good in traj_items])):
            if not items:
                continue
            binary = binary_agreement((good, passes(s)) for _, s, good, _ in items)
            ranked = auc((s, good) for _, s, good, _ in items)
            wrong = [(key, s, h) for key, s, good, h in items if passes(s) != good]
            rows.append(AgreementRow(
                batch=batch, comparison=comparison, judge=judge,
                evaluation_kind=EVAL_KIND_CLIP if comparison == "step_label" else None,
                items=binary.items, judges=1, disagreements=len(wrong),
                accuracy=binary.accuracy, cohen_kappa=binary.cohen_kappa,
                true_positive=binary.true_positive, false_positive=binary.false_positive,
                false_negative=binary.false_negative, true_negative=binary.true_negative,
                auc=ranked.auc, positives=ranked.positives, negatives=ranked.negatives))
            listed += [DisagreementRow(
                batch=batch, comparison=comparison, judge=judge, trajectory_id=str(tid),
                task_id=task_ids.get(str(tid)), clip_index=ci,
                evaluation_kind=EVAL_KIND_CLIP if comparison == "step_label" else None,
                human_label=h, judge_score=s) for (tid, ci), s, h in wrong]
    return rows, listed


def build_agreement(batch: str, judgments: Mapping[str, pd.DataFrame], clips: pd.DataFrame,
                    trajectories: pd.DataFrame,
                    disagreement_threshold: float = DEFAULT_DISAGREEMENT_THRESHOLD,
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``judge_agreement`` and ``judge_disagreements`` tables of one batch.

    ``judgments``: each judge's judgments table; ``clips`` carries ``human_label``,
    ``trajectories`` the outcome columns. Failed judgments are left out, as everywhere.
    """
    scores = _score_rows(judgments)
    scored = {row[0] for row in scores}
    judges = [name for name in judgments if name in scored]
    rows: list[AgreementRow] = []
    listed: list[DisagreementRow] = []
    if len(judges) >= 2:
        long = pd.DataFrame(scores, columns=_LONG_COLUMNS)
        between, over = _between_judges(batch, long, judges, disagreement_threshold)
        rows += between
        listed += over
    human, wrong = _against_humans(batch, scores, judges, clips, trajectories)
    rows += human
    listed += wrong
    return (_rows_table(rows, AGREEMENT_COLUMNS, _NO_AGREEMENT),
            _rows_table(listed, DISAGREEMENT_COLUMNS, _NO_DISAGREEMENT))


_NO_AGREEMENT = pd.DataFrame([], columns=AGREEMENT_COLUMNS)
_NO_DISAGREEMENT = pd.DataFrame([], columns=DISAGREEMENT_COLUMNS)
"""The tables of no rows, as ``pd.DataFrame([], columns=...)`` makes them (all object)."""
_INT64 = range(-2**63, 2**63)
"""The ints an int64 column holds (pandas infers another type beyond them)."""


def _rows_table(rows: Sequence[BaseModel], columns: list[str], empty: pd.DataFrame
                ) -> pd.DataFrame:
    """``pd.DataFrame([r.model_dump() for r in rows], columns=columns)`` from each column's
    array, typed as that constructor infers it (:func:`_inferred_column`), or through the
    constructor when a column's values are not of the simple kinds covered. Its row-wise
    inference cost ~0.7 ms per table, two tables a batch: with the model dumps, a fifth of
    build_agreement's time, which was 5 % of a run's CPU over small batches of one judge
    (py-spy, #12.4). The frame is assembled by ``DataFrame._from_arrays``, the
    constructor pandas' own methods use for arrays already typed (65 µs against 300 for
    ``pd.DataFrame`` of a dict, which checks and copies each column again); it is private,
    so ``test_agreement_fast_paths`` holds the tables to the constructor's. Flat models:
    an attribute is its ``model_dump`` value. The columns are ``empty``'s, the table of no
    rows (returned as a copy when there are none: 0.7 ms to build each time)."""
    if not rows:
        return empty.copy(deep=False)
    arrays = []
    for name in columns:
        array = _inferred_column([getattr(r, name) for r in rows])
        if array is None:
            return pd.DataFrame([r.model_dump() for r in rows], columns=columns)
        arrays.append(array)
    # private: not in pandas-stubs
    return pd.DataFrame._from_arrays(  # type: ignore[attr-defined]
        arrays, columns=empty.columns, index=pd.RangeIndex(len(rows)),
        verify_integrity=False)


def _inferred_column(values: list[Any]) -> Any | None:
    """The array ``pd.DataFrame`` infers for a column of these row values, for the kinds the
    rows' models hold (validated: exactly str, int or float, or None): all None is object;
    text (with None: NaN) pandas' text type; ints int64 (with None: float64, NaN); floats,
    or floats and ints, float64. None for anything else (a bool, an int beyond int64)."""
    kinds = {type(v) for v in values}
    kinds.discard(type(None))
    if not kinds:
        return np.array(values, dtype=object)
    if kinds == {str}:
        return text_array(values)
    if not kinds <= {int, float}:
        return None
    if int in kinds and not all(v in _INT64 for v in values if type(v) is int):
        return None
    if kinds == {int} and None not in values:
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=np.float64)


def agreement_markdown(agreement: pd.DataFrame, disagreements: pd.DataFrame,
                       limit: int = 20) -> str:
    """The tables for the asset's metadata: figures, then the first disagreements."""
    if agreement.empty:
        return "_no second judge and no human labels: nothing to compare_"
    lines = [_markdown(agreement), f"\nA judge's decision: score >= {PASS_THRESHOLD} is good."]
    if len(disagreements):
        lines.append(f"\n**Disagreements** ({len(disagreements)}, first {limit}):\n")
        lines.append(_markdown(disagreements.head(limit)))
    return "\n".join(lines)


def _markdown(table: pd.DataFrame) -> str:
    """``table.drop(columns=["batch"]).dropna(axis=1, how="all").to_markdown(index=False,
    floatfmt=".3f")``, rendered by tabulate from each column's values: the frame copies
    and the object matrix around it cost 3 % of the graph's CPU on the corpora, a markdown
    per batch (#12.4; ``test_agreement_markdown`` holds the two to one text)."""
    columns = [c for c in table.columns if c != "batch"]
    values = [column_values(table, c) for c in columns]
    shown = [i for i, column in enumerate(values) if not all(pd.isna(v) for v in column)]
    return tabulate(list(zip(*(values[i] for i in shown), strict=True)),
                    headers=[str(columns[i]) for i in shown], tablefmt="pipe", floatfmt=".3f")
