"""Averaging over judges: one row per (trajectory, clip, evaluation kind).

A failed judgment never contributes: a metric's mean is over the judges that succeeded,
and a clip no judge could score has no scores at all (never zeros).

The ReAct evaluations (thought_to_tool, query_to_thought, sequence_optimality) average the
same way: their single metric is 1.0 or 0.0 per judge, so the mean over the judges that
succeeded is the judges' agreement with the positive label, and the row also carries the
majority label.

The group-by is done once for the whole table (group codes, counts, first rows with
numpy), not one pandas sub-frame per clip, which cost about 6 ms a group. What is left per
group are reductions over one to a few judges' plain Python values. The means stay
``statistics.fmean`` (an exact ``fsum``) rather than a numpy group mean, whose summation
differs in the last bit, and that bit shows in the JSON of the scores.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from itertools import pairwise
from statistics import fmean
from typing import Any

import numpy as np
import pandas as pd

from eval_pipeline.rubrics import REACT_EVALUATIONS

AVERAGED_COLUMNS = [
    "trajectory_id", "clip_index", "evaluation_kind", "tool_type", "status", "scores",
    "mean_score", "n_judges", "n_judges_succeeded", "judges", "spread", "summary", "reasoning",
    "errors", "label", "label_counts", "disagreement",
]
# tool_type too: a trajectory's category assessments share clip_index -1 and differ by it.
_KEYS = ["trajectory_id", "clip_index", "evaluation_kind", "tool_type"]


def json_object(value: Any) -> dict[str, Any]:
    """A JSON-object column's value as a dict (already a dict, a JSON text, or empty)."""
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    return json.loads(value)


def majority_label(labels: Iterable[Any]) -> tuple[str | None, dict[str, int]]:
    """The most common label and the counts; no label on a tie (the judges disagree evenly)."""
    counts: dict[str, int] = defaultdict(int)
    for label in labels:
        if isinstance(label, str) and label:
            counts[label] += 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None, dict(ranked)
    return ranked[0][0], dict(ranked)



def mean(values: list[float]) -> float:
    """``statistics.fmean``, bit for bit, without its overhead for one or two values.

    One value is its own mean; for two, IEEE addition is already the correctly rounded
    sum that ``fsum`` returns.
    """
    if len(values) == 1:
        return float(values[0])
    if len(values) == 2:
        return (values[0] + values[1]) / 2
    return fmean(values)


def _decode_scores(values: list[Any]) -> list[dict[str, Any]]:
    """Every ok row's scores, the JSON texts decoded in one call instead of one each."""
    texts = [v for v in values if isinstance(v, str) and v]
    if len(texts) == len(values):
        try:
            decoded = json.loads("[" + ",".join(texts) + "]")
        except json.JSONDecodeError:
            decoded = None
        if isinstance(decoded, list) and len(decoded) == len(values) and all(
                isinstance(d, dict) for d in decoded):
            return decoded
    return [json_object(v) for v in values]


def _combined(texts: list[Any], combined: bool) -> str:
    """One judge's text as it is; several judges' texts joined, as the original tool does."""
    kept = [t for t in texts if t]
    if combined:
        return "Combined evaluation: " + " | ".join(kept)
    return kept[0] if kept else ""


def _column(table: pd.DataFrame, name: str, n: int) -> list[Any]:
    return table[name].tolist() if name in table.columns else [None] * n


def average_judgments(judgments: Mapping[str, pd.DataFrame],
                      disagreement_threshold: float | None = None) -> pd.DataFrame:
    """One row per (trajectory, clip, evaluation kind) with the judges' mean per metric.

    ``disagreement``: two or more judges succeeded and their ``spread`` (the largest
    max - min over the judges, across the metrics) exceeds ``disagreement_threshold``; a
    mean over judges that contradict each other is worth a look before it is trusted.
    Never set without a threshold.

    Groups come out in the order they first appear (judges in the mapping's order, rows in
    table order), and each group's rows keep that order, so combined texts read the same
    on every run.
    """
    frames = [df.assign(judge=name) for name, df in judgments.items() if len(df)]
    if not frames:
        return pd.DataFrame(columns=AVERAGED_COLUMNS)
    rows = pd.concat(frames, ignore_index=True)
    # A row with a missing key belongs to no group (pandas' group-by drops it too).
    codes = rows.groupby(_KEYS, sort=False).ngroup().fillna(-1).to_numpy(dtype=np.int64)
    present = codes >= 0
    order = np.argsort(np.where(present, codes, codes.max() + 1), kind="stable")
    order = order[: int(present.sum())]
    sizes = np.bincount(codes[present])
    bounds = np.concatenate(([0], np.cumsum(sizes))).tolist()
    n = len(rows)
    take = order.tolist()

    def col(name: str) -> list[Any]:
        values = _column(rows, name, n)
        return [values[i] for i in take]

    tids, clip_indexes, kinds = col("trajectory_id"), col("clip_index"), col("evaluation_kind")
    tool_types, statuses, scores = col("tool_type"), col("status"), col("scores")
    summaries, reasonings, errors = col("summary"), col("reasoning"), col("error")
    judges, labels = col("judge"), col("label")
    has_labels = "label" in rows.columns
    ok_rows = [status == "ok" for status in statuses]
    parsed = _decode_scores([scores[i] for i, ok in enumerate(ok_rows) if ok])
    parsed_at = dict(zip((i for i, ok in enumerate(ok_rows) if ok), parsed, strict=True))
    judges_json: dict[tuple[str, ...], str] = {}

    out: dict[str, list[Any]] = {c: [] for c in AVERAGED_COLUMNS}
    for start, stop in pairwise(bounds):
        ok = [i for i in range(start, stop) if ok_rows[i]]
        per_metric: dict[str, list[float]] = defaultdict(list)
        for i in ok:
            for metric, value in parsed_at[i].items():
                per_metric[metric].append(float(value))
        means = {m: mean(v) for m, v in per_metric.items()}
        kind = kinds[start]
        combined = len(ok) > 1
        # Only the ReAct kinds have labels; a rubric row's label (the heuristic writes
        # "heuristic" there) is not a verdict to take a majority of.
        label, label_counts = (majority_label(labels[i] for i in ok)
                               if has_labels and kind in REACT_EVALUATIONS else (None, {}))
        names = tuple(sorted(set(judges[start:stop])))
        if names not in judges_json:
            judges_json[names] = json.dumps(list(names))
        out["trajectory_id"].append(tids[start])
        out["clip_index"].append(int(clip_indexes[start]))
        out["evaluation_kind"].append(kind)
        out["tool_type"].append(tool_types[start])
        out["status"].append("ok" if ok else "failed")
        out["scores"].append(json.dumps(means))
        out["mean_score"].append(mean(list(means.values())) if means else None)
        out["n_judges"].append(stop - start)
        out["n_judges_succeeded"].append(len(ok))
        out["judges"].append(judges_json[names])
        spread = max(max(v) - min(v) for v in per_metric.values()) if means else None
        out["spread"].append(spread)
        out["disagreement"].append(disagreement_threshold is not None and len(ok) >= 2
                                   and spread is not None and spread > disagreement_threshold)
        out["summary"].append(_combined([summaries[i] for i in ok], combined))
        out["reasoning"].append(_combined([reasonings[i] for i in ok], combined))
        failures = [f"{judges[i]}: {errors[i]}" for i in range(start, stop)
                    if isinstance(errors[i], str) and errors[i]]
        out["errors"].append(json.dumps(failures, ensure_ascii=False) if failures else "[]")
        out["label"].append(label)
        out["label_counts"].append(json.dumps(label_counts, ensure_ascii=False)
                                   if label_counts else "{}")
    return pd.DataFrame(out, columns=AVERAGED_COLUMNS)
