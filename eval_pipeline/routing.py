"""Deterministic tool-routing checks: did the agent call the tools it was expected to?

The lightweight eval-suite idea (a prompt plus ``expected_tools``, pass/fail per case) applied
to every trajectory that carries expectations, whatever its format: routing cases, BFCL gold
calls, tau-bench gold actions, chat logs that carry ``expected_calls``. No LLM is involved, so
these checks are exact and free, and they sit beside the judges' opinions as ground truth
where the source has it.

Two de-facto standards disagree on what "the right calls" means, so both are available:

- **LangChain agentevals** (``create_trajectory_match_evaluator``): a trajectory match mode
  (``strict``, ``unordered``, ``subset``, ``superset``) over the calls, an argument match mode
  (``exact``, ``ignore``, ``subset``, ``superset``) per call, and per-tool argument overrides
  (a mode, or the list of argument paths to compare). Calls made in one assistant message
  (``Step.turn``; an expected group) have no order among themselves. Repeats count: two calls
  of a tool expected once are one call too many for ``unordered`` and ``subset``.
- **BFCL's AST checker**: each gold parameter lists its acceptable values (``""``: may be
  left out), nested dicts list acceptable values per key, strings are compared after BFCL's
  standardisation, and the model must make exactly the gold calls (no duplicates, no extra
  parameters). That is ``unordered`` with ``exact`` arguments on an options-style
  expectation, which every trajectory gets stored beside the chosen mode.

Where agentevals matches calls greedily, this module finds a maximum matching (augmenting
paths), so a pass never depends on the order in which candidate calls are tried, and the
same matching gives partial credit: the share of expected calls matched.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from eval_pipeline.models import Step, steps_from_rows

TrajectoryMode = Literal["strict", "unordered", "subset", "superset"]
ArgumentMode = Literal["exact", "ignore", "subset", "superset"]
RoutingMode = TrajectoryMode  # the run-level setting's name since before #13
TRAJECTORY_MODES: tuple[TrajectoryMode, ...] = ("strict", "unordered", "subset", "superset")
ARGUMENT_MODES: tuple[ArgumentMode, ...] = ("exact", "ignore", "subset", "superset")
ComparatorKind = Literal["exact", "case_insensitive", "normalized", "numeric", "any"]


def normalize_tool(name: str) -> str:
    """Tool names match across case, dashes and dots (BFCL's ``math.factorial`` is sent to
    OpenAI-style APIs, which forbid dots, as ``math_factorial``)."""
    return name.strip().lower().replace("-", "_").replace(".", "_")


class Comparator(BaseModel):
    """How one argument's value is compared with the expected value.

    ``exact``: equal JSON values (``1 == 1.0``, but ``true`` is not ``1``); ``case_insensitive``:
    strings equal after trimming and case folding; ``normalized``: BFCL's string
    standardisation (spaces and ``,./-_*^`` removed, lower case, ``'`` as ``"``); ``numeric``:
    numbers within ``tolerance``; ``any``: any value (the argument must still be given where
    the argument mode asks for it). Nested values are compared with the same comparator all
    the way down unless a deeper path has its own.
    """

    model_config = ConfigDict(extra="forbid")

    kind: ComparatorKind = "exact"
    tolerance: float = Field(default=0.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"kind": value}
        if isinstance(value, dict) and "tolerance" in value and "kind" not in value:
            return {**value, "kind": "numeric"}
        return value


class RoutingRules(BaseModel):
    """A case's own routing settings, read from its data; what it leaves unset comes from
    the run (``--routing-mode``, ``--argument-mode``)."""

    model_config = ConfigDict(extra="forbid")

    match_mode: TrajectoryMode | None = None
    argument_mode: ArgumentMode | None = None
    argument_overrides: dict[str, ArgumentMode | list[str]] = Field(
        default_factory=dict,
        description="tool -> argument mode, or the argument paths (dotted for nested values) "
        "that alone are compared, as agentevals' tool_args_match_overrides.")
    argument_comparators: dict[str, dict[str, Comparator]] = Field(
        default_factory=dict,
        description="tool (or '*') -> argument path (or '*') -> comparator.")


RULE_KEYS: tuple[str, ...] = tuple(RoutingRules.model_fields)


class RoutingResult(BaseModel):
    """The row contract of ``routing_checks`` (``prompt`` is for the report only)."""

    trajectory_id: str
    task_id: str
    prompt: str = ""
    match_mode: TrajectoryMode = "superset"
    argument_mode: ArgumentMode = "exact"
    expected_tools: list[str]
    actual_tools: list[str]
    expected_groups: list[list[str]] = Field(default_factory=list)
    actual_groups: list[list[str]] = Field(default_factory=list)
    missing: list[str]
    unexpected: list[str]
    passed: bool
    reason: str
    strict_passed: bool = False
    unordered_passed: bool = False
    subset_passed: bool = False
    superset_passed: bool = False
    mode_results: dict[str, dict[str, bool]] = Field(
        default_factory=dict, description="trajectory mode -> argument mode -> passed")
    bfcl_passed: bool | None = Field(
        default=None, description="unordered calls, exact arguments: BFCL's verdict, for "
        "expectations that list acceptable values")
    partial_credit: float = 0.0
    expected_calls_matched: int = 0
    expected_calls_total: int = 0
    arguments_checked: int
    arguments_passed: bool | None
    argument_failures: list[str]


@dataclass(frozen=True)
class _Call:
    name: str
    key: str
    arguments: Any  # a dict, or None when the call's input is not a JSON object
    group: int


@dataclass(frozen=True)
class _Expected:
    name: str
    key: str
    arguments: Mapping[str, Any] | None  # None: any arguments
    group: int


def _parse_args(text: str | None) -> Mapping[str, Any] | None:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def _actual_calls(steps: Sequence[Step]) -> list[_Call]:
    """Tool calls in order; consecutive calls sharing a ``turn`` form one group."""
    calls: list[_Call] = []
    group, last_turn = -1, None
    for s in steps:
        if s.kind != "tool_call":
            continue
        if s.turn is None or s.turn != last_turn:
            group += 1
        last_turn = s.turn
        name = s.tool_name or "?"
        calls.append(_Call(name, normalize_tool(name), _parse_args(s.tool_input), group))
    return calls


def _expected_calls(expected_tools: Sequence[str],
                    expected_calls: Sequence[Mapping[str, Any]] | None) -> list[_Expected]:
    """Expected calls; ones sharing a ``group`` key were expected in one message. A tool
    named only in ``expected_tools`` is expected once, with any arguments."""
    out: list[_Expected] = []
    group, last = -1, object()
    for c in expected_calls or []:
        name = str(c.get("name"))
        tag = c.get("group")
        if tag is None or tag != last:
            group += 1
        last = tag
        args = c.get("arguments")
        out.append(_Expected(name, normalize_tool(name), args if isinstance(args, dict)
                             else None, group))
    named = {e.key for e in out}
    for name in expected_tools:
        if normalize_tool(name) not in named:
            group += 1
            named.add(normalize_tool(name))
            out.append(_Expected(name, normalize_tool(name), None, group))
    return out


_BFCL_STRIP = re.compile(r"[ ,./\-_*^]")


def _standardize(text: str) -> str:
    return _BFCL_STRIP.sub("", text).lower().replace("'", '"')


def _scalar_matches(actual: Any, want: Any, cmp: Comparator) -> bool:
    if isinstance(actual, bool) or isinstance(want, bool):
        return type(actual) is type(want) and actual == want
    if isinstance(actual, int | float) and isinstance(want, int | float):
        if cmp.kind == "numeric":
            return abs(float(actual) - float(want)) <= cmp.tolerance
        return float(actual) == float(want)
    if isinstance(actual, str) and isinstance(want, str):
        if cmp.kind == "case_insensitive":
            return actual.strip().casefold() == want.strip().casefold()
        if cmp.kind == "normalized":
            return _standardize(actual) == _standardize(want)
        return actual == want
    return bool(actual == want) and type(actual) is type(want)


Lookup = Callable[[str], Comparator]


def _matches(actual: Any, want: Any, path: str, lookup: Lookup, options: bool) -> bool:
    """Recursive comparison. With ``options`` (BFCL) a dict's values, at any depth, are
    lists of acceptable values, ``""`` among them meaning the key may be left out."""
    cmp = lookup(path)
    if cmp.kind == "any":
        return True
    if isinstance(want, dict):
        if not isinstance(actual, dict):
            return False
        if set(actual) - set(want):
            return False
        for key, expected in want.items():
            sub = f"{path}.{key}"
            if options:
                choices = expected if isinstance(expected, list) else [expected]
                if key not in actual:
                    if "" not in choices:
                        return False
                    continue
                if not any(_matches(actual[key], c, sub, lookup, True) for c in choices):
                    return False
            elif key not in actual or not _matches(actual[key], expected, sub, lookup, False):
                return False
        return True
    if isinstance(want, list):
        return (isinstance(actual, list) and len(actual) == len(want)
                and all(_matches(a, w, path, lookup, options)
                        for a, w in zip(actual, want, strict=True)))
    return _scalar_matches(actual, want, cmp)


class _ToolRules:
    """The argument mode, key list and comparators that apply to one expected tool."""

    def __init__(self, key: str, mode: ArgumentMode, rules: RoutingRules, options: bool):
        override = {normalize_tool(k): v for k, v in rules.argument_overrides.items()}.get(key)
        self.mode: ArgumentMode = override if isinstance(override, str) else mode
        self.keys: list[str] | None = override if isinstance(override, list) else None
        tables = {normalize_tool(k) if k != "*" else "*": v
                  for k, v in rules.argument_comparators.items()}
        self._tables = [tables[t] for t in (key, "*") if t in tables]
        self._default = Comparator(kind="normalized" if options else "exact")

    def comparator(self, path: str) -> Comparator:
        parts = path.split(".")
        candidates = [".".join(parts[:i]) for i in range(len(parts), 0, -1)] + ["*"]
        for table in self._tables:
            for candidate in candidates:
                if candidate in table:
                    return table[candidate]
        return self._default


def _get_path(value: Any, path: str) -> tuple[bool, Any]:
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _argument_problems(actual: Mapping[str, Any] | None, expected: Mapping[str, Any] | None,
                       tool: _ToolRules, options: bool) -> list[str]:
    """What is wrong with one call's arguments under the tool's argument mode; empty when
    they match. Expected arguments of None (a tool named without arguments) match any."""
    if expected is None or tool.mode == "ignore":
        return []
    if actual is None:
        return ["arguments are not a JSON object"]

    def check(value: Any, want: Any, path: str) -> bool:
        if options:
            choices = want if isinstance(want, list) else [want]
            return any(_matches(value, c, path, tool.comparator, True) for c in choices)
        return _matches(value, want, path, tool.comparator, False)

    problems: list[str] = []
    if tool.keys is not None:  # agentevals' list override: only these paths, compared
        for path in tool.keys:
            found_a, value = _get_path(actual, path)
            found_e, want = _get_path(expected, path)
            if not (found_a and found_e and check(value, want, path)):
                problems.append(f"{path}={value!r}, expected {want!r}" if found_a
                                else f"missing argument {path!r}")
        return problems
    for param, want in expected.items():
        if param not in actual:
            optional = options and isinstance(want, list) and "" in want
            if tool.mode in ("exact", "superset") and not optional:
                problems.append(f"missing argument {param!r}")
            continue
        if not check(actual[param], want, param):
            problems.append(f"{param}={actual[param]!r} not in expected {want!r}" if options
                            else f"{param}={actual[param]!r}, expected {want!r}")
    if tool.mode in ("exact", "subset"):
        problems += [f"unexpected argument {p!r}" for p in actual if p not in expected]
    return problems


def _max_matching(ok: list[list[bool]], rows: Iterable[int] | None = None,
                  cols: Iterable[int] | None = None) -> int:
    """Size of a maximum matching of actual calls (rows) to expected calls (columns)."""
    row_list = list(range(len(ok))) if rows is None else list(rows)
    col_set = set(range(len(ok[0]) if ok else 0)) if cols is None else set(cols)
    owner: dict[int, int] = {}

    def augment(r: int, seen: set[int]) -> bool:
        for c in col_set:
            if ok[r][c] and c not in seen:
                seen.add(c)
                if c not in owner or augment(owner[c], seen):
                    owner[c] = r
                    return True
        return False

    return sum(augment(r, set()) for r in row_list)


def _groups(items: Sequence[_Call | _Expected]) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(item.group, []).append(i)
    return list(groups.values())


def _mode_passes(mode: TrajectoryMode, ok: list[list[bool]], actual: Sequence[_Call],
                 expected: Sequence[_Expected], matched: int) -> bool:
    if mode == "superset":
        return matched == len(expected)
    if mode == "subset":
        return matched == len(actual)
    if mode == "unordered":
        return matched == len(actual) == len(expected)
    a_groups, e_groups = _groups(actual), _groups(expected)
    return len(a_groups) == len(e_groups) and all(
        len(a) == len(e) and _max_matching(ok, a, e) == len(e)
        for a, e in zip(a_groups, e_groups, strict=True))


def _names(items: Iterable[_Call | _Expected]) -> list[str]:
    return [i.name for i in items]


def _multiset_minus(left: Sequence[_Call | _Expected],
                    right: Sequence[_Call | _Expected]) -> list[str]:
    """Names in ``left`` beyond their count in ``right`` (by normalized name)."""
    budget = Counter(r.key for r in right)
    out = []
    for item in left:
        if budget[item.key] > 0:
            budget[item.key] -= 1
        else:
            out.append(item.name)
    return out


def _argument_failures(actual: Sequence[_Call], expected: Sequence[_Expected],
                       tools: Mapping[str, _ToolRules], options: bool) -> tuple[int, list[str]]:
    """Per expected call with arguments: is some call of that tool a match? (Independent of
    the trajectory mode, so it says which argument was wrong.)"""
    checked, failures = 0, []
    for e in expected:
        tool = tools[e.key]
        if e.arguments is None or tool.mode == "ignore":
            continue
        checked += 1
        candidates = [a for a in actual if a.key == e.key]
        if not candidates:
            failures.append(f"{e.name}: not called")
            continue
        attempts: list[list[str]] = [
            _argument_problems(a.arguments, e.arguments, tool, options) for a in candidates]
        if all(attempts):
            closest: list[str] = min(attempts, key=len)
            failures.append(f"{e.name}: " + "; ".join(closest))
    return checked, failures


def check_routing(trajectory_id: str, task_id: str, steps: Sequence[Step],
                  expected_tools: Sequence[str],
                  expected_calls: Sequence[Mapping[str, Any]] | None = None,
                  mode: TrajectoryMode = "superset", *, empty_means_no_call: bool = False,
                  arguments_are_options: bool = False, argument_mode: ArgumentMode = "exact",
                  rules: RoutingRules | None = None, prompt: str = "") -> RoutingResult:
    """Every trajectory mode under every argument mode, and the verdict of the chosen pair.

    The case's ``rules`` override the run's modes. The two flags come from the trajectory,
    set by its parser: an empty expectation means "call no tool" where the source says so
    (BFCL irrelevance, routing cases) and then no mode passes a call; elsewhere (tau-bench
    gold *write* actions) only that no particular tool is required. BFCL's expected
    arguments list the acceptable values of each parameter.
    """
    rules = rules or RoutingRules()
    mode = rules.match_mode or mode
    argument_mode = rules.argument_mode or argument_mode
    actual = _actual_calls(steps)
    expected = _expected_calls(expected_tools, expected_calls)
    options = arguments_are_options
    no_call = empty_means_no_call and not expected

    results: dict[str, dict[str, bool]] = {m: {} for m in TRAJECTORY_MODES}
    matched_by_arg: dict[str, int] = {}
    for arg_mode in ARGUMENT_MODES:
        tools = {e.key: _ToolRules(e.key, arg_mode, rules, options) for e in expected}
        ok = [[a.key == e.key and not _argument_problems(a.arguments, e.arguments,
                                                          tools[e.key], options)
               for e in expected] for a in actual]
        matched = _max_matching(ok)
        matched_by_arg[arg_mode] = matched
        for m in TRAJECTORY_MODES:
            results[m][arg_mode] = (not actual if no_call
                                    else _mode_passes(m, ok, actual, expected, matched))
    passed = results[mode][argument_mode]
    tools = {e.key: _ToolRules(e.key, argument_mode, rules, options) for e in expected}
    checked, failures = _argument_failures(actual, expected, tools, options)
    missing = _multiset_minus(expected, actual)
    unexpected = _multiset_minus(actual, expected)
    matched = matched_by_arg[argument_mode]
    reason = _reason(mode, argument_mode, passed, actual, expected, missing, unexpected,
                     failures, empty_means_no_call)
    return RoutingResult(
        trajectory_id=trajectory_id,
        task_id=task_id,
        prompt=prompt,
        match_mode=mode,
        argument_mode=argument_mode,
        expected_tools=_names(expected),
        actual_tools=_names(actual),
        expected_groups=[[expected[i].name for i in g] for g in _groups(expected)],
        actual_groups=[[actual[i].name for i in g] for g in _groups(actual)],
        missing=missing,
        unexpected=unexpected,
        passed=passed,
        reason=reason,
        **{f"{m}_passed": results[m][argument_mode] for m in TRAJECTORY_MODES},
        mode_results=results,
        bfcl_passed=results["unordered"]["exact"] if options else None,
        partial_credit=(matched / len(expected)) if expected else float(passed),
        expected_calls_matched=matched,
        expected_calls_total=len(expected),
        arguments_checked=checked,
        arguments_passed=(not failures) if checked else None,
        argument_failures=failures,
    )


def _reason(mode: TrajectoryMode, argument_mode: ArgumentMode, passed: bool,
            actual: Sequence[_Call], expected: Sequence[_Expected], missing: list[str],
            unexpected: list[str], failures: list[str], empty_means_no_call: bool) -> str:
    called = _names(actual)
    if not expected:
        if empty_means_no_call:
            return "Correctly called no tool" if passed else f"Expected no tool call, got {called}"
        return ("No particular tool was required" if passed
                else f"No tool was expected ({mode}), got {called}")
    if passed:
        names = list(dict.fromkeys(a.name for a in actual))
        return (f"Correct tools called: {names}" if names
                else f"No tool called, which {mode} allows")
    parts = []
    if missing and mode != "subset":
        parts.append(f"Missing expected tools: {missing}; called: {called}")
    if unexpected and mode != "superset":
        repeated = {normalize_tool(n) for n in unexpected} & {e.key for e in expected}
        parts.append(f"Unexpected tools called: {unexpected}"
                     + (" (a repeated call counts as an extra call)" if repeated else ""))
    if parts:
        return "; ".join(parts)
    if failures:
        return f"Arguments do not match ({argument_mode}): " + "; ".join(failures)
    if mode == "strict":
        return ("Calls in a different order or grouping: expected "
                f"{[[expected[i].name for i in g] for g in _groups(expected)]}, got "
                f"{[[actual[i].name for i in g] for g in _groups(actual)]}")
    return f"Arguments do not match ({argument_mode})"


ROUTING_JSON_COLUMNS = ("expected_tools", "actual_tools", "expected_groups", "actual_groups",
                        "missing", "unexpected", "mode_results", "argument_failures")
ROUTING_LIST_COLUMNS = ROUTING_JSON_COLUMNS  # the name readers used before #13
ROUTING_COLUMNS = [c for c in RoutingResult.model_fields if c != "prompt"]


def rules_of(extra: Any) -> RoutingRules | None:
    """The routing rules a parser stored in a trajectory's ``extra`` (JSON text or dict)."""
    data = json.loads(extra) if isinstance(extra, str) and extra else extra
    rules = data.get("routing_rules") if isinstance(data, dict) else None
    return RoutingRules.model_validate(rules) if rules else None


def routing_table(preprocessed: pd.DataFrame, mode: TrajectoryMode = "superset",
                  argument_mode: ArgumentMode = "exact"
                  ) -> tuple[pd.DataFrame, list[RoutingResult]]:
    """Checks of every trajectory that carries expected tools; rules read off the rows.

    Only those rows are converted to Python: the steps are Arrow (#12.1), and converting a
    trajectory's steps is most of what reading its row costs."""
    results = []
    recorded = (preprocessed["expected_tools"].tolist() if "expected_tools" in preprocessed
                else [None] * len(preprocessed))
    # no expectation recorded: nothing to check
    at = [i for i, expected in enumerate(recorded) if isinstance(expected, str)]
    for row in _rows_at(preprocessed, at, _CHECK_COLUMNS):
        expected = row["expected_tools"]
        calls = row.get("expected_calls")
        results.append(check_routing(
            row["trajectory_id"], str(row["task_id"]), steps_from_rows(row["steps"]),
            json.loads(expected), json.loads(calls) if isinstance(calls, str) else None,
            mode, empty_means_no_call=bool(row.get("empty_expectation_means_no_call")),
            arguments_are_options=bool(row.get("expected_arguments_are_options")),
            argument_mode=argument_mode, rules=rules_of(row.get("extra")),
            prompt=str(row.get("task_description") or ""),
        ))
    rows: list[dict[str, Any]] = []
    for r in results:
        out = r.model_dump(exclude={"prompt"})
        for column in ROUTING_JSON_COLUMNS:
            out[column] = json.dumps(out[column], ensure_ascii=False)
        rows.append(out)
    return pd.DataFrame(rows, columns=ROUTING_COLUMNS), results


_CHECK_COLUMNS = ("trajectory_id", "task_id", "steps", "expected_tools", "expected_calls",
                  "empty_expectation_means_no_call", "expected_arguments_are_options",
                  "extra", "task_description")
"""The columns a routing check reads."""


def _rows_at(frame: pd.DataFrame, rows: list[int], columns: Sequence[str]
             ) -> list[dict[str, Any]]:
    """``frame.iloc[rows][columns].to_dict("records")`` (the same Python values) without
    copying the other columns (the responses) or pandas reading an Arrow column (the
    steps) row by row: each column's rows taken and converted at once."""
    names = [c for c in columns if c in frame.columns]
    values = [frame[c].take(rows).tolist() for c in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]


def results_from_table(table: pd.DataFrame, prompts: Mapping[str, str] | None = None
                       ) -> list[RoutingResult]:
    """Results back from stored ``routing_checks`` rows (to print the report of a run)."""
    out = []
    for row in table.to_dict("records"):
        data = {k: v for k, v in row.items() if k in RoutingResult.model_fields}
        for column in ROUTING_JSON_COLUMNS:
            if isinstance(data.get(column), str):
                data[column] = json.loads(data[column])
        if data.get("bfcl_passed") is not None and pd.isna(data["bfcl_passed"]):
            data["bfcl_passed"] = None
        if data.get("arguments_passed") is not None and pd.isna(data["arguments_passed"]):
            data["arguments_passed"] = None
        data["prompt"] = (prompts or {}).get(str(row["trajectory_id"]), "")
        out.append(RoutingResult.model_validate(data))
    return out


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def render_report(results: Sequence[RoutingResult]) -> str:
    """The eval suite's text report, as the routing evals document prints it: one block per
    case, then the pass count."""
    bar = "=" * 80
    lines = [bar, "AGENT EVALUATION RESULTS", bar, ""]
    modes = sorted({(r.match_mode, r.argument_mode) for r in results})
    if modes:
        lines += ["Mode: " + ", ".join(f"{m} (arguments: {a})" for m, a in modes), ""]
    for r in results:
        lines += report_case_lines(r)
    passed = sum(r.passed for r in results)
    lines += ["-" * 80, f"Results: {passed}/{len(results)} passed", bar]
    return "\n".join(lines)


def report_case_lines(r: RoutingResult) -> list[str]:
    """One case's block of the report (``PASS``/``FAIL`` name, prompt, expected, actual,
    reason), shared by the routing checks' report and the eval suites'."""
    lines = [f"{'PASS' if r.passed else 'FAIL'}  {r.task_id}"]
    if r.prompt:
        lines.append(f"  Prompt:    {one_line(r.prompt)}")
    lines += [
        f"  Expected:  {r.expected_tools}",
        f"  Actual:    {r.actual_tools}",
        f"  Reason:    {r.reason}",
    ]
    if r.arguments_checked:
        verdict = "ok" if r.arguments_passed else "; ".join(r.argument_failures)
        lines.append(f"  Arguments: {verdict}")
    if r.expected_calls_total and not r.passed:
        lines.append(f"  Partial:   {r.expected_calls_matched}/{r.expected_calls_total} "
                     "expected calls matched")
    lines.append("")
    return lines


one_line = _one_line  # for the eval suites' report
