"""Tool-routing cases and other reference records: a task plus the tools it should use.

None of these carry agent output; they feed the deterministic routing checks, which
compare ``expected_tools`` / ``expected_calls`` with the calls a run made. The prompt is
rendered as one ``user`` step so the trajectory is still well-formed.

- ``routing_cases``: ``{name, prompt, expected_tools}`` eval-suite rows, rows that carry
  ``expected_calls`` (``[{name, arguments?}]``), and ToolBench queries (``query`` with
  ``relevant APIs``, mapped to ToolBench's ``<api>_for_<tool>`` function names).
- ``bfcl``: BFCL question files; the ground truth in the sibling ``possible_answer/`` file of
  the same name becomes ``expected_calls`` (single-turn: ``{name, arguments: {param:
  [acceptable values]}}``; multi-turn: ``{name, call, turn}``). Irrelevance questions expect
  no call: ``expected_tools == []``.
- ``bfcl_answers``: an answer file read on its own: the gold calls rendered as tool-call
  steps (a reference trajectory, ``extra["reference"] = True``).
- ``devai_judgment``: DevAI requirement judgments (human or Agent-as-a-Judge); each
  requirement is a text step labelled +1.0 (satisfied) or -1.0 (not), the canonical scale.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from eval_pipeline.formats.base import ParseContext, RawRecord, iter_jsonl
from eval_pipeline.formats.chat import loads_lenient
from eval_pipeline.formats.records import (
    JsonRecordsParser,
    RecordError,
    as_bool,
    as_str,
    require,
)
from eval_pipeline.formats.render import Transcript, as_text
from eval_pipeline.models import Trajectory
from eval_pipeline.routing import RULE_KEYS, RoutingRules

_CALL_NAME = re.compile(r"^\s*([\w.]+)\s*\(")


def _std(name: str) -> str:
    """ToolBench's name standardisation: lower case, non-word runs to one underscore."""
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", name.lower())).strip("_")


def _prompt_steps(prompt: str) -> tuple[str, list[Any]]:
    out = Transcript()
    out.element("user", prompt)
    return out.text(), out.steps



def _signed(satisfied: bool | None) -> float | None:
    """Step labels use one scale across sources: +1 good, 0 neutral, -1 bad."""
    return None if satisfied is None else (1.0 if satisfied else -1.0)

def _expected_call(c: Any, group: int | None) -> dict[str, Any]:
    if isinstance(c, str):
        call: dict[str, Any] = {"name": c}
    elif isinstance(c, dict) and c.get("name"):
        call = {"name": str(c["name"]),
                **({"arguments": c["arguments"]} if "arguments" in c else {})}
    else:
        raise RecordError("wrong_type", f"expected call {c!r} has no name")
    if group is not None:
        call["group"] = group
    elif isinstance(c, dict) and isinstance(c.get("group"), int):
        call["group"] = c["group"]
    return call


def expectations_from(value: dict[str, Any]
                      ) -> tuple[list[str] | None, list[dict[str, Any]] | None, dict[str, Any]]:
    """``expected_tools``, ``expected_calls`` and routing rules of a case or a chat record.

    ``expected_calls`` entries are a tool name, ``{name, arguments?}``, or a list of those:
    calls expected together in one assistant message (parallel; no order among them), which
    get one ``group``. The rules (``match_mode``, ``argument_mode``, ``argument_overrides``,
    ``argument_comparators``) are validated here, so a typo quarantines the record instead
    of failing its batch's routing checks.
    """
    calls: list[dict[str, Any]] | None = None
    if "expected_calls" in value:
        raw = loads_lenient(value["expected_calls"])
        if not isinstance(raw, list):
            raise RecordError("wrong_type", "expected_calls must be a list")
        calls = []
        for position, c in enumerate(raw):
            if isinstance(c, list):
                calls.extend(_expected_call(member, position) for member in c)
            else:
                calls.append(_expected_call(c, None))
    tools: list[str] | None = None
    if "expected_tools" in value:
        raw_tools = loads_lenient(value["expected_tools"])
        if not isinstance(raw_tools, list) or not all(isinstance(t, str) for t in raw_tools):
            raise RecordError("wrong_type", "expected_tools must be a list of strings")
        tools = list(raw_tools)
    elif "relevant APIs" in value:
        apis = loads_lenient(value["relevant APIs"])
        if not isinstance(apis, list):
            raise RecordError("wrong_type", "relevant APIs must be a list")
        tools = [f"{_std(str(a[1]))}_for_{_std(str(a[0]))}" for a in apis
                 if isinstance(a, list | tuple) and len(a) == 2]
    elif calls is not None:
        tools = list(dict.fromkeys(c["name"] for c in calls))
    try:
        rules = RoutingRules.model_validate({k: value[k] for k in RULE_KEYS if k in value})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RecordError("wrong_type", f"routing rule {where}: {first['msg']}") from None
    return tools, calls, rules.model_dump(exclude_defaults=True)


class RoutingCaseParser(JsonRecordsParser):
    name: ClassVar[str] = "routing_cases"
    empty_expectation_means_no_call: ClassVar[bool] = True
    PROMPT_KEYS: ClassVar[tuple[str, ...]] = ("prompt", "query", "question", "input", "task")

    def sniff(self, path: Path, head: str) -> float:
        if '"messages"' in head and '"role"' in head:
            return 0.0  # a chat log that carries its case: the chat parser reads both
        if '"expected_tools"' in head or '"expected_calls"' in head:
            return 0.8
        if '"relevant APIs"' in head:
            return 0.9
        return 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        prompt = next((value[k] for k in self.PROMPT_KEYS if k in value), None)
        if prompt is None:
            raise RecordError("missing_field", f"no prompt under {', '.join(self.PROMPT_KEYS)}")
        if not isinstance(prompt, str):
            raise RecordError("wrong_type", f"prompt must be a string, got "
                                            f"{type(prompt).__name__}")
        tools, calls, rules = expectations_from(value)
        text, steps = _prompt_steps(prompt)
        task_id = next((value[k] for k in ("name", "id", "task_id", "query_id")
                        if value.get(k) is not None), None)
        return self.trajectory(
            rec, ctx, index,
            task_id=as_str(task_id) if task_id is not None else f"line{rec.line}",
            task_description=prompt, raw_response=text, steps=steps,
            expected_tools=tools, expected_calls=calls,
            extra={**{k: v for k, v in value.items()
                      if k not in self.PROMPT_KEYS and k not in RULE_KEYS},
                   **({"routing_rules": rules} if rules else {})},
        )



@lru_cache(maxsize=16)
def _answers(path: Path, mtime: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rec in iter_jsonl(path):
        if rec.value is not None and "id" in rec.value:
            out[str(rec.value["id"])] = rec.value.get("ground_truth")
    return out


def expected_from_ground_truth(truth: Any) -> list[dict[str, Any]]:
    """BFCL ground truth (either shape) as expected calls."""
    calls: list[dict[str, Any]] = []
    if not isinstance(truth, list):
        return calls
    for turn, item in enumerate(truth):
        if isinstance(item, list):  # multi-turn: a list of call strings per turn
            for call in item:
                m = _CALL_NAME.match(str(call))
                calls.append({"name": m.group(1) if m else str(call), "call": str(call),
                              "turn": turn})
        elif isinstance(item, dict):  # single-turn: every gold call is in one response
            for name, params in item.items():
                calls.append({"name": str(name), "arguments": params, "group": 0})
    return calls


class BfclParser(JsonRecordsParser):
    name: ClassVar[str] = "bfcl"
    empty_expectation_means_no_call: ClassVar[bool] = True
    expected_arguments_are_options: ClassVar[bool] = True

    def sniff(self, path: Path, head: str) -> float:
        if re.search(r'"question"\s*:\s*\[\s*\[', head):
            return 0.85
        return 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        qid = str(require(value, "id", str))
        turns = require(value, "question", list)
        out = Transcript()
        prompts: list[str] = []
        for t, turn in enumerate(turns):
            msgs = turn if isinstance(turn, list) else [turn]
            for m in msgs:
                if not isinstance(m, dict):
                    raise RecordError("wrong_type", f"question turn {t} holds a non-object")
                content = as_text(m.get("content"))
                role = str(m.get("role", "user"))
                out.element("system" if role == "system" else "user", content)
                if role != "system":
                    prompts.append(content)
        expected_calls: list[dict[str, Any]] | None = None
        expected_tools: list[str] | None = None
        answer_file = ctx.path.parent / "possible_answer" / ctx.path.name if ctx.path else None
        if answer_file is not None and answer_file.is_file():
            truth = _answers(answer_file, answer_file.stat().st_mtime).get(qid)
            if truth is not None:
                expected_calls = expected_from_ground_truth(truth)
                expected_tools = list(dict.fromkeys(c["name"] for c in expected_calls))
        if expected_calls is None and qid.startswith("irrelevance"):
            expected_calls, expected_tools = [], []
        functions = value.get("function")
        extra = {k: v for k, v in value.items() if k not in ("question",)}
        if isinstance(functions, list):
            extra["available_tools"] = [f.get("name") for f in functions if isinstance(f, dict)]
        return self.trajectory(
            rec, ctx, index, task_id=qid, task_description="\n\n".join(prompts),
            raw_response=out.text(), steps=out.steps,
            expected_calls=expected_calls, expected_tools=expected_tools, extra=extra,
        )


class BfclAnswersParser(JsonRecordsParser):
    name: ClassVar[str] = "bfcl_answers"

    def sniff(self, path: Path, head: str) -> float:
        first = head.lstrip().split("\n", 1)[0]
        return 0.85 if re.match(r'\{\s*"id"\s*:\s*"[^"]*"\s*,\s*"ground_truth"', first) else 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        qid = str(require(value, "id", str))
        truth = require(value, "ground_truth", list)
        calls = expected_from_ground_truth(truth)
        out = Transcript()
        for c in calls:
            args = c.get("call") or json.dumps(c.get("arguments"), ensure_ascii=False,
                                                default=str)
            out.element("tool_call", args, attrs={"name": c["name"]}, tool_name=c["name"],
                        tool_type=ctx.registry.tool_type_for_name(c["name"]), tool_input=args,
                        turn=c.get("group"))
        return self.trajectory(
            rec, ctx, index, task_id=qid, raw_response=out.text(), steps=out.steps,
            expected_calls=calls, expected_tools=list(dict.fromkeys(c["name"] for c in calls)),
            extra={"reference": True},
        )


class DevAiJudgmentParser(JsonRecordsParser):
    name: ClassVar[str] = "devai_judgment"
    whole_file: ClassVar[bool] = True

    def sniff(self, path: Path, head: str) -> float:
        return 0.9 if '"requirements"' in head and '"criteria"' in head else 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        query = require(value, "query", str)
        requirements = require(value, "requirements", list)
        out = Transcript()
        out.element("user", query)
        satisfied = 0
        for r in requirements:
            if not isinstance(r, dict):
                raise RecordError("wrong_type", "a requirement is not an object")
            sat = as_bool(r.get("satisfied"))
            satisfied += bool(sat)
            out.text_block(
                "text",
                f"Requirement {r.get('requirement_id')} [{r.get('category')}] "
                f"(prerequisites: {r.get('prerequisites')}): {r.get('criteria')}\n"
                f"satisfied: {sat}",
                label=_signed(sat),
            )
        for p in value.get("preferences") or []:
            if isinstance(p, dict):
                sat = as_bool(p.get("satisfied"))
                out.text_block("text", f"Preference {p.get('preference_id')}: "
                                       f"{p.get('criteria')}\nsatisfied: {sat}",
                               label=_signed(sat))
        parts = ctx.path.parts if ctx.path else ()
        judge = ("human" if "human_as_a_judge" in parts
                 else "agent_as_a_judge" if "agent_as_a_judge" in parts else None)
        developer = None
        for marker in ("human_as_a_judge", "agent_as_a_judge"):
            if marker in parts:
                developer = parts[parts.index(marker) - 1]
        extra = {k: v for k, v in value.items() if k not in ("query",)}
        extra.update({"judge": judge, "requirements_satisfied": satisfied,
                      "requirements_total": len(requirements)})
        return self.trajectory(
            rec, ctx, index, task_id=str(value.get("name") or Path(ctx.source_file).stem),
            task_description=query, raw_response=out.text(), steps=out.steps,
            success=as_bool(value.get("satisfied_all_requirements")),
            agent_version=developer, extra=extra,
        )
