"""Averaging over judges: one row per (trajectory, clip, evaluation kind).

A failed judgment never contributes: a metric's mean is over the judges that succeeded,
and a clip no judge could score has no scores at all (never zeros).

The ReAct evaluations (thought_to_tool, query_to_thought, sequence_optimality) average the
same way: their single metric is 1.0 or 0.0 per judge, so the mean over the judges that
succeeded is the judges' agreement with the positive label, and the row also carries the
majority label.

The rows are grouped once for the whole table (a dict of key tuples), not one pandas
sub-frame per clip, which cost about 6 ms a group, and the output is built column by
column: with one judge every group is one row, so the key and text columns pass through
as Arrow strings (pyarrow compute picks the text or ``""``), the scores of all rows are
decoded in one ``json.loads`` and encoded in one ``json.dumps``, and only the per-group
reductions over one to a few judges' plain Python values are left to Python. The means
stay ``statistics.fmean`` (an exact ``fsum``) rather than a numpy or pandas group mean,
whose summation differs in the last bit, and that bit shows in the JSON of the scores.
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
import pyarrow as pa
import pyarrow.compute as pc

from eval_pipeline.frame_columns import TEXT_DTYPE, column_values, series_values, text_array
from eval_pipeline.rubrics import REACT_EVALUATIONS

AVERAGED_COLUMNS = [
    "trajectory_id", "clip_index", "evaluation_kind", "tool_type", "status", "scores",
    "mean_score", "n_judges", "n_judges_succeeded", "judges", "spread", "summary", "reasoning",
    "errors", "label", "label_counts", "disagreement",
]
# tool_type too: a trajectory's category assessments share clip_index -1 and differ by it.
_KEYS = ["trajectory_id", "clip_index", "evaluation_kind", "tool_type"]
_STR = TEXT_DTYPE  # pandas' own text type (``str``)


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


# Scores' JSON as ``indented_json`` writes it, by the averaged row's compact JSON text: a
# judge's scores come from a few values per metric, so most rows repeat an earlier text.
_INDENTED: dict[str, str] = {}
_INDENTED_MAX = 4096
SCORES_TEXT = "scores_text"
"""The key of an averaged row record that keeps its ``scores`` JSON text beside the
decoded ``scores`` (:func:`indented_scores` looks the text up)."""


def indented_scores(row: Mapping[str, Any]) -> str:
    """``indented_json`` of a row's scores, looked up by their JSON text when the row
    carries it (:data:`SCORES_TEXT`)."""
    text = row.get(SCORES_TEXT)
    if type(text) is not str:
        return indented_json(json_object(row["scores"]))
    indented = _INDENTED.get(text)
    if indented is None:
        if len(_INDENTED) >= _INDENTED_MAX:
            _INDENTED.clear()
        indented = _INDENTED[text] = indented_json(json_object(row["scores"]))
    return indented


def _floats(scores: dict[str, Any]) -> dict[str, float]:
    """One judge's scores as the means of one value (``float`` of each)."""
    for value in scores.values():
        if type(value) is not float:
            return {m: float(v) for m, v in scores.items()}
    return scores


def _combined(texts: list[Any], combined: bool) -> str:
    """One judge's text as it is; several judges' texts joined, as the original tool does."""
    if combined:  # a missing text (NaN, None) is left out, as an empty one
        return "Combined evaluation: " + " | ".join(
            t for t in texts if isinstance(t, str) and t)
    kept = [t for t in texts if t]
    return kept[0] if kept else ""


def _column(table: pd.DataFrame, name: str, n: int) -> list[Any]:
    return column_values(table, name) if name in table.columns else [None] * n


def _group_rows(keys: list[list[Any]], present: list[bool] | None) -> list[list[int]]:
    """Row numbers per (trajectory, clip, kind, tool type), groups in the order they first
    appear and rows in table order; a row with a missing key (``present`` false) belongs
    to no group (as in a pandas group-by). A dict of key tuples: for a few thousand rows
    cheaper than pandas' group codes, sort and counts, which cost more to set up than to
    run."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, key in enumerate(zip(*keys, strict=True)):
        if present is not None and not present[i]:
            continue
        members = groups.get(key)
        if members is None:
            groups[key] = [i]
        else:
            members.append(i)
    return list(groups.values())


def _one_judge_means(scores: dict[str, Any] | None
                     ) -> tuple[dict[str, float], float | None, float | None]:
    """:func:`_group_means` of a group with one ok row: the means are its values, the
    spread 0."""
    means = _floats(scores or {})
    if not means:
        return means, None, None
    mean_score = mean(list(means.values()))
    if math.isfinite(mean_score):  # every value finite: each max - min is 0
        return means, mean_score, 0.0
    return means, mean_score, max(v - v for v in means.values())


_NOT_SCORED: tuple[dict[str, float], float | None, float | None] = ({}, None, None)


def _one_judge_rows(ok_rows: list[bool], scores: list[Any]
                    ) -> tuple[list[tuple[dict[str, float], float | None, float | None]],
                               list[str]]:
    """With one row per group, each row's :func:`_one_judge_means` and its scores' JSON
    (``{}`` for a failed row), computed once per distinct scores text: a judge's scores
    take a few values per metric, so rows repeat earlier texts (748 distinct of 3,305 ok
    rows on the bench's batches), and decoding, averaging and encoding each row was half
    of averaging one judge (#12.2). Rows with one text share one result (nothing
    downstream changes it); any other value (a dict, a missing one) is taken row by row."""
    keyed = [text if ok and type(text) is str else None
             for ok, text in zip(ok_rows, scores, strict=True)]
    distinct = list(dict.fromkeys(text for text in keyed if text is not None))
    by_text = {text: _one_judge_means(decoded)
               for text, decoded in zip(distinct, decode_json_objects(distinct), strict=True)}
    out_text = dict(zip(distinct, dumps_each([by_text[t][0] for t in distinct]),
                        strict=True))
    results = []
    texts = []
    for ok, value, text in zip(ok_rows, scores, keyed, strict=True):
        if text is not None:
            results.append(by_text[text])
            texts.append(out_text[text])
        elif ok:
            result = _one_judge_means(json_object(value))
            results.append(result)
            texts.append(json.dumps(result[0]))
        else:
            results.append(_NOT_SCORED)
            texts.append("{}")
    return results, texts


def _group_means(ok: list[int], parsed: list[dict[str, Any] | None]
                 ) -> tuple[dict[str, float], float | None, float | None]:
    """A group's means per metric over its ok rows, their mean, and the spread (the largest
    max - min over the judges, across the metrics)."""
    if len(ok) == 1:
        return _one_judge_means(parsed[ok[0]])
    per_metric: dict[str, list[float]] = defaultdict(list)
    for i in ok:
        for metric, value in (parsed[i] or {}).items():
            per_metric[metric].append(float(value))
    if not per_metric:
        return {}, None, None
    means = {m: mean(v) for m, v in per_metric.items()}
    return (means, mean(list(means.values())),
            max(max(v) - min(v) for v in per_metric.values()))


def _own_texts(rows: pd.DataFrame, name: str, ok: pa.Array) -> Any:
    """With one row per group, a text column's output as Arrow strings (pyarrow compute on
    the column's own array, no Python strings): each ok row's own text (an empty or missing
    one as it is), ``""`` where the row failed, which is what ``_combined`` gives one row;
    None when the column is not pandas' text type or would hold no text at all (pandas
    would infer another type from the plain values)."""
    if name not in rows.columns:
        return None
    array = rows[name].array
    if array.dtype != _STR:
        return None
    data = array.__arrow_array__()
    texts = pc.if_else(ok, data, pa.scalar("", data.type))
    return None if texts.null_count == len(texts) else pd.array(texts, dtype=_STR)


def _has_missing(column: pd.Series) -> bool:
    """Whether a key column has a missing value (Arrow counts them for pandas' text type;
    an integer column has none)."""
    if column.dtype == _STR:
        return bool(column.array.__arrow_array__().null_count)
    if column.dtype.kind in "iub":
        return False
    return bool(column.hasnans)


def float_column(values: list[Any]) -> Any:
    """Numbers with None for missing as the float64 column pandas infers from them, built
    without inferring; a column with no float at all (only None, or ints pandas would keep
    as ints) stays the plain values, for pandas to infer as before."""
    if any(type(v) is float for v in values) and all(
            type(v) is float or v is None for v in values):
        return np.array(values, dtype=np.float64)
    return values


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

    Built column by column: with one judge every group is one row (the groups are the
    table's rows, in order), so the key and text columns pass through as Arrow strings
    and only the scores, labels and errors go through Python values.
    """
    named = [(name, df) for name, df in judgments.items() if len(df)]
    if not named:
        return pd.DataFrame(columns=AVERAGED_COLUMNS)
    rows = named[0][1] if len(named) == 1 else pd.concat(
        [df for _, df in named], ignore_index=True)
    n = len(rows)
    judges = [name for name, df in named for _ in range(len(df))]
    key_columns = [rows[k] for k in _KEYS]  # a missing key column raises, as a group-by
    keys = [series_values(column) for column in key_columns]
    present = (rows[_KEYS].notna().all(axis=1).tolist()
               if any(_has_missing(column) for column in key_columns) else None)
    groups = _group_rows(keys, present)
    if not groups:  # every row lacks a key
        return pd.DataFrame({name: [] for name in AVERAGED_COLUMNS})
    single = len(groups) == n  # one row per group: the groups are the rows, in order
    firsts = list(range(n)) if single else [group[0] for group in groups]
    statuses, scores = _column(rows, "status", n), _column(rows, "scores", n)
    ok_rows = [status == "ok" for status in statuses]
    if single:  # each group's ok rows: the row itself, if ok
        oks = [[i] if ok else [] for i, ok in enumerate(ok_rows)]
        n_ok = [int(ok) for ok in ok_rows]
        results, score_texts = _one_judge_rows(ok_rows, scores)
    else:
        ok_at = [i for i, ok in enumerate(ok_rows) if ok]
        parsed: list[dict[str, Any] | None] = [None] * n
        for i, decoded in zip(ok_at, decode_json_objects([scores[i] for i in ok_at]),
                              strict=True):
            parsed[i] = decoded
        oks = [[i for i in group if ok_rows[i]] for group in groups]
        n_ok = [len(ok) for ok in oks]
        results = [_group_means(ok, parsed) for ok in oks]
        score_texts = dumps_each([r[0] for r in results])
    spreads = [r[2] for r in results]
    kinds = [keys[2][i] for i in firsts]

    columns: dict[str, Any] = {
        "trajectory_id": [keys[0][i] for i in firsts],
        "clip_index": [int(keys[1][i]) for i in firsts],
        "evaluation_kind": kinds,
        "tool_type": [keys[3][i] for i in firsts],
        "status": text_array(["ok" if k else "failed" for k in n_ok]),
        "scores": text_array(score_texts),
        "mean_score": float_column([r[1] for r in results]),
        "n_judges": np.array([len(group) for group in groups], dtype=np.int64),
        "n_judges_succeeded": np.array(n_ok, dtype=np.int64),
        "spread": float_column(spreads),
        "disagreement": np.array(
            [disagreement_threshold is not None and k >= 2 and spread is not None
             and spread > disagreement_threshold for k, spread in zip(n_ok, spreads,
                                                                      strict=True)],
            dtype=bool),
    }
    for name, source in (("trajectory_id", 0), ("evaluation_kind", 2), ("tool_type", 3)):
        # A key column of pandas' own text type is taken as it is (no round trip through
        # Python strings); keys are never missing.
        array = key_columns[source].array
        if array.dtype == _STR:
            columns[name] = array if single else array.take(firsts)
    if single and key_columns[1].dtype == np.int64:
        columns["clip_index"] = key_columns[1].to_numpy()
    ok_mask = pa.array(ok_rows, pa.bool_()) if single else None
    for name in ("summary", "reasoning"):
        own = _own_texts(rows, name, ok_mask) if ok_mask is not None else None
        if own is None:
            texts = _column(rows, name, n)
            own = [_combined([texts[i] for i in ok], len(ok) > 1) for ok in oks]
        columns[name] = own

    # Judges' names, the failures' errors, the labels: a few distinct texts each.
    if len(named) == 1:
        columns["judges"] = text_array([json.dumps([named[0][0]])] * len(groups))
    else:
        judges_json: dict[tuple[str, ...], str] = {}
        for group in groups:
            names = tuple(sorted({judges[i] for i in group}))
            if names not in judges_json:
                judges_json[names] = json.dumps(list(names))
        columns["judges"] = text_array(
            [judges_json[tuple(sorted({judges[i] for i in group}))] for group in groups])
    errors = _column(rows, "error", n)
    failed = [i for i, e in enumerate(errors) if isinstance(e, str) and e]
    errors_out = ["[]"] * len(groups)
    if failed:
        failed_at = set(failed)
        for g, group in enumerate(groups):
            failures = [f"{judges[i]}: {errors[i]}" for i in group if i in failed_at]
            if failures:
                errors_out[g] = json.dumps(failures, ensure_ascii=False)
    columns["errors"] = text_array(errors_out)
    # Only the ReAct kinds have labels; a rubric row's label (the heuristic writes
    # "heuristic" there) is not a verdict to take a majority of.
    labels_out: list[str | None] = [None] * len(groups)
    counts_out = ["{}"] * len(groups)
    if "label" in rows.columns:
        labels = column_values(rows, "label")
        counts_json: dict[tuple[tuple[str, int], ...], str] = {}
        for g, (kind, ok) in enumerate(zip(kinds, oks, strict=True)):
            if kind not in REACT_EVALUATIONS or not ok:
                continue
            if len(ok) == 1:  # one judge's label, if any, is the majority of one
                label = labels[ok[0]]
                if not isinstance(label, str) or not label:
                    continue
                label_counts = {label: 1}
            else:
                label, label_counts = majority_label(labels[i] for i in ok)
            if label_counts:
                counts_key = tuple(label_counts.items())
                if counts_key not in counts_json:
                    counts_json[counts_key] = json.dumps(label_counts, ensure_ascii=False)
                counts_out[g] = counts_json[counts_key]
            labels_out[g] = label
    columns["label"] = labels_out
    columns["label_counts"] = text_array(counts_out)
    # In the columns' order already: ``columns=`` would reindex (a third of the cost of
    # building a small batch's table).
    return pd.DataFrame({name: columns[name] for name in AVERAGED_COLUMNS})
