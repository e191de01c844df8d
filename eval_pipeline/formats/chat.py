"""Chat messages with tool calls, rendered into one transcript (see ``render``).

One renderer reads every chat dialect seen in the wild, per message, so a file can mix them:

- OpenAI ``tool_calls`` (arguments as a JSON string) with ``tool`` replies matched by
  ``tool_call_id``, and the legacy ``function_call`` with ``function`` replies;
- Anthropic content blocks: ``text``, ``thinking``, ``tool_use`` and ``tool_result``;
- ShareGPT ``{from, value}`` turns (``human``/``gpt``/``function_call``/``observation``);
- DataEva's ``action`` role, whose content is a ``<tool_call>{json}</tool_call>``;
- assistant text that is itself ReAct (FireAct) or carries ``<think>``/``<answer>`` tags:
  such text is kept verbatim and its steps are located inside it.

The last assistant message with text and no later tool call is the answer.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from eval_pipeline.formats.react import looks_like_react, parse_react_text
from eval_pipeline.formats.render import Transcript, as_text
from eval_pipeline.formats.xml_tags import analyze_xml_response, parse_tool_call_json
from eval_pipeline.models import Step, StepKind
from eval_pipeline.tool_registry import ToolRegistry

_ROLE_ALIASES = {
    "human": "user", "gpt": "assistant", "bot": "assistant", "model": "assistant",
    "ai": "assistant", "developer": "system", "function_call": "action",
    "observation": "tool", "ipython": "tool",
}
_XML_HINT = re.compile(r"^[ \t]*<(think|tool_call|answer|result)>", re.IGNORECASE | re.MULTILINE)
_TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class RenderedChat:
    text: str
    steps: list[Step]
    #: For each input message, the indices (into ``steps``) of the steps it produced.
    message_steps: list[list[int]]
    notes: list[str] = field(default_factory=list)


def loads_lenient(value: Any) -> Any:
    """JSON text, or a Python-literal repr (ToolBench, SWE-agent), or the value as is."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def _arguments_text(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False, default=str)


def _role(message: dict[str, Any]) -> str:
    role = message.get("role", message.get("from", ""))
    role = str(role).lower() if role is not None else ""
    return _ROLE_ALIASES.get(role, role)


def _content(message: dict[str, Any]) -> Any:
    if "content" in message:
        return message["content"]
    return message.get("value")


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI tool_calls or a legacy function_call, as ``{id, name, arguments}``."""
    calls: list[dict[str, Any]] = []
    raw_calls = loads_lenient(message.get("tool_calls"))
    if isinstance(raw_calls, list):
        for c in raw_calls:
            c = loads_lenient(c)
            if not isinstance(c, dict):
                continue
            fn = loads_lenient(c.get("function")) or {}
            if not isinstance(fn, dict):
                fn = {}
            calls.append({
                "id": as_opt(c.get("id")),
                "name": fn.get("name", c.get("name")),
                "arguments": _arguments_text(fn.get("arguments", c.get("arguments", ""))),
            })
    fc = loads_lenient(message.get("function_call"))
    if isinstance(fc, dict):
        calls.append({"id": None, "name": fc.get("name"),
                      "arguments": _arguments_text(fc.get("arguments", ""))})
    return calls


def _finish_text(arguments: str) -> str:
    value = loads_lenient(arguments)
    if isinstance(value, dict) and "final_answer" in value:
        return as_text(value["final_answer"])
    return arguments


def as_opt(value: Any) -> str | None:
    return None if value is None else str(value)


def render_messages(messages: list[Any], registry: ToolRegistry) -> RenderedChat:
    """Render a message list; a message that is not an object is kept as text and noted."""
    out = Transcript()
    notes: list[str] = []
    message_steps: list[list[int]] = []
    names_by_id: dict[str, str] = {}
    last_call_name: str | None = None
    finished = False
    answer_index = _answer_message(messages)

    for index, message in enumerate(messages):
        before = len(out.steps)
        if not isinstance(message, dict):
            notes.append(f"message {index} is a {type(message).__name__}, kept as text")
            out.text_block("text", as_text(message))
            message_steps.append(list(range(before, len(out.steps))))
            continue
        role = _role(message)
        content = _content(message)
        if role == "system":
            out.element("system", as_text(content))
        elif role == "user" and isinstance(content, list):
            _blocks(out, content, registry, names_by_id, role)
        elif role == "user":
            text = as_text(content)
            if re.match(r"\s*Observation(?:\s+\d+)?\s*:", text):
                kind: StepKind = "text" if finished else "tool_result"
                body = text.strip()
                out.text_block(kind, body, tool_name=last_call_name if kind != "text" else None)
            else:
                out.element("user", text)
        elif role in ("tool", "function"):
            call_id = as_opt(message.get("tool_call_id"))
            name = message.get("name") or names_by_id.get(call_id or "") or last_call_name
            if isinstance(content, list):
                _blocks(out, content, registry, names_by_id, role)
            else:
                body = as_text(content)
                m = re.fullmatch(r"\s*<result>(.*)</result>\s*", body, re.DOTALL)
                out.element("tool_result", m.group(1) if m else body,
                            attrs={"name": as_opt(name), "id": call_id},
                            tool_name=as_opt(name), tool_call_id=call_id)
        elif role == "action":
            body = as_text(content)
            m = _TOOL_CALL_TAG.search(body)
            name, tool_input, call_id = parse_tool_call_json(m.group(1) if m else body)
            out.element("tool_call", tool_input, attrs={"name": name, "id": call_id},
                        tool_name=name or "unknown", tool_type=registry.tool_type_for_name(name),
                        tool_input=tool_input, tool_call_id=call_id)
            last_call_name = name
        else:  # assistant, or an unknown role treated as the agent speaking
            if role not in ("assistant", ""):
                notes.append(f"message {index} has unknown role {role!r}, read as assistant")
            calls = _calls(message)
            if isinstance(content, list):
                last = _blocks(out, content, registry, names_by_id, "assistant",
                               final=index == answer_index and not calls)
                last_call_name = last or last_call_name
            else:
                text = as_text(content)
                if text.strip() in ("None", "null"):
                    text = ""
                if text.strip():
                    if looks_like_react(text) and not calls:
                        # With native calls, "Action:" prose only narrates them (ToolBench).
                        steps = parse_react_text(text.strip(), registry)
                        out.embed(text.strip(), steps)
                        acted = [s for s in steps if s.kind in ("tool_call", "answer")]
                        if acted:
                            finished = acted[-1].kind == "answer"
                            last_call_name = acted[-1].tool_name
                    elif _XML_HINT.search(text):
                        analysis = analyze_xml_response(text.strip(), registry)
                        steps = _demote_text_calls(analysis.steps, bool(calls))
                        out.embed(text.strip(), steps)
                        notes.extend(f"message {index}: {n}" for n in analysis.notes
                                     if not n.startswith("no tags"))
                        if len(steps) != len(analysis.steps) or steps != analysis.steps:
                            notes.append(f"message {index}: <tool_call> text kept as text "
                                         "(native call present, or no readable tool name)")
                    elif calls:
                        out.element("thought", text.strip())
                    elif index == answer_index:
                        out.element("answer", text.strip())
                    else:
                        out.text_block("text", text.strip())
            for call in calls:
                name = as_opt(call["name"])
                if name and name.lower() == "finish":
                    # ToolBench closes with a Finish call carrying the answer: it is the
                    # answer, not a tool whose result a clip would wait for.
                    out.element("answer", _finish_text(call["arguments"]), tool_name=name,
                                tool_input=call["arguments"])
                    finished = True
                    continue
                out.element("tool_call", call["arguments"],
                            attrs={"name": name, "id": call["id"]},
                            tool_name=name or "unknown",
                            tool_type=registry.tool_type_for_name(name),
                            tool_input=call["arguments"], tool_call_id=call["id"])
                if call["id"]:
                    names_by_id[call["id"]] = name or ""
                last_call_name = name
        message_steps.append(list(range(before, len(out.steps))))
    _number_turns(out.steps, message_steps)
    return RenderedChat(out.text(), out.steps, message_steps, notes)


def _number_turns(steps: list[Step], message_steps: list[list[int]]) -> None:
    """Give the calls of one assistant message one ``turn``: they were issued together
    (parallel tool calls) and have no order among themselves. A result inside the same
    message (calls written inline in its text, answered inline) closes the turn."""
    turn = 0
    for members in message_steps:
        open_turn = False
        for i in members:
            if steps[i].kind == "tool_call":
                steps[i] = steps[i].model_copy(update={"turn": turn})
                open_turn = True
            elif steps[i].kind == "tool_result" and open_turn:
                turn, open_turn = turn + 1, False
        if open_turn:
            turn += 1


def _demote_text_calls(steps: list[Step], has_native_calls: bool) -> list[Step]:
    """A ``<tool_call>`` written in a chat turn is a call only when it names a tool and the
    message has no native call: Search-R1 style prose attempts (``<tool_call>free
    text</tool_call>``, answered "No effective tool call detected") executed nothing, and
    next to a native call the tag only narrates it."""
    out = []
    for s in steps:
        if s.kind == "tool_call" and (has_native_calls or s.tool_name == "unknown"):
            s = s.model_copy(update={"kind": "text", "tool_name": None, "tool_type": None,
                                     "tool_input": None, "tool_call_id": None})
        out.append(s)
    return out


def _answer_message(messages: list[Any]) -> int | None:
    """Index of the closing assistant message: text, no tool call, nothing called after."""
    for index in range(len(messages) - 1, -1, -1):
        m = messages[index]
        if not isinstance(m, dict):
            continue
        role = _role(m)
        if role in ("tool", "function", "action"):
            return None
        if role == "assistant" or role == "":
            if _calls(m):
                return None
            content = _content(m)
            if isinstance(content, list):
                if any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content):
                    return None
                return index
            if as_text(content).strip() not in ("", "None", "null"):
                return index
    return None


def _blocks(out: Transcript, blocks: list[Any], registry: ToolRegistry,
            names_by_id: dict[str, str], role: str, final: bool = False) -> str | None:
    """Anthropic/OpenAI content blocks; returns the last tool name called, if any."""
    last_name: str | None = None
    has_tool_use = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks)
    for b in blocks:
        if not isinstance(b, dict):
            out.text_block("text", as_text(b))
            continue
        kind = b.get("type")
        if kind in ("text", "input_text", "output_text"):
            text = as_text(b.get("text"))
            if not text.strip():
                continue
            if role == "user":
                out.element("user", text)
            elif has_tool_use:
                out.element("thought", text.strip())
            elif final:
                out.element("answer", text.strip())
            else:
                out.text_block("text", text.strip())
        elif kind in ("thinking", "redacted_thinking"):
            out.element("thought", as_text(b.get("thinking", b.get("data"))).strip())
        elif kind == "tool_use":
            name = as_opt(b.get("name"))
            args = _arguments_text(b.get("input", {}))
            call_id = as_opt(b.get("id"))
            out.element("tool_call", args, attrs={"name": name, "id": call_id},
                        tool_name=name or "unknown", tool_type=registry.tool_type_for_name(name),
                        tool_input=args, tool_call_id=call_id)
            if call_id:
                names_by_id[call_id] = name or ""
            last_name = name
        elif kind == "tool_result":
            call_id = as_opt(b.get("tool_use_id"))
            name = names_by_id.get(call_id or "")
            inner = b.get("content")
            if isinstance(inner, list):
                inner = "\n".join(as_text(x.get("text")) if isinstance(x, dict) else as_text(x)
                                  for x in inner)
            out.element("tool_result", as_text(inner), attrs={"name": name or None,
                                                              "id": call_id},
                        tool_name=name or None, tool_call_id=call_id)
        else:
            out.text_block("text", as_text(b))
    return last_name
