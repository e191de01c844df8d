"""The short cuts that made averaging and the summaries faster (#12.2) give what the plain
code gives, also on the inputs they hand back to it: keys the one-call encoder cannot cut,
numbers the indented writer leaves to ``json.dumps``, texts that are not pandas' text type,
missing values. (``test_scoring_digests`` pins whole tables on real data.)"""

from __future__ import annotations

import json
import math
from html import escape

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.frame_columns import text_array
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.scoring.assessments import element_text, model_info
from eval_pipeline.scoring.averaging import (
    SCORES_TEXT,
    decode_json_objects,
    dumps_each,
    float_column,
    indented_json,
    indented_scores,
    json_list,
    json_object,
)
from eval_pipeline_tests.stage_digests import digest_table


@pytest.mark.parametrize("objects", [
    [],
    [{}],
    [{"a": 0.1 + 0.2, "b": 1.0}, {}, {"c": -0.0, "d": 1e-300}],
    [{"x}, {y": 0.5}, {"z": 1.0}],  # the cut sequence inside a key: each on its own
    [{"a": {"b": 1.0}}, {"c": {"d": 2.0}}],  # nested objects hold it too
    [{"ü": float("nan"), "v": float("inf")}],
])
def test_dumps_each_is_json_dumps_of_each(objects: list[dict]) -> None:
    assert dumps_each(objects) == [json.dumps(o) for o in objects]


@pytest.mark.parametrize("scores", [
    {}, {"a": 1.0}, {"a": 1, "b": 0.1 + 0.2, 'ü"\\x': 1e-300, "c": -0.0, "d": 10**30},
    {"a": float("nan")}, {"a": float("inf")}, {"a": -float("inf")}, {"a": True},
    {"a": None}, {1: 0.5}, {"a": {"b": 1.0}}, {"a": np.float64(0.5)}, {"a": "0.5"},
])
def test_indented_json_is_json_dumps_indent_2(scores: dict) -> None:
    assert indented_json(scores) == json.dumps(scores, indent=2)


def test_indented_json_keeps_a_bounded_cache_of_key_texts() -> None:
    from eval_pipeline.scoring import averaging

    for i in range(averaging._KEY_TEXTS_MAX + 10):
        assert indented_json({f"m{i}": 0.5}) == json.dumps({f"m{i}": 0.5}, indent=2)
    assert len(averaging._KEY_TEXTS) <= averaging._KEY_TEXTS_MAX


def test_indented_scores_by_text_are_the_rows_own_scores() -> None:
    """Looked up by the row's JSON text: two texts never share an entry, a row without its
    text is written from its scores, and the lookup stays bounded."""
    from eval_pipeline.scoring import averaging

    for text in ('{"a": 0.5}', '{"a": 0.25}', '{"a": 0.5, "b": 1}', "{}"):
        row = {"scores": json.loads(text), SCORES_TEXT: text}
        assert indented_scores(row) == json.dumps(json.loads(text), indent=2)
        assert indented_scores(row) == json.dumps(json.loads(text), indent=2)  # looked up
    assert indented_scores({"scores": '{"c": 0.1}'}) == json.dumps({"c": 0.1}, indent=2)
    for i in range(averaging._INDENTED_MAX + 10):
        text = json.dumps({"m": i / 7})
        assert indented_scores({"scores": json.loads(text), SCORES_TEXT: text}) == (
            json.dumps({"m": i / 7}, indent=2))
    assert len(averaging._INDENTED) <= averaging._INDENTED_MAX


_STR = pd.StringDtype("pyarrow", na_value=np.nan)


@pytest.mark.parametrize("values", [
    ["a", "ü" * 3, ""], ["a", None, "b"], [None, None], [],
    ["a", float("nan")], ["a", 1], [b"x", "y"],  # pandas converts these: handed back to it
])
def test_text_array_is_pandas_text_array(values: list) -> None:
    try:
        expected = pd.array(values, dtype=_STR)
    except (TypeError, ValueError) as exc:  # what pandas refuses, text_array refuses too
        with pytest.raises(type(exc)):
            text_array(values)
        return
    got = text_array(values)
    assert got.dtype == expected.dtype
    assert got.__arrow_array__().type == expected.__arrow_array__().type
    assert [repr(v) for v in got.tolist()] == [repr(v) for v in expected.tolist()]


@pytest.mark.parametrize("values", [
    ['{"a": 1}', '{"b": 2.5}'], ['{"a": 1}', "{}", {"c": 3}], ['{"a": 1}', "", None],
    ['{"a": 1}', "[1, 2]"], [],
])
def test_decode_json_objects_is_json_object_of_each(values: list) -> None:
    assert decode_json_objects(values) == [json_object(v) for v in values]


def test_decode_json_objects_raises_on_broken_text_as_json_object_does() -> None:
    with pytest.raises(json.JSONDecodeError):
        decode_json_objects(['{"a": 1}', '{"b": '])


@pytest.mark.parametrize("values", [
    [0.5, None], [None, None], [1, None], [1.0, 2], [float("nan"), None], [0.5],
    [np.float64(0.5), 0.25], [True, 0.5],
])
def test_float_column_is_what_pandas_infers(values: list) -> None:
    built = pd.DataFrame({"v": float_column(values)})
    inferred = pd.DataFrame({"v": values})
    assert digest_table(built) == digest_table(inferred)


@pytest.mark.parametrize("value", ["plain words", "a < b && c > d", "", 3.5, None, "&amp;"])
def test_element_text_escapes_as_html_escape(value: object) -> None:
    assert element_text(value) == escape(str(value), quote=False)


def test_model_info_and_json_list() -> None:
    assert model_info(1) == "<model_info>Averaged from 1 model</model_info>\n"
    assert model_info(3) == "<model_info>Averaged from 3 models</model_info>\n"
    assert json_list("[]") == [] and json_list(None) == [] and json_list("") == []
    assert json_list('["x: HTTP 500"]') == ["x: HTTP 500"] and json_list(["y"]) == ["y"]


def _judged(n: int = 12) -> pd.DataFrame:
    """One judge's rows with the odd cases: failed rows with and without text, empty and
    missing texts on ok rows, labels on ReAct rows and a rubric row, an error."""
    kinds = ["clip_rubric", "thought_to_tool", "query_to_thought", "sequence_optimality"]
    rows = []
    for i in range(n):
        kind = kinds[i % 4]
        ok = i % 5 != 3
        rows.append({
            "trajectory_id": f"t{i // 4}", "clip_index": i % 4 if kind != kinds[3] else -1,
            "evaluation_kind": kind, "tool_type": "search", "status": "ok" if ok else "failed",
            "scores": json.dumps({kind if kind != kinds[0] else "m": 0.25 * (i % 4)})
            if ok else "{}",
            "label": ("correct" if i % 3 else "") if kind != kinds[0] else "heuristic",
            "summary": [f"s{i} <b>", "", None][i % 3] if ok else "left over",
            "reasoning": f"r{i}" if i % 4 else None,
            "error": None if ok else f"HTTP 50{i}",
        })
    return pd.DataFrame(rows)


def test_one_judge_texts_through_arrow_equal_the_plain_values() -> None:
    """With one judge the summary and reasoning columns go through pyarrow compute when
    they are pandas' text type; as plain objects they take the Python path: same table."""
    table = _judged()
    assert table["summary"].dtype == "str"
    as_arrow = average_judgments({"h": table})
    as_objects = average_judgments({"h": table.astype({"summary": object,
                                                      "reasoning": object})})
    assert digest_table(as_arrow) == digest_table(as_objects)
    # As one of two judges (every group two rows, the general path) the texts are joined.
    # (Missing texts are filled here; test_scoring.py covers joining them.)
    filled = table.fillna({"summary": "", "reasoning": ""})
    two = average_judgments({"h": filled, "i": filled})
    assert two["summary"].tolist()[0] == "Combined evaluation: s0 <b> | s0 <b>"


def test_one_judge_without_any_text_keeps_what_pandas_infers() -> None:
    table = _judged().assign(status="ok", summary=pd.array([None] * 12, dtype="str"))
    averaged = average_judgments({"h": table})
    plain = average_judgments({"h": table.astype({"summary": object})})
    assert digest_table(averaged) == digest_table(plain)


def test_duplicated_keys_with_one_judge_take_the_general_path() -> None:
    table = _judged(4).fillna({"summary": "", "reasoning": ""})
    doubled = pd.concat([table, table], ignore_index=True)
    averaged = average_judgments({"h": doubled})
    assert averaged["n_judges"].tolist() == [2, 2, 2, 2]
    assert averaged["judges"].tolist() == ['["h"]'] * 4


def test_summaries_pass_texts_through_as_plain_values_would() -> None:
    """Trajectory columns of pandas' text type pass through as Arrow strings, number
    columns as numpy arrays; as objects they go through Python values: the same summary
    table (a text column that is all missing included)."""
    trajectories = pd.DataFrame({
        "trajectory_id": ["t0", "t1", "t2"], "batch": ["b"] * 3, "task_id": ["x", None, "z"],
        "raw_response": ["<think>a</think>é" * 3, "<answer>b</answer>", "中文 text"],
        "final_result": pd.array([None] * 3, dtype="str"), "success": [True, None, False],
        "source_line": [1, 2, 3], "duration": [1.5, None, -0.0],
        "reward": np.array([1, 0, 1], dtype=np.int32),
        "final_label": pd.array([1, None, 0], dtype="Int64"),
    })
    clips = pd.DataFrame({"trajectory_id": ["t0", "t0", "t1", "t2"], "clip_index": [0, 1, 0, 0],
                          "end": [16, 51, 18, 2], "tool_type": ["search", "final", "final",
                                                                "final"]})
    averaged = average_judgments({"h": _judged(12)})
    with_arrow = summarize_trajectories(trajectories, clips, averaged, ["h_h"])
    as_objects = trajectories.astype(object)
    plain = summarize_trajectories(as_objects, clips, averaged, ["h_h"])
    assert digest_table(with_arrow) == digest_table(plain)
    assert math.isnan(with_arrow["final_result"].iloc[0])
    assert with_arrow["full_response_with_evaluations"].iloc[2].startswith(
        "中文\n<clip_evaluation>")


def _reference_one_judge_rows(ok_rows: list[bool], scores: list) -> tuple[list, list[str]]:
    """The single-judge path before it worked per distinct text: every ok row decoded,
    averaged and encoded on its own."""
    from eval_pipeline.scoring.averaging import _one_judge_means

    ok_at = [i for i, ok in enumerate(ok_rows) if ok]
    parsed: list = [None] * len(scores)
    for i, decoded in zip(ok_at, decode_json_objects([scores[i] for i in ok_at]), strict=True):
        parsed[i] = decoded
    results = [_one_judge_means(s) if ok else ({}, None, None)
               for ok, s in zip(ok_rows, parsed, strict=True)]
    return results, dumps_each([r[0] for r in results])


@pytest.mark.parametrize("rows", [
    [],
    [(True, '{"a": 0.5, "b": 1.0}')] * 3 + [(False, '{"a": 0.5, "b": 1.0}')],
    [(True, '{"a":1,"b":0.25}'), (True, '{"a": 1.0, "b": 0.25}'), (True, '{"a":1,"b":0.25}')],
    [(True, ""), (True, "{}"), (False, None), (True, '{"x": 0.1}'), (True, '{"x": 0.1}')],
    [(True, {"a": 1, "b": 0.5}), (True, '{"a": 0.3}'), (True, None), (False, float("nan"))],
    [(True, '{"a": NaN, "b": 1.0}'), (True, '{"a": Infinity}'), (True, '{"a": NaN, "b": 1.0}')],
])
def test_one_judge_rows_per_distinct_text_are_each_rows_own(rows: list) -> None:
    """Rows sharing a scores text get what each would get alone: the same means, mean and
    spread, the same output JSON (non-canonical texts re-encoded, dicts and missing values
    taken row by row, failed rows ``{}``)."""
    from eval_pipeline.scoring.averaging import _one_judge_rows

    ok_rows = [ok for ok, _ in rows]
    scores = [s for _, s in rows]
    got_results, got_texts = _one_judge_rows(ok_rows, scores)
    want_results, want_texts = _reference_one_judge_rows(ok_rows, scores)
    assert got_texts == want_texts
    assert repr(got_results) == repr(want_results)  # NaN included
    if len(rows) > 1 and rows[0] == rows[1] and rows[0][0] and isinstance(rows[0][1], str):
        assert got_results[0] is got_results[1]  # decoded and averaged once


def test_one_judge_rows_raise_on_a_broken_text_as_before() -> None:
    from eval_pipeline.scoring.averaging import _one_judge_rows

    with pytest.raises(json.JSONDecodeError):
        _one_judge_rows([True, True], ['{"a": 1.0}', '{"a": '])
    with pytest.raises(json.JSONDecodeError):
        _reference_one_judge_rows([True, True], ['{"a": 1.0}', '{"a": '])
