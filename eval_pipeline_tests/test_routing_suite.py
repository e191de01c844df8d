"""Routing eval suites (#13.2): the suite file, the run through a model under test over the
real OpenAI and Anthropic SDKs against the fake servers, every mode's edge, failed calls,
and the report in the routing evals document's format."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.routing_suite import (
    RoutingSuite,
    SuiteFileError,
    load_suite,
    mode_summary,
    model_under_test,
    parse_suite,
    render_suite_report,
    run_case,
    run_suite,
    runs_from_table,
    suite_table,
)
from eval_pipeline_tests.judges.fake_servers import (
    FakeLLMServer,
    refusal,
    status,
    text,
    tool_calls,
)

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "suites" / "routing_evals.yaml"
KEY = "sk-test-SUITE-0a1b2c3d4e5f6a7b8c9d"
KINDS = ["openai", "anthropic"]


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest) -> Iterator[FakeLLMServer]:
    fake = FakeLLMServer(request.param).start()
    yield fake
    fake.stop()


def config_for(server: FakeLLMServer, **fields: Any) -> JudgeConfig:
    # concurrency 1: one conversation at a time, so the script's answers go to the cases
    # in suite order
    values: dict[str, Any] = {"name": "mut", "provider": server.kind,
                              "base_url": server.base_url, "api_key_env": "SUITE_KEY",
                              "concurrency": 1, "max_retries": 0, **fields}
    return JudgeConfig(**values)


def run(server: FakeLLMServer, suite: RoutingSuite, **config: Any):
    async def go():
        model = model_under_test(config_for(server, **config), KEY)
        try:
            return await run_suite(model, suite, suite_file="suite.yaml", retry_base_s=0.0)
        finally:
            await model.aclose()

    return asyncio.run(go())


def one_case(server: FakeLLMServer, suite: RoutingSuite, name: str, **modes: Any):
    async def go():
        model = model_under_test(config_for(server), KEY)
        try:
            case = next(c for c in suite.cases if c.name == name)
            return await run_case(model, suite, case, **modes)
        finally:
            await model.aclose()

    return asyncio.run(go())


def sent_tools(server: FakeLLMServer, index: int = 0) -> list[str]:
    tools = server.requests[index].body["tools"]
    return [t["function"]["name"] if server.kind == "openai" else t["name"] for t in tools]


def tool_results_sent(server: FakeLLMServer, index: int) -> list[tuple[str, str]]:
    """(call id, content) of the tool results a request carried back to the model."""
    out = []
    for m in server.requests[index].body["messages"]:
        if server.kind == "openai" and m["role"] == "tool":
            out.append((m["tool_call_id"], m["content"]))
        elif server.kind == "anthropic" and isinstance(m.get("content"), list):
            out += [(b["tool_use_id"], b["content"]) for b in m["content"]
                    if b.get("type") == "tool_result"]
    return out


# -- the suite file ----------------------------------------------------------------------

def test_the_sample_suite_is_the_documents_four_cases():
    suite = load_suite(SAMPLE)
    assert suite.name == "routing_evals"
    assert [(c.name, c.prompt, c.expected_tools) for c in suite.cases] == [
        ("Knowledge base search", "What are people saying about Python type hints?",
         ["search_knowledge_base"]),
        ("Live subreddit browse", "What's trending on r/python right now?",
         ["fetch_subreddit_posts"]),
        ("Explicit seed request", "Please seed r/learnpython with 2 threads",
         ["seed_subreddit"]),
        ("Specific thread fetch", "Can you fetch the Reddit thread with ID abc123?",
         ["fetch_reddit_thread"]),
    ]
    assert {t.name for t in suite.tools} == {"search_knowledge_base", "fetch_subreddit_posts",
                                             "seed_subreddit", "fetch_reddit_thread"}
    # every tool has a canned result, so each case can go on after its call
    assert all(json.loads(suite.tool_result(suite.cases[0], t.name)) for t in suite.tools)


TOOLS = [{"name": "a", "parameters": {"type": "object", "properties": {}}},
         {"name": "b", "description": "B"}]


@pytest.mark.parametrize("data, message", [
    ({"tools": TOOLS, "cases": [{"name": "x", "prompt": "p", "expected_tools": ["c"]}]},
     "case 'x': expects ['c'], which the model is never offered"),
    ({"tools": TOOLS, "tool_results": {"zz": 1},
      "cases": [{"name": "x", "prompt": "p", "expected_tools": ["a"]}]},
     "tool_results: canned result for ['zz'], which is not among the tools"),
    ({"tools": TOOLS, "cases": [{"name": "x", "prompt": "p", "expected_tools": ["a"]},
                                {"name": "x", "prompt": "q", "expected_tools": ["b"]}]},
     "cases: ['x'] used for two cases"),
    ({"tools": TOOLS, "cases": [{"name": "x", "prompt": "p"}]},
     "case 'x': needs expected_tools or expected_calls"),
    ({"tools": TOOLS, "cases": [{"name": "x", "prompt": "p", "expected_tools": ["a"],
                                 "match_mode": "loose"}]},
     "case 'x', field match_mode:"),
    ({"tools": [{"name": "a b"}], "cases": [{"name": "x", "prompt": "p",
                                            "expected_tools": []}]},
     "tool name 'a b' must be 1 to 64"),
])
def test_mistakes_in_a_suite_are_refused_in_one_line_naming_the_case(data, message):
    with pytest.raises(SuiteFileError) as caught:
        parse_suite(data)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_tools_pasted_in_either_providers_shape_are_one_definition(tmp_path):
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    suite = parse_suite({"tools": [
        {"type": "function", "function": {"name": "a", "description": "A", "parameters": schema}},
        {"name": "b", "description": "B", "input_schema": schema}],
        "cases": [{"name": "x", "prompt": "p", "expected_tools": ["a", "b"]}]})
    assert suite.tools[0].anthropic() == {"name": "a", "description": "A",
                                          "input_schema": schema}
    assert suite.tools[1].openai() == {"type": "function", "function": {
        "name": "b", "description": "B", "parameters": schema}}
    dup = tmp_path / "dup.yaml"
    dup.write_text("tools: []\ntools: []\ncases: []\n", "utf-8")
    with pytest.raises(SuiteFileError, match="given twice"):
        load_suite(dup)


# -- the sample suite through both SDKs ----------------------------------------------------

def test_sample_suite_right_wrong_none_and_two_in_parallel(server):
    """The four behaviours the issue names, one per case of the document's suite."""
    server.push(
        tool_calls(("search_knowledge_base", {"query": "Python type hints"})),
        text("People mostly like them."),                        # 1: the right tool
        tool_calls(("search_knowledge_base", {"query": "trending r/python"})),
        text("Here is what I found."),                           # 2: a wrong one
        text("I cannot seed subreddits."),                       # 3: none
        tool_calls(("fetch_reddit_thread", {"thread_id": "abc123"}),
                   ("search_knowledge_base", {"query": "abc123"}),
                   text="Fetching it and looking for context."),
        text("The thread asks about reading a large CSV."),      # 4: two in parallel
    )
    suite = load_suite(SAMPLE)
    result = run(server, suite)
    assert [o.status for o in result.outcomes] == ["pass", "fail", "fail", "pass"]
    assert (result.passed, result.failed, result.errors) == (2, 2, 0)
    right, wrong, none, parallel = result.outcomes
    assert wrong.result is not None and wrong.result.missing == ["fetch_subreddit_posts"]
    assert wrong.result.unexpected == ["search_knowledge_base"]
    assert none.actual_tools == [] and none.final_answer == "I cannot seed subreddits."
    # the two calls of one assistant message are one group, unordered among themselves
    assert parallel.result is not None
    assert parallel.result.actual_groups == [["fetch_reddit_thread", "search_knowledge_base"]]
    assert parallel.result.superset_passed and not parallel.result.unordered_passed
    # what the model was sent: the four tools in its API's shape, the system prompt ...
    assert sorted(sent_tools(server)) == sorted(t.name for t in suite.tools)
    first = server.requests[0].body
    system = (first["messages"][0]["content"] if server.kind == "openai"
              else first["system"])
    assert system.startswith("You are Forager")
    # ... and, after the calls, the canned results, one per call (both parallel ones)
    fed = tool_results_sent(server, 6)
    assert len(fed) == 2 and json.loads(fed[0][1])["id"] == "abc123"
    assert "Are type hints worth it" in tool_results_sent(server, 1)[0][1]
    assert len(server.requests) == 7  # a case ends at the first answer without a call
    assert right.turns == 2 and none.turns == 1
    assert right.tokens_in == 2 * server.tokens_in and right.cost_usd


def test_report_is_the_documents_format_exactly(server):
    server.push(tool_calls("search_knowledge_base"), text("ok"),
                text("No tool needed."),
                status(400, message="context too long"))
    suite = parse_suite({"name": "mini", "tools": [
        {"name": "search_knowledge_base"}, {"name": "seed_subreddit"}],
        "cases": [{"name": "Knowledge base search", "prompt": "Python type hints?",
                   "expected_tools": ["search_knowledge_base"]},
                  {"name": "Explicit seed request", "prompt": "Seed r/learnpython",
                   "expected_tools": ["seed_subreddit"]},
                  {"name": "Broken", "prompt": "Anything",
                   "expected_tools": ["seed_subreddit"]}]})
    result = run(server, suite)
    model = "gpt-4.1-mini" if server.kind == "openai" else "claude-sonnet-4-5"
    assert render_suite_report(result) == "\n".join([
        "=" * 80,
        "AGENT EVALUATION RESULTS",
        "=" * 80,
        "",
        "Suite: mini (3 cases)",
        f"Model: mut ({server.kind}, {model})",
        "Mode: superset (arguments: exact)",
        "",
        "PASS  Knowledge base search",
        "  Prompt:    Python type hints?",
        "  Expected:  ['search_knowledge_base']",
        "  Actual:    ['search_knowledge_base']",
        "  Reason:    Correct tools called: ['search_knowledge_base']",
        "",
        "FAIL  Explicit seed request",
        "  Prompt:    Seed r/learnpython",
        "  Expected:  ['seed_subreddit']",
        "  Actual:    []",
        "  Reason:    Missing expected tools: ['seed_subreddit']; called: []",
        "  Partial:   0/1 expected calls matched",
        "",
        "ERROR  Broken",
        "  Prompt:    Anything",
        "  Expected:  ['seed_subreddit']",
        "  Actual:    []",
        f"  Error:     {result.outcomes[2].error}",
        "",
        "-" * 80,
        "Results: 1/3 passed",
        "Errors: 1 (the model call failed: no verdict)",
        "=" * 80,
    ])
    assert "context too long" in (result.outcomes[2].error or "")
    assert mode_summary(result) == ("By mode: strict 1/2, unordered 1/2, subset 2/2, "
                                    "superset 1/2")
    # the stored table gives the same report back (the CLI prints it from the asset's table)
    again = runs_from_table(suite_table([result]))
    assert render_suite_report(again[0]) == render_suite_report(result)


# -- failed model calls ----------------------------------------------------------------------

def _single(name: str = "x", expected: list[str] | None = None, **case: Any) -> RoutingSuite:
    return parse_suite({"name": "s", "tools": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
                        "tool_results": {"a": "result of a", "b": {"rows": [1, 2]}},
                        "cases": [{"name": name, "prompt": "do it",
                                   "expected_tools": expected if expected is not None
                                   else ["a"], **case}]})


@pytest.mark.parametrize("act, words", [
    (status(500, message="overloaded"), "HTTP 500"),
    (status(401, echo_key=True), "HTTP 401"),
    (refusal("I can't help with that."), "model refused: I can't help with that."),
])
def test_a_failed_model_call_is_an_error_case_never_a_verdict(server, act, words):
    server.push(act)
    result = run(server, _single())
    (outcome,) = result.outcomes
    assert outcome.status == "error" and outcome.result is None
    assert words in (outcome.error or "")
    assert (result.passed, result.failed, result.errors) == (0, 0, 1)
    table = suite_table([result])
    assert table.loc[0, "status"] == "error"
    assert table.loc[0, "passed"] is pd.NA and table.loc[0, "superset_passed"] is pd.NA
    assert KEY not in table.to_json() and KEY not in render_suite_report(result)


def test_transient_failures_are_retried_as_a_judges_are(server):
    server.push(status(500), status(429, {"retry-after": "0"}), tool_calls("a"), text("done"))
    result = run(server, _single(), max_retries=2)
    assert [o.status for o in result.outcomes] == ["pass"]
    assert server.calls == 4


def test_an_error_after_a_call_keeps_the_calls_made_but_gives_no_verdict(server):
    server.push(tool_calls("a"), status(400, message="bad second turn"))
    (outcome,) = run(server, _single()).outcomes
    assert outcome.status == "error" and outcome.actual_tools == ["a"]
    assert "bad second turn" in (outcome.error or "")


# -- the judges' circuit breaker and budget ------------------------------------------------

def _cases(count: int, expected: list[str] | None = None) -> RoutingSuite:
    """``count`` one-turn cases; by default each expects no call (a text answer passes)."""
    return parse_suite({"name": "s", "tools": [{"name": "a"}, {"name": "b"}],
                        "cases": [{"name": f"case{i}", "prompt": f"question {i}",
                                   "expected_tools": expected or []}
                                  for i in range(count)]})


def test_a_failing_provider_opens_the_breaker_and_the_rest_of_the_suite_makes_no_call(server):
    # Every call fails (5xx, no retries): after 3 in a row the judges' breaker opens, and
    # the cases not yet done are errors saying so, without calling the dead provider.
    server.push(*[status(500, message="overloaded")] * 6)
    result = run(server, _cases(6))
    assert server.calls == 3
    errors = [o.error or "" for o in result.outcomes]
    assert all(o.status == "error" and o.result is None for o in result.outcomes)
    assert all("HTTP 500" in e and "circuit breaker" not in e for e in errors[:3])
    assert all(e.startswith("circuit breaker open: 3 consecutive calls failed; last "
                            "error: HTTP 500") for e in errors[3:]), errors
    assert (result.passed, result.failed, result.errors) == (0, 0, 6)


def test_a_bad_key_opens_the_breaker_at_once_and_stays_unshown(server):
    server.push(*[status(401, echo_key=True)] * 4)
    result = run(server, _cases(4))
    assert server.calls == 1
    errors = [o.error or "" for o in result.outcomes]
    assert "HTTP 401" in errors[0]
    assert all(e.startswith("circuit breaker open:") and "fatal" in e for e in errors[1:])
    table = suite_table([result])
    assert KEY not in table.to_json() and KEY not in render_suite_report(result)


def test_refusals_are_answers_and_never_open_the_breaker(server):
    server.push(*[refusal("No.")] * 4, text("fine"))
    result = run(server, _cases(5))
    assert server.calls == 5
    assert [o.status for o in result.outcomes] == ["error"] * 4 + ["pass"]
    assert all("model refused: No." in (o.error or "") for o in result.outcomes[:4])


def test_the_budget_caps_the_suites_spend_and_a_case_past_it_is_an_error(server):
    # Each answer costs 100 + 400 tokens at $1 a million: $0.0005. Each request's worst
    # case (its estimated input and all of max_tokens, 500) is reserved first, so with
    # $0.002 three requests fit and the fourth is not sent.
    server.tokens_in, server.tokens_out = 100, 400
    server.push(*[text("nothing to call")] * 4)
    result = run(server, _cases(4), max_tokens=500, budget_usd=0.002,
                 input_price_per_mtok=1.0, output_price_per_mtok=1.0)
    assert server.calls == 3
    assert [o.status for o in result.outcomes] == ["pass", "pass", "pass", "error"]
    refused = result.outcomes[3]
    assert refused.error == ("budget cap reached: $0.0015 spent of $0.0020; call not made")
    assert refused.result is None and refused.turns == 0 and refused.tokens_in == 0
    spent = sum(o.cost_usd or 0.0 for o in result.outcomes)
    assert spent == pytest.approx(0.0015) and spent <= 0.002


# -- every mode's edge, hand-written ---------------------------------------------------------

def test_strict_wants_the_messages_grouping_unordered_does_not(server):
    suite = _single(expected_calls=["a", "b"])  # a, then b, in two messages
    server.push(tool_calls("b", "a"), text("done"))
    outcome = one_case(server, suite, "x", mode="strict")
    assert outcome.result is not None
    assert not outcome.result.passed and outcome.result.unordered_passed
    assert "different order or grouping" in outcome.result.reason
    # expected together (a group): parallel calls in any order pass strict
    server.push(tool_calls("b", "a"), text("done"))
    grouped = one_case(server, _single(expected_calls=[["a", "b"]]), "x", mode="strict")
    assert grouped.result is not None and grouped.result.passed
    # and a call per turn, the canned result between them, passes the sequential one
    server.push(tool_calls("a"), tool_calls("b"), text("done"))
    turns = one_case(server, suite, "x", mode="strict")
    assert turns.result is not None and turns.result.passed
    assert turns.result.actual_groups == [["a"], ["b"]] and turns.turns == 3
    assert tool_results_sent(server, len(server.requests) - 2)[0][1] == "result of a"


def test_a_repeated_call_is_one_too_many_for_unordered_and_subset(server):
    server.push(tool_calls("a"), tool_calls("a"), text("done"))
    outcome = one_case(server, _single(), "x", mode="unordered")
    assert outcome.result is not None and not outcome.result.passed
    assert outcome.result.superset_passed and not outcome.result.subset_passed
    assert "repeated call counts as an extra call" in outcome.result.reason


def test_subset_lets_expected_calls_be_missing_superset_lets_extras_in(server):
    server.push(tool_calls("a"), text("done"))
    partial = one_case(server, _single(expected=["a", "b"]), "x", mode="subset")
    assert partial.result is not None and partial.result.passed
    assert not partial.result.superset_passed and partial.result.partial_credit == 0.5
    server.push(tool_calls("a", "c"), text("done"))
    extra = one_case(server, _single(), "x", mode="superset")
    assert extra.result is not None and extra.result.passed
    assert not extra.result.subset_passed and extra.result.unexpected == ["c"]


def test_argument_modes_on_the_arguments_the_model_sent(server):
    expected = [{"name": "a", "arguments": {"subreddit": "learnpython", "num_threads": 2}}]
    suite = _single(expected_calls=expected)
    server.push(tool_calls(("a", {"subreddit": "learnpython", "num_threads": 2,
                                  "sort": "new"})), text("done"))
    extra_arg = one_case(server, suite, "x", argument_mode="exact")
    assert extra_arg.result is not None and not extra_arg.result.passed
    modes = extra_arg.result.mode_results["superset"]
    assert modes == {"exact": False, "ignore": True, "subset": False, "superset": True}
    assert "unexpected argument 'sort'" in "; ".join(extra_arg.result.argument_failures)
    server.push(tool_calls(("a", {"subreddit": "LearnPython"})), text("done"))
    fewer = one_case(server, suite, "x", argument_mode="subset")
    assert fewer.result is not None and not fewer.result.passed  # LearnPython != learnpython
    server.push(tool_calls(("a", {"subreddit": "LearnPython"})), text("done"))
    folded = one_case(server, _single(expected_calls=expected, argument_comparators={
        "a": {"subreddit": "case_insensitive"}}), "x", argument_mode="subset")
    assert folded.result is not None and folded.result.passed


def test_call_nothing_passes_only_when_nothing_is_called(server):
    server.push(text("Hello! How can I help?"))
    quiet = one_case(server, _single(expected=[]), "x")
    assert quiet.result is not None and quiet.result.passed
    assert quiet.result.reason == "Correctly called no tool"
    server.push(tool_calls("a"), text("done"))
    eager = one_case(server, _single(expected=[]), "x")
    assert eager.result is not None and not eager.result.passed
    assert not any(eager.result.mode_results[m]["ignore"] for m in eager.result.mode_results)


def test_max_turns_stops_a_model_that_keeps_calling_and_an_invented_tool_gets_an_error(
        server):
    server.push(tool_calls("a"), tool_calls("made_up_tool"), tool_calls("a"))
    outcome = one_case(server, _single(max_turns=3), "x")
    assert outcome.stopped_at_max_turns and outcome.turns == 3 and server.calls == 3
    assert outcome.result is not None and outcome.result.unexpected == ["made_up_tool", "a"]
    fed = tool_results_sent(server, 2)
    assert json.loads(fed[-1][1]) == {"error": "unknown tool 'made_up_tool'"}
    assert not outcome.final_answer


def test_suite_and_case_modes_override_the_runs(server):
    suite = parse_suite({"tools": [{"name": "a"}, {"name": "b"}], "match_mode": "unordered",
                         "cases": [{"name": "own", "prompt": "p", "expected_tools": ["a"],
                                    "match_mode": "superset"},
                                   {"name": "suites", "prompt": "p", "expected_tools": ["a"]}]})
    server.push(tool_calls("a", "b"), text("done"), tool_calls("a", "b"), text("done"))
    result = run(server, suite)
    assert [(o.result.match_mode, o.status) for o in result.outcomes if o.result] == [
        ("superset", "pass"), ("unordered", "fail")]


# -- BFCL corpus cases as a suite, synthetic outputs from the gold answers ------------------

BFCL = ("bfcl", "berkeley-function-call-leaderboard", "bfcl_eval", "data")
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def _json_schema(value: Any) -> Any:
    """BFCL's function docs as JSON schema, as its own OpenAI handler converts them."""
    if isinstance(value, dict):
        out = {k: _json_schema(v) for k, v in value.items()}
        if out.get("type") == "any":
            del out["type"]
        elif isinstance(out.get("type"), str):
            out["type"] = _BFCL_TYPES.get(out["type"], out["type"])
        return out
    return [_json_schema(v) for v in value] if isinstance(value, list) else value


def _bfcl_case(question: dict[str, Any], gold: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A BFCL question as a suite case: its own tools (dotted names underscored, as BFCL
    sends them to OpenAI-style APIs), its gold calls as acceptable values."""
    tools = [{"name": f["name"].replace(".", "_"), "description": f.get("description", ""),
              "parameters": _json_schema(f["parameters"])} for f in question["function"]]
    calls = [{"name": name, "arguments": args} for call in gold or []
             for name, args in call.items()]
    return {"name": question["id"], "prompt": question["question"][0][-1]["content"],
            "tools": tools, "expected_calls": [calls] if calls else [],
            "arguments_are_options": True, "max_turns": 1}


def _bfcl_outputs(gold: list[dict[str, Any]]) -> list[tuple[str, list[Any], bool]]:
    """(mutation, the model's calls, BFCL's verdict by construction)."""
    from eval_pipeline_tests.test_routing_modes import _first_value, _wrong

    correct = [(name.replace(".", "_"),
                {p: _first_value(v) for p, v in args.items()
                 if not (isinstance(v, list) and v and v[0] == "")})
               for call in gold for name, args in call.items()]
    name0, args0 = correct[0]
    required = [p for p, v in next(iter(gold[0].values())).items() if "" not in v]
    out = [("correct", correct, True), ("reversed", correct[::-1], True),
           ("duplicated call", correct + correct[:1], False),
           ("wrong function", [("zz_not_a_function", args0), *correct[1:]], False),
           ("no call", [], False)]
    if required:
        wrong = _wrong(next(iter(gold[0].values()))[required[0]])
        out.append(("wrong value", [(name0, {**args0, required[0]: wrong}), *correct[1:]],
                    False))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_bfcl_questions_run_as_a_suite_give_bfcls_verdict(corpora_dir, kind):
    """Real function docs and gold answers through both SDKs: a model that answers with the
    gold calls (in any order) passes BFCL's check, one that repeats a call, invents a
    function, gets a value wrong or calls nothing does not; irrelevance questions pass only
    without a call."""
    data = corpora_dir.joinpath(*BFCL)

    def records(name: str, limit: int) -> list[dict[str, Any]]:
        lines = (data / name).read_text("utf-8").splitlines()[:limit]
        return [json.loads(line) for line in lines]

    answers = {r["id"]: r["ground_truth"]
               for name in ("BFCL_v4_live_parallel_multiple.json", "BFCL_v4_simple_python.json")
               for r in records(f"possible_answer/{name}", 10_000)}
    questions = (records("BFCL_v4_live_parallel_multiple.json", 8)
                 + records("BFCL_v4_simple_python.json", 4))
    cases, script, verdicts = [], [], []
    for q in questions:
        for mutation, calls, verdict in _bfcl_outputs(answers[q["id"]]):
            case = _bfcl_case(q, answers[q["id"]])
            cases.append({**case, "name": f"{q['id']} {mutation}"})
            script.append(tool_calls(*calls) if calls else text("I will not call anything."))
            verdicts.append(verdict)
    for q in records("BFCL_v4_irrelevance.json", 4):
        for calls, verdict in (([], True), ([(q["function"][0]["name"], {})], False)):
            cases.append({**_bfcl_case(q, None), "name": f"{q['id']} {len(calls)} calls"})
            script.append(tool_calls(*calls) if calls else text("No function fits."))
            verdicts.append(verdict)
    suite = parse_suite({"name": "bfcl", "cases": cases})
    fake = FakeLLMServer(kind).start()
    try:
        fake.push(*script)
        result = run(fake, suite)
        offered = sent_tools(fake, 0)
    finally:
        fake.stop()
    assert offered == [f["name"].replace(".", "_") for f in questions[0]["function"]]
    got = [(o.case.name, o.result.bfcl_passed if o.case.expected_calls
            else o.result.passed) for o in result.outcomes if o.result is not None]
    assert got == [(c["name"], v) for c, v in zip(cases, verdicts, strict=True)]
    assert result.errors == 0 and len(got) > 70


def test_the_readmes_example_suite_is_a_valid_suite():
    import re

    import yaml

    readme = (SAMPLE.parents[2] / "README.md").read_text("utf-8")
    section = readme[readme.index("### Routing eval suites"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None
    suite = parse_suite(yaml.safe_load(block.group(1)))
    _, calls, rules = suite.cases[1].expectation()
    assert calls == [{"name": "seed_subreddit",
                      "arguments": {"subreddit": "learnpython", "num_threads": 2}}]
    assert rules.argument_mode == "superset"
