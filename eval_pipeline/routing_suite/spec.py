"""The routing eval-suite file: tools, cases, canned tool results (a pydantic boundary).

The routing evals document's runner keeps its cases in code (``EvalCase(name, prompt,
expected_tools)``) and its mocked tool answers in a dict (``MOCK_TOOL_RESPONSES``). Here both
are data, in one YAML (or JSON) file, so a suite is written, reviewed and versioned without
touching code, and the same suite runs against any configured model:

```yaml
name: forager_routing
tools:                       # JSON-schema tool definitions, offered in every case
  - name: search_knowledge_base
    description: Search the stored Reddit threads
    parameters: {type: object, properties: {query: {type: string}}, required: [query]}
tool_results:                # canned answers, per tool, so a case can go on after a call
  search_knowledge_base: {"results": [...]}
cases:
  - name: Knowledge base search
    prompt: What are people saying about Python type hints?
    expected_tools: [search_knowledge_base]
```

A case's expectation is the routing checks' own (:mod:`eval_pipeline.routing`):
``expected_tools`` (names, any arguments), or ``expected_calls`` with arguments, where a
nested list is a group of calls expected together in one assistant message. An empty list
means "call no tool". A case may set ``match_mode``, ``argument_mode``,
``argument_overrides`` and ``argument_comparators``; the suite may set the first two for
all its cases. Mistakes a run would only reveal as a puzzling FAIL (an expected tool the
model is never offered, a canned result for a tool that does not exist, two cases of one
name) are refused when the file is read, in one line naming the case and the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from eval_pipeline.formats.records import RecordError
from eval_pipeline.formats.routing import expectations_from
from eval_pipeline.judges.config import _StrictLoader
from eval_pipeline.routing import (
    ArgumentMode,
    Comparator,
    RoutingRules,
    TrajectoryMode,
    normalize_tool,
)

# What both OpenAI (function names) and Anthropic (tool names) accept.
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
DEFAULT_MAX_TURNS = 5
SUITE_SUFFIXES = (".yaml", ".yml", ".json")
# What a tool without a canned result answers: the call worked and returned nothing in
# particular, so the model can go on (the document's runner answers every mocked call).
DEFAULT_TOOL_RESULT: dict[str, Any] = {"status": "ok"}


class SuiteFileError(ValueError):
    """A suite file that cannot be used, said in one line naming the case and the field."""


class ToolDefinition(BaseModel):
    """One tool offered to the model: a name, what it is for, its JSON-schema parameters.

    Written in the neutral form above, or pasted as OpenAI's ``{type: function, function:
    {...}}`` or Anthropic's ``{name, description, input_schema}``; sent in whichever form
    the model's API takes.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}})

    @model_validator(mode="before")
    @classmethod
    def _provider_shapes(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("type") == "function" \
                and isinstance(value.get("function"), dict):
            return value["function"]
        if isinstance(value, dict) and "input_schema" in value:
            out = {k: v for k, v in value.items() if k != "input_schema"}
            return {**out, "parameters": value["input_schema"]}
        return value

    @model_validator(mode="after")
    def _valid(self) -> ToolDefinition:
        if not _TOOL_NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must be 1 to 64 letters, digits, '_' "
                             "or '-' (what OpenAI and Anthropic accept)")
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema of "
                             "type object")
        return self

    def openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}

    def anthropic(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "input_schema": self.parameters}


class ExpectedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] | None = None


class SuiteCase(BaseModel):
    """One case: what the user asks and which calls the model should make."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    system: str | None = Field(default=None, description="Overrides the suite's system prompt")
    expected_tools: list[str] | None = None
    expected_calls: list[str | ExpectedCall | list[str | ExpectedCall]] | None = None
    match_mode: TrajectoryMode | None = None
    argument_mode: ArgumentMode | None = None
    argument_overrides: dict[str, ArgumentMode | list[str]] = Field(default_factory=dict)
    argument_comparators: dict[str, dict[str, Comparator]] = Field(default_factory=dict)
    tool_results: dict[str, Any] = Field(
        default_factory=dict, description="Canned results for this case, over the suite's")
    max_turns: int | None = Field(default=None, ge=1)
    tools: list[ToolDefinition] | None = Field(
        default=None, description="This case's own tools instead of the suite's (BFCL gives "
        "each question its own functions)")
    arguments_are_options: bool = Field(
        default=False, description="Expected arguments list acceptable values per parameter "
        "(BFCL's gold answers; \"\" among them: may be left out); the verdict then also "
        "gives BFCL's (bfcl_passed)")

    @model_validator(mode="after")
    def _has_expectation(self) -> SuiteCase:
        if self.expected_tools is None and self.expected_calls is None:
            raise ValueError("needs expected_tools or expected_calls ([] means: call no tool)")
        return self

    def expectation(self) -> tuple[list[str], list[dict[str, Any]] | None, RoutingRules]:
        """``expected_tools``, ``expected_calls`` (with groups) and the case's rules, read
        exactly as the routing-cases format reads a case row."""
        value = self.model_dump(exclude_none=True, exclude_defaults=True,
                                include={"expected_tools", "expected_calls", "match_mode",
                                         "argument_mode", "argument_overrides",
                                         "argument_comparators"})
        if self.expected_tools is not None:
            value["expected_tools"] = list(self.expected_tools)
        if self.expected_calls is not None:
            value["expected_calls"] = self.model_dump(include={"expected_calls"},
                                                      exclude_none=True)["expected_calls"]
        tools, calls, rules = expectations_from(value)
        return tools or [], calls, RoutingRules.model_validate(rules)


class RoutingSuite(BaseModel):
    """A suite file: tools shared by the cases (a case may bring its own), canned results,
    cases."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    description: str = ""
    system: str | None = Field(default=None, description="System prompt of every case")
    tools: list[ToolDefinition] = Field(default_factory=list)
    tool_results: dict[str, Any] = Field(default_factory=dict)
    default_tool_result: Any = Field(default_factory=lambda: dict(DEFAULT_TOOL_RESULT))
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1,
                           description="Model requests per case at most")
    match_mode: TrajectoryMode | None = None
    argument_mode: ArgumentMode | None = None
    cases: list[SuiteCase] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> RoutingSuite:
        for where, tools in [("tools", self.tools)] + [
                (f"case {c.name!r}, field tools", c.tools or []) for c in self.cases]:
            names = [t.name for t in tools]
            if len(set(names)) != len(names):
                raise ValueError(f"{where}: {sorted({n for n in names if names.count(n) > 1})}"
                                 " defined twice")
        cases = [c.name for c in self.cases]
        if len(set(cases)) != len(cases):
            dupes = sorted({n for n in cases if cases.count(n) > 1})
            raise ValueError(f"cases: {dupes} used for two cases; names must be unique "
                             "(each is a row and a report line)")
        everywhere = {normalize_tool(t.name) for t in self.tools} | {
            normalize_tool(t.name) for c in self.cases for t in c.tools or []}
        unknown = [t for t in self.tool_results if normalize_tool(t) not in everywhere]
        if unknown:
            raise ValueError(f"tool_results: canned result for {unknown}, which is not among "
                             "the tools")
        for case in self.cases:
            names = [t.name for t in self.tools_for(case)]
            if not names:
                raise ValueError(f"case {case.name!r}: no tools to offer (tools: in the suite "
                                 "or in the case)")
            offered = {normalize_tool(n) for n in names}
            unknown = [t for t in case.tool_results if normalize_tool(t) not in offered]
            if unknown:
                raise ValueError(f"case {case.name!r}, field tool_results: canned result for "
                                 f"{unknown}, which is not among the tools "
                                 f"({', '.join(names)})")
            try:
                expected, calls, _ = case.expectation()
            except RecordError as exc:
                raise ValueError(f"case {case.name!r}: {exc}") from None
            wanted = list(expected) + [c["name"] for c in calls or []]
            missing = [t for t in wanted if normalize_tool(t) not in offered]
            if missing:
                raise ValueError(f"case {case.name!r}: expects {missing}, which the model is "
                                 f"never offered (tools: {', '.join(names)})")
        return self

    def tools_for(self, case: SuiteCase) -> list[ToolDefinition]:
        """What the model is offered in ``case``: its own tools, else the suite's."""
        return case.tools if case.tools is not None else self.tools

    def tool_result(self, case: SuiteCase, tool: str) -> str:
        """The canned answer to a call of ``tool`` in ``case``, as the text a tool message
        carries. A tool the model invented gets an error, as an agent loop answers it."""
        key = normalize_tool(tool)
        if key not in {normalize_tool(t.name) for t in self.tools_for(case)}:
            value: Any = {"error": f"unknown tool {tool!r}"}
        else:
            value = next((v for source in (case.tool_results, self.tool_results)
                          for k, v in source.items() if normalize_tool(k) == key),
                         self.default_tool_result)
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    def modes_for(self, case: SuiteCase, mode: TrajectoryMode, argument_mode: ArgumentMode
                  ) -> tuple[TrajectoryMode, ArgumentMode]:
        """The run's modes under the suite's (a case's own still win in check_routing)."""
        return self.match_mode or mode, self.argument_mode or argument_mode


def _describe(exc: ValidationError, data: Any) -> str:
    first = exc.errors(include_url=False)[0]
    loc = list(first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if loc[:1] == ["cases"] and len(loc) >= 2 and isinstance(loc[1], int):
        cases = data.get("cases") if isinstance(data, dict) else None
        case = cases[loc[1]] if isinstance(cases, list) and loc[1] < len(cases) else None
        label = (f"case {case['name']!r}" if isinstance(case, dict) and case.get("name")
                 else f"case #{loc[1] + 1}")
        field = ".".join(str(p) for p in loc[2:])
        where = f"{label}, field {field}" if field else label
    elif loc:
        where = "field " + ".".join(str(p) for p in loc)
    else:
        where = ""
    more = len(exc.errors()) - 1
    line = f"{where}: {message}" if where else message
    return f"{line} (and {more} more)" if more else line


def parse_suite(data: Any, name: str = "") -> RoutingSuite:
    """A parsed suite file, validated; :class:`SuiteFileError` in one line if it is bad."""
    if not isinstance(data, dict):
        raise SuiteFileError("a suite file is a mapping with tools: and cases:")
    try:
        suite = RoutingSuite.model_validate(data)
    except ValidationError as exc:
        raise SuiteFileError(_describe(exc, data)) from None
    return suite if suite.name else suite.model_copy(update={"name": name})


def load_suite(path: str | Path) -> RoutingSuite:
    """A suite from a YAML or JSON file (JSON is YAML); its name defaults to the file's."""
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise SuiteFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # SafeLoader, duplicate keys refused
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise SuiteFileError(f"{path}: not valid YAML{where}: "
                             f"{getattr(exc, 'problem', None) or exc}") from None
    try:
        return parse_suite(data, path.stem)
    except SuiteFileError as exc:
        raise SuiteFileError(f"{path}: {exc}") from None
