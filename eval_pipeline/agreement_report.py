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
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd
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
from eval_pipeline.frame_columns import column_values
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


def judge_scores(judgments: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every ok judgment's scores in long form: one row per judge, clip, kind and metric."""
    rows: list[tuple[Any, ...]] = []
    for judge, table in judgments.items():
        if not len(table):
            continue
        ok = table[table["status"] == "ok"]
        labels = ok["label"].tolist() if "label" in ok.columns else [None] * len(ok)
        for tid, ci, kind, tool, scores, label in zip(
                ok["trajectory_id"], ok["clip_index"], ok["evaluation_kind"], ok["tool_type"],
                ok["scores"], labels, strict=True):
            for metric, value in json_object(scores).items():
                rows.append((judge, tid, int(ci), kind, tool, metric, float(value), label))
    return pd.DataFrame(rows, columns=_LONG_COLUMNS)


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


def _against_humans(batch: str, long: pd.DataFrame, judges: list[str], clips: pd.DataFrame,
                    trajectories: pd.DataFrame
                    ) -> tuple[list[AgreementRow], list[DisagreementRow]]:
    human_step: dict[tuple[str, int], float] = {}
    if "human_label" in clips.columns:
        for tid, ci, label in zip(clips["trajectory_id"], clips["clip_index"],
                                  clips["human_label"], strict=True):
            if label is not None and not pd.isna(label):
                human_step[(tid, int(ci))] = float(label)
    outcomes: dict[str, bool] = {}
    task_ids: dict[str, str] = {}
    for record in trajectories.to_dict("records"):
        task_ids[record["trajectory_id"]] = str(record.get("task_id"))
        outcome = outcome_of(record)
        if outcome is not None:
            outcomes[record["trajectory_id"]] = outcome
    rubric = long[long["evaluation_kind"] == EVAL_KIND_CLIP]
    rows: list[AgreementRow] = []
    listed: list[DisagreementRow] = []
    for judge in judges:
        mine = rubric[rubric["judge"] == judge]
        clip_metrics: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
        tool_of: dict[tuple[str, int], str] = {}
        for tid, ci, tool, metric, score in zip(mine["trajectory_id"], mine["clip_index"],
                                                mine["tool_type"], mine["metric"],
                                                mine["score"], strict=True):
            clip_metrics[(tid, int(ci))][metric] = float(score)
            tool_of[(tid, int(ci))] = tool
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
    long = judge_scores(judgments)
    judges = [name for name in judgments if name in set(long["judge"])]
    rows: list[AgreementRow] = []
    listed: list[DisagreementRow] = []
    if len(judges) >= 2:
        between, over = _between_judges(batch, long, judges, disagreement_threshold)
        rows += between
        listed += over
    human, wrong = _against_humans(batch, long, judges, clips, trajectories)
    rows += human
    listed += wrong
    return (pd.DataFrame([r.model_dump() for r in rows], columns=AGREEMENT_COLUMNS),
            pd.DataFrame([r.model_dump() for r in listed], columns=DISAGREEMENT_COLUMNS))


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
