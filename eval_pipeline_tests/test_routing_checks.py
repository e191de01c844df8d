import json

import pandas as pd

from eval_pipeline.ingest import ReadOptions, preprocess_batch, read_batch
from eval_pipeline.models import Step
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import check_routing, render_report, routing_table


def _call(name: str, args: dict | None = None) -> Step:
    return Step(kind="tool_call", content=name, start=0, end=0, tool_name=name,
                tool_input=json.dumps(args or {}))


def test_expected_tools_called_passes_and_missing_fails_with_reason():
    steps = [_call("search_knowledge_base"), _call("fetch_reddit_thread")]
    ok = check_routing("t", "kb", steps, ["search_knowledge_base"])
    assert ok.passed and ok.reason.startswith("Correct tools called")
    assert ok.unexpected == ["fetch_reddit_thread"]
    exact = check_routing("t", "kb", steps, ["search_knowledge_base"], mode="unordered")
    assert not exact.passed and "Unexpected" in exact.reason
    missing = check_routing("t", "seed", steps, ["seed_subreddit"])
    assert not missing.passed and missing.missing == ["seed_subreddit"]
    # Names match across case and dashes.
    assert check_routing("t", "x", [_call("Tavily-Search")], ["tavily_search"]).passed


def test_empty_expectation_depends_on_what_the_source_means():
    calls = [_call("get_user_details")]
    # BFCL irrelevance: the parser says an empty expectation means "call nothing".
    assert not check_routing("t", "irrelevance", calls, [], empty_means_no_call=True).passed
    assert check_routing("t", "irrelevance", [], [], empty_means_no_call=True).passed
    # tau-bench: no gold write action does not forbid reading.
    assert check_routing("t", "tau", calls, []).passed


def test_arguments_against_acceptable_values_and_exact_values():
    bfcl = check_routing("t", "area", [_call("calc_area", {"base": 10, "height": 5})],
                         ["calc_area"],
                         [{"name": "calc_area",
                           "arguments": {"base": [10], "height": [5], "unit": ["units", ""]}}],
                         arguments_are_options=True)
    assert bfcl.arguments_checked == 1 and bfcl.arguments_passed is True
    wrong = check_routing("t", "area", [_call("calc_area", {"base": 11, "height": 5})],
                          ["calc_area"],
                          [{"name": "calc_area", "arguments": {"base": [10], "height": [5]}}],
                          arguments_are_options=True)
    # A wrong argument value fails the case (#13.1), and says which argument.
    assert not wrong.passed and wrong.arguments_passed is False
    assert wrong.reason.startswith("Arguments do not match (exact)")
    assert "base=11" in wrong.argument_failures[0]
    tau = check_routing("t", "book", [_call("book", {"cabin": "economy", "bags": 1})],
                        ["book"], [{"name": "book", "arguments": {"cabin": "economy",
                                                                   "bags": 0}}])
    assert tau.arguments_passed is False and "bags=1, expected 0" in tau.argument_failures[0]


def test_report_counts_passes():
    results = [check_routing("a", "one", [_call("x")], ["x"]),
               check_routing("b", "two", [], ["y"])]
    text = render_report(results)
    assert "PASS  one" in text and "FAIL  two" in text and "Results: 1/2 passed" in text


def test_tau_bench_gold_actions_are_checked_on_every_trajectory(corpora_dir):
    path = corpora_dir / "tau_bench" / "historical_trajectories" / "gpt-4o-airline.trials0-1.json"
    raw, _ = read_batch(path, None, "tau")
    kept, _, _ = preprocess_batch(raw, PreprocessConfig(beta_threshold=1000,
                                                        duplicate_filter="flag"),
                                  ReadOptions().registry())
    table, _ = routing_table(kept, "superset")
    assert len(table) == len(kept) == 100
    merged = table.merge(kept[["trajectory_id", "reward"]], on="trajectory_id")
    full = merged["passed"].astype(bool)  # arguments are part of the verdict
    # The deterministic check agrees with the environment's reward more often than not,
    # and a pass is far likelier to be rewarded than a fail.
    assert pd.crosstab(full, merged["reward"]).values.trace() / len(merged) > 0.6
    assert merged[full]["reward"].mean() > merged[~full]["reward"].mean() + 0.3
