"""Deterministic tool-routing checks: did the agent call the tools it was expected to?

The lightweight eval-suite idea (a prompt plus ``expected_tools``, pass/fail per case) applied
to every trajectory that carries expectations, whatever its format: routing cases, BFCL gold
calls, tau-bench gold actions. No LLM is involved, so these checks are exact and free, and
they sit beside the judges' opinions as ground truth where the source has it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel

from eval_pipeline.models import Step, steps_from_rows

RoutingMode = Literal["subset", "exact"]


def normalize_tool(name: str) -> str:
    return name.strip().lower().replace("-", "_")


class RoutingResult(BaseModel):
    """The row contract of ``routing_checks``."""

    trajectory_id: str
    task_id: str
    expected_tools: list[str]
    actual_tools: list[str]
    missing: list[str]
    unexpected: list[str]
    passed: bool
    reason: str
    arguments_checked: int
    arguments_passed: bool | None
    argument_failures: list[str]


def _parse_args(text: str | None) -> Mapping[str, Any] | None:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def _value_matches(actual: Any, expected: Any, acceptable_lists: bool) -> bool:
    if acceptable_lists and isinstance(expected, list):
        return any(_value_matches(actual, option, False) for option in expected)
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return float(actual) == float(expected)
    if isinstance(expected, str) and isinstance(actual, str):
        return actual.strip().lower() == expected.strip().lower()
    return actual == expected


def _arguments_match(actual: Mapping[str, Any], expected: Mapping[str, Any],
                     acceptable_lists: bool) -> list[str]:
    """Problems with one call's arguments; empty when they match."""
    problems = []
    for param, want in expected.items():
        optional = acceptable_lists and isinstance(want, list) and "" in want
        if param not in actual:
            if not optional:
                problems.append(f"missing argument {param!r}")
            continue
        if not _value_matches(actual[param], want, acceptable_lists):
            problems.append(f"{param}={actual[param]!r} not in expected {want!r}"
                            if acceptable_lists else
                            f"{param}={actual[param]!r}, expected {want!r}")
    return problems


def check_arguments(calls: Sequence[Step], expected_calls: Iterable[Mapping[str, Any]],
                    acceptable_lists: bool) -> tuple[int, list[str]]:
    """Each expected call with arguments must be matched by some actual call of that tool."""
    checked, failures = 0, []
    for expected in expected_calls:
        want = expected.get("arguments")
        name = expected.get("name")
        if not isinstance(want, dict) or not isinstance(name, str):
            continue
        checked += 1
        candidates = [c for c in calls
                      if normalize_tool(c.tool_name or "") == normalize_tool(name)]
        if not candidates:
            failures.append(f"{name}: not called")
            continue
        attempts = []
        for call in candidates:
            args = _parse_args(call.tool_input)
            if args is None:
                attempts.append(["arguments are not a JSON object"])
                continue
            attempts.append(_arguments_match(args, want, acceptable_lists))
        if not any(not problems for problems in attempts):
            best = min(attempts, key=len)
            failures.append(f"{name}: " + "; ".join(best))
    return checked, failures


def check_routing(trajectory_id: str, task_id: str, steps: Sequence[Step],
                  expected_tools: Sequence[str],
                  expected_calls: Sequence[Mapping[str, Any]] | None = None,
                  mode: RoutingMode = "subset", *, empty_means_no_call: bool = False,
                  arguments_are_options: bool = False) -> RoutingResult:
    """Pass when every expected tool was called (``exact``: and nothing else).

    The two flags come from the trajectory, set by its parser: an empty expectation means
    "call no tool" where the source says so (BFCL irrelevance, routing cases), elsewhere
    (tau-bench gold *write* actions) only that no particular tool is required; BFCL's
    expected arguments list the acceptable values of each parameter.
    """
    calls = [s for s in steps if s.kind == "tool_call"]
    actual = list(dict.fromkeys(s.tool_name or "?" for s in calls))
    actual_norm = {normalize_tool(t) for t in actual}
    expected_norm = {normalize_tool(t) for t in expected_tools}
    missing = [t for t in expected_tools if normalize_tool(t) not in actual_norm]
    unexpected = [t for t in actual if normalize_tool(t) not in expected_norm]
    if not expected_tools and empty_means_no_call:
        passed = not actual
        reason = "Correctly called no tool" if passed else f"Expected no tool call, got {actual}"
    elif not expected_tools:
        passed = mode != "exact" or not actual
        reason = ("No particular tool was required" if passed
                  else f"Expected no tool call, got {actual}")
    elif missing:
        passed = False
        reason = f"Missing expected tools: {missing}; called: {actual}"
    elif mode == "exact" and unexpected:
        passed = False
        reason = f"Unexpected tools called: {unexpected}"
    else:
        passed = True
        reason = f"Correct tools called: {sorted(set(actual) - set(unexpected)) or actual}"
    checked, failures = check_arguments(calls, expected_calls or [], arguments_are_options)
    return RoutingResult(
        trajectory_id=trajectory_id,
        task_id=task_id,
        expected_tools=list(expected_tools),
        actual_tools=actual,
        missing=missing,
        unexpected=unexpected,
        passed=passed,
        reason=reason,
        arguments_checked=checked,
        arguments_passed=(not failures) if checked else None,
        argument_failures=failures,
    )


ROUTING_LIST_COLUMNS = ("expected_tools", "actual_tools", "missing", "unexpected",
                        "argument_failures")


def routing_table(preprocessed: pd.DataFrame, mode: RoutingMode
                  ) -> tuple[pd.DataFrame, list[RoutingResult]]:
    """Checks of every trajectory that carries expected tools; rules read off the rows."""
    results = []
    for row in preprocessed.to_dict("records"):
        expected = row.get("expected_tools")
        if not isinstance(expected, str):  # no expectation recorded: nothing to check
            continue
        calls = row.get("expected_calls")
        results.append(check_routing(
            row["trajectory_id"], str(row["task_id"]), steps_from_rows(row["steps"]),
            json.loads(expected), json.loads(calls) if isinstance(calls, str) else None,
            mode, empty_means_no_call=bool(row.get("empty_expectation_means_no_call")),
            arguments_are_options=bool(row.get("expected_arguments_are_options")),
        ))
    rows: list[dict[str, Any]] = []
    for r in results:
        out = r.model_dump()
        for column in ROUTING_LIST_COLUMNS:
            out[column] = json.dumps(out[column], ensure_ascii=False)
        rows.append(out)
    return pd.DataFrame(rows, columns=list(RoutingResult.model_fields)), results


def render_report(results: Sequence[RoutingResult]) -> str:
    """The eval suite's text report: one block per case, then the pass count."""
    bar = "=" * 80
    lines = [bar, "AGENT EVALUATION RESULTS", bar, ""]
    for r in results:
        lines += [
            f"{'PASS' if r.passed else 'FAIL'}  {r.task_id}",
            f"  Expected:  {r.expected_tools}",
            f"  Actual:    {r.actual_tools}",
            f"  Reason:    {r.reason}",
        ]
        if r.arguments_checked:
            verdict = "ok" if r.arguments_passed else "; ".join(r.argument_failures)
            lines.append(f"  Arguments: {verdict}")
        lines.append("")
    passed = sum(r.passed for r in results)
    lines += ["-" * 80, f"Results: {passed}/{len(results)} passed", bar]
    return "\n".join(lines)
