"""The per-batch score metadata without pandas objects (#12.4) gives what the pandas code
gave: each rewritten function against a copy of its former code, on varied inputs, with
exact equality (means bit for bit before rounding, dict key order too)."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from eval_pipeline.defs.pipeline.assets.changes import ok_scores, stats_metadata
from eval_pipeline.defs.pipeline.assets.judging import (
    averaged_metadata,
    judgment_metadata,
    judgment_table,
)
from eval_pipeline.defs.pipeline.assets.metadata import counts, metric_means, preview
from eval_pipeline.defs.pipeline.resources import JudgeOutcome
from eval_pipeline.frame_columns import TEXT_DTYPE, column_array
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.presets import effective_model
from eval_pipeline.judges.repeats import mean_per_clip_std, straddling
from eval_pipeline.judges.rows import JudgmentRow
from eval_pipeline.judges.runner import summarize_rows
from eval_pipeline.rubrics import ALL_EVALUATIONS, all_templates_version
from eval_pipeline.score_changes import (
    _parsed,
    failure_rate,
    loads_json,
    metric_means_counts,
    metric_stats,
)

# ---- The former code, verbatim but for names -----------------------------------------------


def old_metric_stats(scores: Any) -> dict[str, tuple[float, int]]:
    frame = pd.DataFrame([_parsed(s) for s in scores])
    if frame.empty:
        return {}
    means, counts = frame.mean(), frame.count()
    return {str(m): (round(float(means[m]), 4), int(counts[m]))
            for m in sorted(frame.columns) if counts[m]}


def old_failure_rate(status: pd.Series) -> float | None:
    attempted = status[status != "skipped"]
    return round(float((attempted != "ok").mean()), 4) if len(attempted) else None


def old_stats_metadata(scores: pd.Series | None, status: pd.Series | None = None
                       ) -> dict[str, object]:
    out: dict[str, object] = {}
    counts: dict[str, int] = {}
    for metric, (mean, count) in old_metric_stats(scores if scores is not None else []).items():
        out[f"score/{metric}/mean"] = dg.MetadataValue.float(mean)
        counts[metric] = int(count)
    out["metric_counts"] = dg.MetadataValue.json(counts)
    if status is not None:
        rate = old_failure_rate(status)
        out["failure_rate"] = (dg.MetadataValue.float(rate) if rate is not None
                               else dg.MetadataValue.null())
    return out


def old_changes_stats(table: pd.DataFrame) -> dict[str, object]:
    """What judgment_changes and averaged_changes took their stats from."""
    ok = table[table["status"] == "ok"]
    return old_stats_metadata(ok["scores"], table["status"])


def old_counts(series: pd.Series) -> dg.MetadataValue:
    return dg.MetadataValue.json({str(k): int(v) for k, v in series.value_counts().items()})


def old_metric_means(scores: pd.Series) -> dict[str, float]:
    frame = pd.DataFrame([json.loads(s) for s in scores if s and s != "{}"])
    return {str(k): round(float(v), 4) for k, v in frame.mean().items()} if len(frame) else {}


def old_frame_means(rows: list[dict[str, Any]]) -> dict[str, tuple[float, int]]:
    """The unrounded means and counts a frame built from the dicts gives."""
    frame = pd.DataFrame(rows)
    means, counts = frame.mean(), frame.count()
    return {str(m): (float(means[m]), int(counts[m])) for m in frame.columns}


def old_judgment_metadata(config: JudgeConfig, rows: Sequence[JudgmentRow],
                          table: pd.DataFrame, outcome: JudgeOutcome) -> dict[str, object]:
    totals = summarize_rows(rows)
    ok = table[table["status"] == "ok"]
    modes = Counter(getattr(r, "reply_mode", "") or outcome.reply_mode for r in rows)
    mode: dict[str, Any] = {"judge.mode": config.mode}
    return mode | {
        "judge": config.name,
        "provider": config.provider,
        "model": effective_model(config),
        "judge.reply_mode": outcome.reply_mode or "n/a",
        "reply_mode_note": outcome.reply_mode_note or "",
        "reply_modes": dg.MetadataValue.json(dict(modes)),
        "context_dropped": sum(getattr(r, "context_dropped", 0) for r in rows),
        "truncated_rows": sum(r.truncated_chars > 0 for r in rows),
        "truncated_chars": sum(r.truncated_chars for r in rows),
        "judge_failed": outcome.failed or "",
        "template_version": all_templates_version(),
        "rows": totals.rows,
        "ok": totals.ok,
        "failed": totals.failed,
        "skipped": totals.skipped,
        "cached": totals.cached,
        "repaired": totals.repaired,
        "provider_calls": totals.calls,
        "tokens_in": totals.tokens_in,
        "tokens_out": totals.tokens_out,
        "cost_usd": dg.MetadataValue.float(totals.cost_usd),
        "evaluations": dg.MetadataValue.json(config.evaluations),
        "rows_by_kind": dg.MetadataValue.json(
            {str(k): int(n) for k, n in table["evaluation_kind"].value_counts().items()}),
        "metric_means": dg.MetadataValue.json(old_metric_means(ok["scores"])),
        "repeats": config.repeats,
        "mean_per_clip_std": dg.MetadataValue.float(spread) if (
            spread := mean_per_clip_std(rows)) is not None else dg.MetadataValue.null(),
        "straddling_clips": straddling(rows),
        "preview": preview(table, ["clip_index", "evaluation_kind", "tool_type", "status",
                                   "scores", "label", "summary", "error"]),
    }


def old_averaged_metadata(table: pd.DataFrame, judges: list[str]) -> dict[str, object]:
    ok = table[table["status"] == "ok"]
    return {
        "rows": len(table),
        "scored": len(ok),
        "unscored": len(table) - len(ok),
        "judges": dg.MetadataValue.json(judges),
        "mean_score": dg.MetadataValue.float(round(float(ok["mean_score"].mean()), 4))
        if len(ok) else dg.MetadataValue.null(),
        "max_spread": dg.MetadataValue.float(float(ok["spread"].max()) if len(ok) else 0.0),
        "disagreements": int(table["disagreement"].sum()),
        "metric_means": dg.MetadataValue.json(old_metric_means(ok["scores"])),
        "preview": preview(table, ["clip_index", "tool_type", "status", "mean_score",
                                   "n_judges_succeeded", "summary"]),
    }


# ---- Comparisons ----------------------------------------------------------------------------


def _same(got: object, expected: object) -> None:
    """Equal, NaN equal to NaN, dict keys in the same order, floats bit for bit."""
    if isinstance(expected, dg.MetadataValue):
        assert type(got) is type(expected)
        _same(getattr(got, "value", None), getattr(expected, "value", None))
    elif isinstance(expected, dict):
        assert isinstance(got, dict)
        assert list(got) == list(expected)
        for key in expected:
            _same(got[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert isinstance(got, type(expected)) and len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            _same(a, b)
    elif isinstance(expected, float):
        assert isinstance(got, float), (got, expected)
        assert (math.isnan(got) and math.isnan(expected)) or (
            got == expected and math.copysign(1, got) == math.copysign(1, expected)), (
            got, expected)
    else:
        assert type(got) is type(expected) and got == expected, (got, expected)


def _same_outcome(new: Any, old: Any, *args: Any) -> None:
    """The same value, or the same exception (a NaN score text: json.loads raises)."""
    try:
        expected = old(*args)
    except Exception as error:
        with pytest.raises(type(error)) as raised:
            new(*args)
        assert str(raised.value) == str(error)
        return
    _same(new(*args), expected)


def _random_rows(rng: random.Random, n: int, metrics: int, fill: float,
                 ints: bool = False) -> list[dict[str, Any]]:
    choices = [1 / 3, 0.1, 0.7, 2 / 3, 0.05, 1e-9]
    rows = []
    for _ in range(n):
        row: dict[str, Any] = {}
        for k in rng.sample(range(metrics), metrics):  # keys in varying order
            if rng.random() < fill:
                value: Any = rng.choice([rng.random(), rng.choice(choices)])
                if ints and rng.random() < 0.2:
                    value = rng.randint(-5, 5)
                row[f"m{k}"] = value
        rows.append(row)
    return rows


def _texts(rows: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(r) for r in rows]


# ---- metric_means_counts, metric_stats, metric_means ---------------------------------------


def test_means_are_the_frames_bit_for_bit_on_random_floats_and_many_rows() -> None:
    """Over and under numpy's pairwise block (128 values) and its 8-wide unrolling, with
    metrics missing from some rows and rows with none: the frame's means and counts."""
    rng = random.Random(12_4)
    sizes = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 127, 128, 129, 130, 255, 256, 257, 300, 1000,
             4000]
    for n in sizes:
        for fill in (1.0, 0.9, 0.5, 0.1):
            rows = _random_rows(rng, n, rng.randint(1, 40), fill)
            got = metric_means_counts(rows)
            expected = old_frame_means(rows) if any(rows) else {}
            _same(got, {m: v for m, v in expected.items()})


def test_the_bit_for_bit_claim_is_not_vacuous() -> None:
    """The same values summed in order, or without the zeros of missing rows, round
    differently from pandas' sums in some of these cases: the layout is what matters."""
    rng = random.Random(5)
    differs = 0
    for _ in range(50):
        rows = _random_rows(rng, 300, 3, 0.6)
        expected = old_frame_means(rows)
        for metric, (mean, count) in expected.items():
            held = [r[metric] for r in rows if metric in r]
            differs += sum(held) / count != mean or float(np.sum(held)) / count != mean
    assert differs


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf
def test_means_with_nan_inf_ints_and_key_order() -> None:
    nan, inf = float("nan"), float("inf")
    cases: list[list[dict[str, Any]]] = [
        [{"a": nan}],  # a metric only ever NaN: count 0, mean NaN
        [{"a": nan, "b": 0.5}, {"b": nan}, {"a": 0.25}],
        [{"a": inf}, {"a": 0.5}],
        [{"a": inf}, {"a": -inf}],
        [{"a": -0.0}, {"a": -0.0}],
        [{"a": -0.0}, {}],
        [{"b": 1, "a": 0.5}, {"a": 2, "c": 3}],  # ints: all-int columns and mixed ones
        [{}, {}, {"z": 0.1}, {"y": 0.2, "z": 0.3}],
        [{"a": 1.0}] * 200 + [{"a": 0.1}] * 57,
    ]
    rng = random.Random(3)
    cases += [_random_rows(rng, n, 6, 0.7, ints=True) for n in (1, 9, 130, 500)]
    for rows in cases:
        _same(metric_means_counts(rows), old_frame_means(rows))


def test_values_pandas_has_its_own_rules_for_go_to_pandas() -> None:
    for rows in ([{"a": True}], [{"a": None}, {"a": 0.5}], [{"a": "0.5"}], [{"a": [1]}],
                 [{"a": 1 << 40}], [{"a": 0.5}, {"a": np.float64(0.25)}]):
        assert metric_means_counts(rows) is None
    # ... and metric_means then answers as before
    for texts in (['{"a": null}', '{"a": 0.5}'], ['{"a": true}', '{"a": false}'],
                  ['{"a": 10000000000000}', '{"a": 0.5}'], ['{"a": null, "b": 0.5}']):
        _same(metric_means(texts), old_metric_means(pd.Series(texts)))


def _score_inputs() -> list[list[Any]]:
    rng = random.Random(41)
    inputs: list[list[Any]] = [
        [],
        ["{}"],
        ["{}", "{}"],
        ['{"a": 0.5, "b": 1.0}', '{"a": 0.0}', "{}"],
        ['{"a": NaN}', '{"a": 0.5}'],
        ['{"a": NaN}'],
        ['{"b": 0.1}', '{"a": 0.2, "b": 0.3}', '{"c": 1}'],
        ['{ }', '{"a": 0.5}'],
    ]
    for n in (1, 5, 100, 129, 200, 777):
        rows = _random_rows(rng, n, rng.randint(1, 40), rng.choice([1.0, 0.6, 0.2]))
        inputs.append(_texts(rows))
    return inputs


def test_metric_stats_is_the_former_code() -> None:
    for texts in _score_inputs():
        for scores in (texts, pd.Series(texts, dtype=TEXT_DTYPE), pd.Series(texts, dtype=object)):
            _same(metric_stats(scores), old_metric_stats(scores))
        # scores given as dicts, and None ones (no scores)
        dicts = [json.loads(t) for t in texts] + [None]
        _same(metric_stats(dicts), old_metric_stats(dicts))
        _same(metric_stats([*texts, None, ""]), old_metric_stats([*texts, None, ""]))
        _same(metric_stats(iter(texts)), old_metric_stats(texts))


def test_metric_stats_converts_and_raises_as_before() -> None:
    """Values _parsed converts (a number as text, a bool, a big int, dict keys that are not
    text) or cannot (null, a list): the former code's answer, or its error."""
    cases: list[list[Any]] = [
        ['{"a": "0.5"}', '{"a": 0.25}'], ['{"a": true}', '{"a": 0.5}'],
        ['{"a": 10000000000000}', '{"a": 0.5}'], [{1: 0.5, "1": 0.25, "b": 1}],
        [{"a": 1 << 40}, {"a": "0.5"}], ['{"a": null}'], ["[1, 2]"], ['{"a": [1]}'],
        ['{"a": 0.5} x'], [' {"a": 0.5}'], ["{'a': 1}"],
    ]
    for scores in cases:
        _same_outcome(metric_stats, old_metric_stats, scores)


def test_metric_means_is_the_former_code() -> None:
    for texts in _score_inputs():
        listed: list[Any] = [*texts, None, ""]
        for scores in (pd.Series(texts, dtype=TEXT_DTYPE), pd.Series(texts, dtype=object),
                       pd.Series(listed, dtype=object), pd.Series(listed, dtype=TEXT_DTYPE)):
            _same_outcome(metric_means, old_metric_means, scores)
            _same_outcome(metric_means, old_metric_means, scores.tolist())


# ---- failure_rate and the changes' stats ----------------------------------------------------


def _status_inputs() -> list[list[Any]]:
    rng = random.Random(8)
    inputs: list[list[Any]] = [
        [], ["ok"], ["skipped"], ["failed"], ["ok", "failed", "skipped", "ok"],
        ["skipped", "skipped", "failed"], ["failed"] * 7, [None, "ok"], [float("nan"), "ok"],
        [float("nan"), "skipped"], [None, None],
    ]
    for n in (3, 100, 129, 1000):
        inputs.append([rng.choice(["ok", "ok", "ok", "failed", "skipped"]) for _ in range(n)])
    return inputs


def test_failure_rate_is_the_former_code() -> None:
    for statuses in _status_inputs():
        for dtype in (TEXT_DTYPE, object):
            series = pd.Series(statuses, dtype=dtype)
            expected = old_failure_rate(series)
            _same(failure_rate(series), expected)
            _same(failure_rate(series.tolist()), expected)


def _judgment_like(statuses: Sequence[Any], scores: Sequence[Any]) -> pd.DataFrame:
    n = len(statuses)
    return pd.DataFrame({
        "trajectory_id": pd.array([f"t{i % 7}" for i in range(n)], dtype=TEXT_DTYPE),
        "clip_index": np.arange(n, dtype=np.int64),
        "status": pd.array(list(statuses), dtype=TEXT_DTYPE),
        "scores": pd.array(list(scores), dtype=TEXT_DTYPE),
        "summary": pd.array(["a long text " * 20] * n, dtype=TEXT_DTYPE),
    })


def _tables() -> list[pd.DataFrame]:
    rng = random.Random(99)
    tables = [_judgment_like([], []),
              _judgment_like(["failed", "failed"], ["{}", "{}"]),
              _judgment_like(["skipped", "ok", "failed"], ["{}", '{"a": 0.5}', "{}"]),
              _judgment_like(["ok", None, "ok"], ['{"a": 0.5}', None, '{"b": 0.25}']),
              _judgment_like(["ok", "ok"], ["{}", '{"a": NaN}'])]
    for n in (1, 10, 100, 300):
        statuses = [rng.choice(["ok", "ok", "ok", "failed", "skipped"]) for _ in range(n)]
        rows = _random_rows(rng, n, rng.randint(1, 40), 0.6)
        scores = [json.dumps(r) if s == "ok" else "{}" for s, r in zip(statuses, rows,
                                                                        strict=True)]
        tables.append(_judgment_like(statuses, scores))
    return tables


def test_the_changes_stats_are_the_former_code() -> None:
    for table in _tables():
        statuses, scores = ok_scores(table)
        _same(stats_metadata(scores, statuses), old_changes_stats(table))
        _same(stats_metadata(None), old_stats_metadata(None))
        object_table = table.astype(object)  # a table built elsewhere: object columns
        statuses, scores = ok_scores(object_table)
        _same(stats_metadata(scores, statuses), old_changes_stats(object_table))


# ---- counts -------------------------------------------------------------------------------


def _count_inputs() -> list[list[Any]]:
    rng = random.Random(17)
    inputs: list[list[Any]] = [
        [], ["a"], [None], [float("nan")], ["b", "a", "b", "a"], ["a", None, "b", float("nan")],
        ["x", "y", "z", "y", "x", "w"], ["", "a", ""],
    ]
    # ties among many distinct values (past the 16 of an insertion sort)
    for distinct, n in ((20, 40), (40, 40), (60, 200), (5, 1000)):
        names = [f"v{rng.randrange(10**6)}" for _ in range(distinct)]
        inputs.append([rng.choice(names) for _ in range(n)])
        inputs.append(names * 2)
        inputs.append([*names, *(None for _ in range(3))])
    return inputs


def test_counts_are_value_counts_in_its_order() -> None:
    """A Series, its array (as column_array gives it), its values as a list: each the
    former value_counts of that Series, in its order (ties too)."""
    for values in _count_inputs():
        for dtype in (TEXT_DTYPE, object):
            series = pd.Series(values, dtype=dtype)
            expected = old_counts(series)
            _same(counts(series), expected)
            _same(counts(series.array), expected)
            _same(counts(series.to_numpy()), expected)
            _same(counts(series.tolist()), expected)
            _same(counts(tuple(series.tolist())), expected)
        _same(counts(values), old_counts(pd.Series(values)))
    # a table's text column read as column_array reads it, chunked as Parquet leaves it
    chunked = pd.concat([pd.Series(["b", "a", None], dtype=TEXT_DTYPE),
                         pd.Series(["a", "c", "b", "c"], dtype=TEXT_DTYPE)],
                        ignore_index=True)
    _same(counts(chunked.array), old_counts(chunked))
    frame = pd.DataFrame({"kind": chunked, "n": range(len(chunked))})
    _same(counts(column_array(frame, "kind")), old_counts(frame["kind"]))


def test_counts_of_other_dtypes_go_to_value_counts() -> None:
    for series in (pd.Series([1, 2, 2, 3]), pd.Series([True, False, True]),
                   pd.Series(["b", "a", "b"], dtype="category"),
                   pd.Series(["a", 1, 1, None], dtype=object),
                   pd.Series(["a", pd.NA, "a"], dtype=object),
                   pd.Series([0.5, np.nan, 0.5]), pd.Series([1, None, 1], dtype="Int64")):
        _same(counts(series), old_counts(series))
        _same(counts(series.array), old_counts(series))
        _same(counts(series.tolist()), old_counts(pd.Series(series.tolist())))


# ---- averaged_metadata ----------------------------------------------------------------------


def _averaged_like(rng: random.Random, n: int, judges: int = 2) -> pd.DataFrame:
    statuses = [rng.choice(["ok", "ok", "ok", "failed"]) for _ in range(n)]
    rows = _random_rows(rng, n, rng.randint(1, 10), 0.7)
    means = [sum(r.values()) / len(r) if r and s == "ok" else None
             for s, r in zip(statuses, rows, strict=True)]
    spreads = [rng.random() / 3 if s == "ok" and rng.random() < 0.8 else None
               for s in statuses]
    return pd.DataFrame({
        "trajectory_id": pd.array([f"t{i}" for i in range(n)], dtype=TEXT_DTYPE),
        "clip_index": np.arange(n, dtype=np.int64),
        "tool_type": pd.array(["search"] * n, dtype=TEXT_DTYPE),
        "status": pd.array(statuses, dtype=TEXT_DTYPE),
        "scores": pd.array([json.dumps(r) if s == "ok" else "{}"
                            for s, r in zip(statuses, rows, strict=True)], dtype=TEXT_DTYPE),
        "mean_score": means if all(m is None for m in means)
        else np.array([np.nan if m is None else m for m in means]),
        "n_judges_succeeded": np.array([judges if s == "ok" else 0 for s in statuses]),
        "spread": spreads if all(s is None for s in spreads)
        else np.array([np.nan if s is None else s for s in spreads]),
        "summary": pd.array(["summary " * 30] * n, dtype=TEXT_DTYPE),
        "disagreement": np.array([s is not None and s > 0.2 for s in spreads], dtype=bool),
    })


def test_averaged_metadata_is_the_former_code() -> None:
    rng = random.Random(2024)
    tables = [_averaged_like(rng, n) for n in (0, 1, 2, 10, 100, 129, 300, 1000)]
    failed = _averaged_like(rng, 5)
    failed["status"] = pd.array(["failed"] * 5, dtype=TEXT_DTYPE)
    tables.append(failed)
    # ok rows with no mean: an object column of None, which pandas reduces its own way
    empty_means = _averaged_like(rng, 4)
    empty_means["mean_score"] = [None] * 4
    empty_means["spread"] = [None] * 4
    tables.append(empty_means)
    nan_means = _averaged_like(rng, 6)
    nan_means["mean_score"] = np.nan
    nan_means["spread"] = np.nan
    tables.append(nan_means)
    # an empty averaged table as average_judgments makes it (object columns)
    from eval_pipeline.scoring.averaging import AVERAGED_COLUMNS
    tables.append(pd.DataFrame(columns=AVERAGED_COLUMNS))
    for table in tables:
        _same(averaged_metadata(table, ["a", "b"]), old_averaged_metadata(table, ["a", "b"]))


# ---- judgment_metadata ----------------------------------------------------------------------


def _judgment_rows(rng: random.Random, n: int) -> list[JudgmentRow]:
    rows = []
    for i in range(n):
        status = rng.choice(["ok", "ok", "ok", "failed", "skipped"])
        scores = {f"m{k}": rng.random() for k in range(rng.randint(0, 12))}
        rows.append(JudgmentRow(
            trajectory_id=f"t{i // 5}", clip_index=i % 5,
            evaluation_kind=rng.choice(ALL_EVALUATIONS), tool_type="search",
            judge="h", provider="heuristic", model="h", status=status,
            success=status == "ok",
            scores=json.dumps(scores) if status == "ok" else "{}",
            summary="a summary " * 20, prompt_hash="p", template_version="v",
            truncated_chars=rng.choice([0, 0, 12])))
    return rows


def test_judgment_metadata_is_the_former_code() -> None:
    rng = random.Random(77)
    config = JudgeConfig(name="h")
    for n in (0, 1, 3, 10, 100, 200):
        rows = _judgment_rows(rng, n)
        outcome = JudgeOutcome("h", rows, "", None)
        table = judgment_table(rows)
        _same(judgment_metadata(config, rows, table, outcome),
              old_judgment_metadata(config, rows, table, outcome))


# ---- loads_json -----------------------------------------------------------------------------


def test_loads_json_is_json_loads_value_or_error() -> None:
    texts: list[Any] = [
        '{"a": 0.5, "b": 1}', "{}", "[]", "[1, 2]", '"x"', "1.5", "-0.0", "NaN", "Infinity",
        "null", "true", '{"a": {"b": [1, {"c": null}]}}', '{"a": 1, "a": 2}',
        '{"\\u00e9": "\\ud83d\\ude00"}', '{"a": 1e400}', '{"a": 12345678901234567890}',
        ' {"a": 1}', '{"a": 1} ', '\n{"a": 1}\t', '{"a": 1}{"b": 2}', '{"a": 1}, {"b": 2}',
        '{"a": 1', '{"a": }', "", " ", "\ufeff{}", "{'a': 1}", '{"a": "unterminated}',
        '{"a": 0.1}x', b'{"a": 0.5}', bytearray(b"[1]"), '"\\x"', "01", "[1,]",
        "[" * 100 + "]" * 100,
    ]
    for text in texts:
        _same_outcome(loads_json, json.loads, text)
    for value in (None, 1.5, float("nan"), ["{}"]):
        _same_outcome(loads_json, json.loads, value)
