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
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
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
_STR = pd.StringDtype("pyarrow", na_value=np.nan)  # pandas' own text type (``str``)
# tool_type too: a trajectory's category assessments share clip_index -1 and differ by it.
_KEYS = ["trajectory_id", "clip_index", "evaluation_kind", "tool_type"]


def json_object(value: Any) -> dict[str, Any]:
    """A JSON-object column's value as a dict (already a dict, a JSON text, or empty)."""
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    return json.loads(value)


def json_list(value: Any) -> list[Any]:
    """A JSON-array column's value (the errors) as a list: empty for ``[]`` or nothing,
    without a decoder call for the empty array most rows hold."""
    if isinstance(value, list):
        return value
    if not value or value == "[]":
        return []
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


def decode_json_objects(values: list[Any]) -> list[dict[str, Any]]:
    """``json_object`` of each value (scores of many rows), the JSON texts decoded in one
    call instead of one each."""
    texts = [v for v in values if isinstance(v, str) and v]
    if len(texts) == len(values):
        try:
            decoded = json.loads("[" + ",".join(texts) + "]")
        except json.JSONDecodeError:
            decoded = None
        if isinstance(decoded, list) and len(decoded) == len(values) and all(
                type(d) is dict for d in decoded):
            return decoded
    return [json_object(v) for v in values]


def dumps_each(objects: list[dict[str, Any]]) -> list[str]:
    """``json.dumps`` of each dict, encoded in one call (a third of the time of one call
    each: the encoder is set up once). The one text is cut at the ``}, {`` between the
    objects; when a key or value holds that sequence too, the count gives it away and each
    is encoded on its own."""
    if not objects:
        return []
    parts = json.dumps(objects)[2:-2].split("}, {")
    if len(parts) != len(objects):
        return [json.dumps(o) for o in objects]
    return ["{" + p + "}" for p in parts]


# Metric names' JSON, cached for ``indented_json`` (the same few names in every row);
# cleared when it grows past a sane number of names.
_KEY_TEXTS: dict[str, str] = {}
_KEY_TEXTS_MAX = 4096


def indented_json(scores: Mapping[str, Any]) -> str:
    """``json.dumps(scores, indent=2)`` without the pure-Python encoder that ``indent``
    switches to (it cost as much as the rest of a block). For a flat object of str keys and
    finite floats or ints each item is written as the C encoder writes it (``repr`` of the
    number, the key's JSON); anything else (nested values, NaN, bools, other keys, an empty
    object) goes to ``json.dumps``."""
    items = []
    for key, value in scores.items():
        kind = type(value)
        if kind is float and value - value == 0.0:  # finite (NaN and infinities are not)
            number = float.__repr__(value)
        elif kind is int:
            number = int.__repr__(value)
        else:
            return json.dumps(scores, indent=2)
        text = _KEY_TEXTS.get(key)
        if text is None:
            if type(key) is not str:
                return json.dumps(scores, indent=2)
            if len(_KEY_TEXTS) >= _KEY_TEXTS_MAX:
                _KEY_TEXTS.clear()
            text = _KEY_TEXTS[key] = json.dumps(key)
        items.append(f"  {text}: {number}")
    if not items:
        return json.dumps(scores, indent=2)
    return "{\n" + ",\n".join(items) + "\n}"


def _floats(scores: dict[str, Any]) -> dict[str, float]:
    """One judge's scores as the means of one value (``float`` of each)."""
    for value in scores.values():
        if type(value) is not float:
            return {m: float(v) for m, v in scores.items()}
    return scores


def _combined(texts: list[Any], combined: bool) -> str:
    """One judge's text as it is; several judges' texts joined, as the original tool does."""
    kept = [t for t in texts if t]
    if combined:
        return "Combined evaluation: " + " | ".join(kept)
    return kept[0] if kept else ""


def _column(table: pd.DataFrame, name: str, n: int) -> list[Any]:
    return table[name].tolist() if name in table.columns else [None] * n


def _group_rows(rows: pd.DataFrame) -> list[list[int]]:
    """Row numbers per (trajectory, clip, kind, tool type), groups in the order they first
    appear and rows in table order; a row with a missing key belongs to no group (as in a
    pandas group-by). A dict of key tuples: for a few thousand rows cheaper than pandas'
    group codes, sort and counts, which cost more to set up than to run."""
    keys = [rows[k] for k in _KEYS]  # a missing key column raises, as the group-by did
    columns = [k.tolist() for k in keys]
    present = (rows[_KEYS].notna().all(axis=1).tolist() if any(k.hasnans for k in keys)
               else None)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, key in enumerate(zip(*columns, strict=True)):
        if present is not None and not present[i]:
            continue
        members = groups.get(key)
        if members is None:
            groups[key] = [i]
        else:
            members.append(i)
    return list(groups.values())


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

    Most groups are one judge's one row (every group, with one judge): their means are
    that row's scores, their spread 0, their texts the row's own, so those take a short
    path; only groups of several rows collect values per metric.
    """
    named = [(name, df) for name, df in judgments.items() if len(df)]
    if not named:
        return pd.DataFrame(columns=AVERAGED_COLUMNS)
    rows = named[0][1] if len(named) == 1 else pd.concat(
        [df for _, df in named], ignore_index=True)
    judges = [name for name, df in named for _ in range(len(df))]
    groups = _group_rows(rows)
    n = len(rows)
    tids, clip_indexes, kinds = (_column(rows, c, n)
                                 for c in ("trajectory_id", "clip_index", "evaluation_kind"))
    tool_types, statuses, scores = (_column(rows, c, n)
                                    for c in ("tool_type", "status", "scores"))
    summaries, reasonings, errors = (_column(rows, c, n)
                                     for c in ("summary", "reasoning", "error"))
    labels = _column(rows, "label", n)
    has_labels = "label" in rows.columns
    ok_rows = [status == "ok" for status in statuses]
    ok_at = [i for i, ok in enumerate(ok_rows) if ok]
    parsed: list[dict[str, Any] | None] = [None] * n
    for i, decoded in zip(ok_at, decode_json_objects([scores[i] for i in ok_at]), strict=True):
        parsed[i] = decoded
    failed_at = {i for i, e in enumerate(errors) if isinstance(e, str) and e}
    judges_json: dict[tuple[str, ...], str] = {}
    counts_json: dict[tuple[tuple[str, int], ...], str] = {(): "{}"}
    one_judge = len(named) == 1
    if one_judge:
        judges_json[(named[0][0],)] = json.dumps([named[0][0]])

    out: dict[str, list[Any]] = {c: [] for c in AVERAGED_COLUMNS if c != "scores"}
    means_of: list[dict[str, float]] = []
    for group in groups:
        start = group[0]
        ok = [i for i in group if ok_rows[i]] if len(group) > 1 else (
            group if ok_rows[start] else [])
        kind = kinds[start]
        spread: float | None
        if len(ok) == 1:
            only = ok[0]
            means = _floats(parsed[only] or {})
            mean_score = mean(list(means.values())) if means else None
            if mean_score is not None and math.isfinite(mean_score):
                spread = 0.0  # every value finite: each metric's max - min is 0
            else:
                spread = max(v - v for v in means.values()) if means else None
            text = summaries[only]
            summary = text if text else ""
            text = reasonings[only]
            reasoning = text if text else ""
        else:
            per_metric: dict[str, list[float]] = defaultdict(list)
            for i in ok:
                for metric, value in (parsed[i] or {}).items():
                    per_metric[metric].append(float(value))
            means = {m: mean(v) for m, v in per_metric.items()}
            mean_score = mean(list(means.values())) if means else None
            spread = max(max(v) - min(v) for v in per_metric.values()) if means else None
            summary = _combined([summaries[i] for i in ok], len(ok) > 1)
            reasoning = _combined([reasonings[i] for i in ok], len(ok) > 1)
        # Only the ReAct kinds have labels; a rubric row's label (the heuristic writes
        # "heuristic" there) is not a verdict to take a majority of.
        if has_labels and kind in REACT_EVALUATIONS:
            label, label_counts = majority_label(labels[i] for i in ok)
            counts_key = tuple(label_counts.items())
            if counts_key not in counts_json:
                counts_json[counts_key] = json.dumps(label_counts, ensure_ascii=False)
        else:
            label, counts_key = None, ()
        names = (judges[start],) if one_judge else tuple(sorted({judges[i] for i in group}))
        if names not in judges_json:
            judges_json[names] = json.dumps(list(names))
        out["trajectory_id"].append(tids[start])
        out["clip_index"].append(int(clip_indexes[start]))
        out["evaluation_kind"].append(kind)
        out["tool_type"].append(tool_types[start])
        out["status"].append("ok" if ok else "failed")
        means_of.append(means)
        out["mean_score"].append(mean_score)
        out["n_judges"].append(len(group))
        out["n_judges_succeeded"].append(len(ok))
        out["judges"].append(judges_json[names])
        out["spread"].append(spread)
        out["disagreement"].append(disagreement_threshold is not None and len(ok) >= 2
                                   and spread is not None and spread > disagreement_threshold)
        out["summary"].append(summary)
        out["reasoning"].append(reasoning)
        failures = [f"{judges[i]}: {errors[i]}" for i in group if i in failed_at]
        out["errors"].append(json.dumps(failures, ensure_ascii=False) if failures else "[]")
        out["label"].append(label)
        out["label_counts"].append(counts_json[counts_key])
    out["scores"] = dumps_each(means_of)
    columns: dict[str, Any] = dict(out)
    for name in ("status", "scores", "judges", "errors", "label_counts"):
        # Texts, every one: the type pandas would infer, without inferring it.
        columns[name] = pd.array(out[name], dtype=_STR)
    for name in ("n_judges", "n_judges_succeeded"):
        columns[name] = np.array(out[name], dtype=np.int64)
    columns["disagreement"] = np.array(out["disagreement"], dtype=bool)
    firsts = [group[0] for group in groups]
    for name in ("trajectory_id", "evaluation_kind", "tool_type"):
        # A key column of pandas' own text type is taken as it is (no round trip through
        # Python strings); keys are never missing.
        keys = rows[name].array
        if keys.dtype == _STR:
            # One row per group: the groups are the rows, in order.
            columns[name] = keys if len(firsts) == len(keys) else keys.take(firsts)
    return pd.DataFrame(columns, columns=AVERAGED_COLUMNS)
