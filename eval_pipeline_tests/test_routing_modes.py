"""Routing match modes (#13.1, #13.3): agentevals' trajectory and argument modes at their
edges, BFCL's acceptable values, per-tool overrides and comparators, partial credit.

The expected verdicts are agentevals' semantics (``create_trajectory_match_evaluator``):
superset = every reference call made, subset = no call beyond the reference, unordered = both,
strict = the same messages in order, calls within one message in any order; repeats count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval_pipeline.formats import parse_file
from eval_pipeline.ingest import read_batch
from eval_pipeline.models import Step
from eval_pipeline.routing import (
    TRAJECTORY_MODES,
    RoutingRules,
    check_routing,
    render_report,
    results_from_table,
    routing_table,
)


def _calls(*turns: list[tuple[str, dict[str, Any]]] | tuple[str, dict[str, Any]]) -> list[Step]:
    """Tool-call steps; a list is one assistant message's parallel calls."""
    steps = []
    for turn, item in enumerate(turns):
        for name, args in (item if isinstance(item, list) else [item]):
            steps.append(Step(kind="tool_call", content=name, start=0, end=0, tool_name=name,
                              tool_input=json.dumps(args), turn=turn))
    return steps


def _expected(*entries: Any) -> list[dict[str, Any]]:
    out = []
    for position, entry in enumerate(entries):
        for name, args in (entry if isinstance(entry, list) else [entry]):
            out.append({"name": name, "arguments": args, "group": position})
    return out


A, B, C = ("search", {"q": "x"}), ("fetch", {"id": 1}), ("seed", {"sub": "py"})

# (case, actual, expected, {mode: passes}) under exact arguments.
TRAJECTORY_CASES = [
    ("same calls, same order", _calls(A, B), _expected(A, B),
     dict(strict=True, unordered=True, subset=True, superset=True)),
    ("same calls, other order", _calls(B, A), _expected(A, B),
     dict(strict=False, unordered=True, subset=True, superset=True)),
    ("parallel calls listed in another order", _calls([B, A]), _expected([A, B]),
     dict(strict=True, unordered=True, subset=True, superset=True)),
    ("parallel where two messages were expected", _calls([A, B]), _expected(A, B),
     dict(strict=False, unordered=True, subset=True, superset=True)),
    ("an extra call", _calls(A, B, C), _expected(A, B),
     dict(strict=False, unordered=False, subset=False, superset=True)),
    ("a missing call", _calls(A), _expected(A, B),
     dict(strict=False, unordered=False, subset=True, superset=False)),
    ("a repeated call", _calls(A, A), _expected(A),
     dict(strict=False, unordered=False, subset=False, superset=True)),
    ("a repeat expected, made once", _calls(A), _expected(A, A),
     dict(strict=False, unordered=False, subset=True, superset=False)),
    ("no call at all", [], _expected(A),
     dict(strict=False, unordered=False, subset=True, superset=False)),
    ("a wrong tool", _calls(C), _expected(A),
     dict(strict=False, unordered=False, subset=False, superset=False)),
]


@pytest.mark.parametrize("case,actual,expected,verdicts", TRAJECTORY_CASES,
                         ids=[c[0] for c in TRAJECTORY_CASES])
def test_trajectory_modes_at_their_edges(case, actual, expected, verdicts):
    for mode in TRAJECTORY_MODES:
        result = check_routing("t", case, actual, [], expected, mode)
        assert result.passed is verdicts[mode], (mode, result.reason)
        # Every mode is computed and stored, whichever one decides.
        assert result.mode_results[mode]["exact"] is verdicts[mode]
        assert getattr(result, f"{mode}_passed") is verdicts[mode]


def test_reasons_name_what_went_wrong():
    repeat = check_routing("t", "r", _calls(A, A), [], _expected(A), "unordered")
    assert repeat.unexpected == ["search"] and "repeated call" in repeat.reason
    missing = check_routing("t", "m", _calls(A), [], _expected(A, B), "superset")
    assert missing.missing == ["fetch"] and missing.reason.startswith("Missing expected tools")
    order = check_routing("t", "o", _calls(B, A), [], _expected(A, B), "strict")
    assert order.reason.startswith("Calls in a different order or grouping")
    assert order.actual_groups == [["fetch"], ["search"]]
    assert order.expected_groups == [["search"], ["fetch"]]


W = "get_weather"
# (actual arguments, expected arguments, {argument mode: passes})
ARGUMENT_CASES = [
    ({"city": "Paris"}, {"city": "Paris"},
     dict(exact=True, ignore=True, subset=True, superset=True)),
    ({"city": "Paris", "unit": "C"}, {"city": "Paris"},
     dict(exact=False, ignore=True, subset=False, superset=True)),
    ({"city": "Paris"}, {"city": "Paris", "unit": "C"},
     dict(exact=False, ignore=True, subset=True, superset=False)),
    ({"city": "Lyon"}, {"city": "Paris"},
     dict(exact=False, ignore=True, subset=False, superset=False)),
    ({"city": "paris"}, {"city": "Paris"},  # exact means exact: case counts
     dict(exact=False, ignore=True, subset=False, superset=False)),
    ({"q": {"tags": ["a", "b"], "since": {"year": 2020}}},
     {"q": {"tags": ["a", "b"], "since": {"year": 2020}}},
     dict(exact=True, ignore=True, subset=True, superset=True)),
    ({"q": {"tags": ["b", "a"], "since": {"year": 2020}}},
     {"q": {"tags": ["a", "b"], "since": {"year": 2020}}},
     dict(exact=False, ignore=True, subset=False, superset=False)),
    ({"q": {"tags": ["a", "b"], "since": {"year": 2021}}},
     {"q": {"tags": ["a", "b"], "since": {"year": 2020}}},
     dict(exact=False, ignore=True, subset=False, superset=False)),
    ({"flag": 1}, {"flag": True},  # JSON true is not 1
     dict(exact=False, ignore=True, subset=False, superset=False)),
]


@pytest.mark.parametrize("actual,expected,verdicts", ARGUMENT_CASES)
def test_argument_modes_fail_the_case_except_ignore(actual, expected, verdicts):
    for arg_mode, passes in verdicts.items():
        result = check_routing("t", "w", _calls((W, actual)), [], _expected((W, expected)),
                               "unordered", argument_mode=arg_mode)
        assert result.passed is passes, (arg_mode, result.reason)
        if not passes:
            assert result.reason.startswith(f"Arguments do not match ({arg_mode})")
            assert result.partial_credit == 0.0 and result.arguments_passed is False


def test_case_rules_override_the_run_per_tool():
    actual = _calls((W, {"city": "Lyon", "day": "mon"}), ("log", {"level": "debug"}))
    expected = _expected((W, {"city": "Paris", "day": "mon"}), ("log", {"level": "info"}))
    assert not check_routing("t", "x", actual, [], expected, "unordered").passed
    # agentevals' tool_args_match_overrides: a mode per tool, or the paths to compare.
    ignore_log = RoutingRules(argument_overrides={"log": "ignore", W: ["day"]})
    assert check_routing("t", "x", actual, [], expected, "unordered", rules=ignore_log).passed
    only_city = RoutingRules(argument_overrides={"log": "ignore", W: ["city"]})
    result = check_routing("t", "x", actual, [], expected, "unordered", rules=only_city)
    assert not result.passed and "city='Lyon'" in result.reason
    # The case's own modes beat the run's.
    case = RoutingRules(match_mode="subset", argument_mode="ignore")
    result = check_routing("t", "x", actual[:1], [], expected, "strict", rules=case)
    assert result.passed and (result.match_mode, result.argument_mode) == ("subset", "ignore")


def test_comparators_per_tool_and_argument():
    actual = _calls((W, {"city": " PARIS ", "temp": 20.04, "request_id": "r-991",
                         "opts": {"lang": "FR"}}))
    expected = _expected((W, {"city": "paris", "temp": 20, "request_id": "r-1",
                              "opts": {"lang": "fr"}}))
    assert not check_routing("t", "c", actual, [], expected).passed
    rules = RoutingRules.model_validate({"argument_comparators": {
        W: {"city": "case_insensitive", "temp": {"tolerance": 0.05}, "request_id": "any"},
        "*": {"opts": "case_insensitive"},  # a nested value: compared all the way down
    }})
    assert check_routing("t", "c", actual, [], expected, rules=rules).passed
    tight = RoutingRules.model_validate({"argument_comparators": {
        W: {"city": "case_insensitive", "temp": {"tolerance": 0.01}, "request_id": "any",
            "opts.lang": "case_insensitive"}}})
    result = check_routing("t", "c", actual, [], expected, rules=tight)
    assert not result.passed and "temp=20.04" in result.reason


def test_partial_credit_is_the_share_of_expected_calls_matched():
    result = check_routing("t", "p", _calls(A, ("fetch", {"id": 2})), [],
                           _expected(A, B, C), "superset")
    assert not result.passed
    assert (result.expected_calls_matched, result.expected_calls_total) == (1, 3)
    assert result.partial_credit == pytest.approx(1 / 3)
    assert check_routing("t", "p", _calls(A, B, C), [], _expected(A, B, C)).partial_credit == 1


def test_bfcl_acceptable_values_nested_dicts_and_duplicates():
    gold = [{"name": "ChaDri.change_drink", "group": 0, "arguments": {
        "drink_id": ["123"],
        "new_preferences": [{"size": ["large"], "temperature": ["hot"],
                             "sweetness_level": ["", "regular"], "milk_type": ["almond"],
                             "special_instructions": [""]}]}}]
    right = ("ChaDri_change_drink", {"drink_id": "123", "new_preferences": {
        "size": "Large", "temperature": "hot", "milk_type": "almond"}})
    ok = check_routing("t", "b", _calls([right]), [], gold, arguments_are_options=True)
    assert ok.passed and ok.bfcl_passed is True  # failed before #13: nested options
    twice = check_routing("t", "b", _calls([right, right]), [], gold,
                          arguments_are_options=True)
    # agentevals' superset passes a duplicate; BFCL (unordered, exact) does not.
    assert twice.passed and twice.bfcl_passed is False
    extra = ("ChaDri_change_drink", {**right[1], "extra": 1})
    assert check_routing("t", "b", _calls([extra]), [], gold,
                         arguments_are_options=True).bfcl_passed is False
    bad_nested = ("ChaDri_change_drink", {"drink_id": "123", "new_preferences": {
        "size": "large", "temperature": "cold", "milk_type": "almond"}})
    assert check_routing("t", "b", _calls([bad_nested]), [], gold,
                         arguments_are_options=True).bfcl_passed is False


def test_report_has_the_routing_evals_layout():
    results = [check_routing("a", "Knowledge base search", _calls(A), [], _expected(A),
                             prompt="What are people saying\nabout type hints?"),
               check_routing("b", "Specific thread fetch", [], [], _expected(B))]
    text = render_report(results)
    assert text.splitlines()[:3] == ["=" * 80, "AGENT EVALUATION RESULTS", "=" * 80]
    assert ("PASS  Knowledge base search\n"
            "  Prompt:    What are people saying about type hints?\n"
            "  Expected:  ['search']\n"
            "  Actual:    ['search']\n"
            "  Reason:    Correct tools called: ['search']") in text
    assert "FAIL  Specific thread fetch\n" in text and "  Actual:    []\n" in text
    assert text.splitlines()[-2:] == ["Results: 1/2 passed", "=" * 80]


def _chat_cases(tmp_path: Path) -> Path:
    def assistant(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}{name}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)]}

    def tool(call_id: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "content": "ok"}

    rows = [
        {"id": "parallel", "match_mode": "strict",
         "expected_calls": [[{"name": "fetch", "arguments": {"id": 1}},
                             {"name": "search", "arguments": {"q": "x"}}]],
         "messages": [{"role": "user", "content": "both"}, assistant(A, B),
                      tool("c0search"), tool("c1fetch"),
                      {"role": "assistant", "content": "done"}]},
        {"id": "sequential", "match_mode": "strict",
         "expected_calls": [[{"name": "fetch", "arguments": {"id": 1}},
                             {"name": "search", "arguments": {"q": "x"}}]],
         "messages": [{"role": "user", "content": "both"}, assistant(A), tool("c0search"),
                      assistant(B), tool("c0fetch")]},
        {"id": "lenient", "argument_mode": "ignore", "expected_tools": ["search"],
         "messages": [{"role": "user", "content": "q"}, assistant(("search", {"q": "y"}))]},
        {"id": "typo", "match_mode": "strikt", "expected_tools": ["search"],
         "messages": [{"role": "user", "content": "q"}]},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", "utf-8")
    return path


def test_chat_logs_carry_cases_with_parallel_calls_and_their_own_modes(tmp_path):
    path = _chat_cases(tmp_path)
    parsed = parse_file(path, "b")
    assert [(q.source_line, q.reason) for q in parsed.quarantined] == [(4, "wrong_type")]
    assert "match_mode" in parsed.quarantined[0].error
    parallel = parsed.trajectories[0]
    assert [s.turn for s in parallel.steps if s.kind == "tool_call"] == [0, 0]
    sequential = parsed.trajectories[1]
    assert [s.turn for s in sequential.steps if s.kind == "tool_call"] == [0, 1]
    raw, _ = read_batch(path, None, "b")  # the row form the asset reads
    table, results = routing_table(raw, "superset", "exact")
    verdicts = dict(zip(table["task_id"], table["passed"], strict=True))
    # One message's calls in any order pass strict; the same calls in two messages do not.
    assert verdicts == {"parallel": True, "sequential": False, "lenient": True}
    assert json.loads(table.set_index("task_id").loc["sequential", "actual_groups"]) == [
        ["search"], ["fetch"]]
    assert list(table["match_mode"]) == ["strict", "strict", "superset"]
    assert list(table["argument_mode"]) == ["exact", "exact", "ignore"]
    # The stored rows give the same report back.
    assert render_report(results_from_table(table)) == render_report(
        [r.model_copy(update={"prompt": ""}) for r in results])


BFCL = ("bfcl", "berkeley-function-call-leaderboard", "bfcl_eval", "data")


def _first_value(options: Any) -> Any:
    """A correct value from BFCL acceptable values: the first one, nested dicts filled with
    their own first non-optional values."""
    value = next((o for o in options if o != ""), "") if isinstance(options, list) else options
    if isinstance(value, dict):
        return {k: _first_value(v) for k, v in value.items()
                if not (isinstance(v, list) and v and v[0] == "")}
    if isinstance(value, list):
        return [_first_value([v]) if isinstance(v, dict) else v for v in value]
    return value


def _wrong(options: list[Any]) -> Any:
    sample = next((o for o in options if o != ""), "")
    if isinstance(sample, bool):
        return "not a bool"
    if isinstance(sample, int | float):
        return 987654321.5
    if isinstance(sample, list):
        return ["zz wrong value zz"]
    if isinstance(sample, dict):
        return {"zz": "wrong"}
    return "zz wrong value zz"


def synthetic_outputs(gold: list[dict[str, Any]]) -> list[tuple[str, list[Step], bool]]:
    """(mutation, calls of one response, BFCL's verdict by construction)."""
    correct = []
    for call in gold:
        args = {p: _first_value(v) for p, v in call["arguments"].items()
                if not (isinstance(v, list) and v and v[0] == "")}
        correct.append((call["name"], args))
    out: list[tuple[str, list[tuple[str, dict[str, Any]]], bool]] = [
        ("correct", correct, True),
        ("correct, underscored names", [(n.replace(".", "_"), a) for n, a in correct], True),
        ("correct, reversed", list(reversed(correct)), True),
        ("duplicated call", correct + correct[:1], False),
        ("extra parameter", [(correct[0][0], {**correct[0][1], "zz_extra": 1}),
                             *correct[1:]], False),
        ("wrong function", [("zz_not_a_function", correct[0][1]), *correct[1:]], False),
        ("no call", [], False),
    ]
    required = [p for p, v in gold[0]["arguments"].items() if "" not in v]
    if required:
        args = dict(correct[0][1])
        del args[required[0]]
        out.append(("missing required parameter", [(correct[0][0], args), *correct[1:]],
                    False))
        args = {**correct[0][1], required[0]: _wrong(gold[0]["arguments"][required[0]])}
        out.append(("wrong value", [(correct[0][0], args), *correct[1:]], False))
    optional = [p for p, v in gold[0]["arguments"].items() if "" in v and len(v) > 1]
    if optional:
        args = {**correct[0][1], optional[0]: _first_value(gold[0]["arguments"][optional[0]])}
        out.append(("optional parameter given", [(correct[0][0], args), *correct[1:]], True))
    return [(name, _calls(calls) if calls else [], verdict) for name, calls, verdict in out]


@pytest.mark.parametrize("category", ["simple_python", "multiple", "live_parallel_multiple"])
def test_bfcl_corpus_with_synthetic_outputs_agrees_with_bfcl_by_construction(
        corpora_dir, category):
    data = corpora_dir.joinpath(*BFCL)
    parsed = parse_file(data / f"BFCL_v4_{category}.json", "b")
    total = agree = 0
    superset_passes_duplicates = 0
    nested_correct = 0
    for traj in parsed.trajectories:
        assert traj.expected_calls is not None
        for mutation, steps, verdict in synthetic_outputs(traj.expected_calls):
            result = check_routing(traj.trajectory_id, traj.task_id, steps,
                                   traj.expected_tools or [], traj.expected_calls,
                                   empty_means_no_call=True, arguments_are_options=True)
            total += 1
            agree += result.bfcl_passed is verdict
            assert result.bfcl_passed is verdict, (traj.task_id, mutation, result.reason)
            if mutation == "duplicated call":
                superset_passes_duplicates += result.passed
            if verdict and any(isinstance(v, list) and any(isinstance(o, dict) for o in v)
                               for c in traj.expected_calls for v in c["arguments"].values()):
                nested_correct += result.bfcl_passed is True
    assert total > 7 * len(parsed.trajectories) and agree == total
    # The default agentevals-style verdict (superset) lets a duplicated call through.
    assert superset_passes_duplicates == len(parsed.trajectories)
    if category == "live_parallel_multiple":
        assert nested_correct > 0  # correct answers with nested-dict parameters pass
