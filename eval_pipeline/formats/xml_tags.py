"""The original tool's format: JSONL records whose ``raw_response`` holds XML-ish tags.

``<think>`` reasoning, a tool tag from the registry (``<microsandbox>``, ``<deepsearch>`` ...)
wrapping an action tag, the self-closing ``<execute_tools />`` trigger, ``<result>`` with the
tool output and ``<answer>``; the newer dialect writes ``<tool_call>{"name", "arguments"}
</tool_call>`` instead of a tool tag. Real logs leave ``<answer>`` unclosed, nest oddly,
echo a parameter schema in a ``<result>`` after a ``<tool_param>`` lookup and run to 300 kB,
so the text is scanned once for tags and each opening tag is paired with its first closing
tag by binary search: no XML parser that would reject the text, and no backtracking regex
that goes quadratic on a large record full of unclosed tags.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord
from eval_pipeline.formats.records import (
    JsonRecordsParser,
    RecordError,
    as_bool,
    as_float,
    as_str,
)
from eval_pipeline.models import GENERIC_TOOL_TYPE, ReparseRule, Step, Trajectory
from eval_pipeline.tool_registry import ToolRegistry

FORMAT_NAME = "xml_tags"
REQUIRED_FIELDS = ("raw_response",)
_INNER_ACTION = re.compile(r"^\s*<([A-Za-z_][\w.-]*)(?:\s[^>]*)?>(.*?)</\1>\s*$", re.DOTALL)
# A closing tag (group 1) or an opening one (group 2, self-closing ones too).
_TAG = re.compile(r"<(?:/([A-Za-z_][\w.-]*)\s*|([A-Za-z_][\w.-]*)(?:\s[^<>]*)?)>")
_TRIGGER = re.compile(r"\s*<(?:execute_tools\s*/?>|result\b)", re.IGNORECASE)
_CLIP_EVALUATION = re.compile(r"\n?<clip_evaluation>.*?</clip_evaluation>\n?", re.DOTALL)
_CONTROL_TAGS = {"think", "result", "tool_param", "answer", "tool_call"}


def split_action(body: str) -> tuple[str | None, str]:
    """``<microsandbox_execute>code</microsandbox_execute>`` -> ("microsandbox_execute", "code")."""
    match = _INNER_ACTION.match(body)
    if match:
        return match.group(1), match.group(2).strip()
    return None, body.strip()


def parse_tool_call_json(body: str) -> tuple[str | None, str, str | None]:
    """The newer dialect's ``{"name": .., "arguments": ..}``: (name, input text, call id)."""
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        match = re.search(r'"name"\s*:\s*"([^"]+)"', body)
        return (match.group(1) if match else None), body.strip(), None
    if not isinstance(value, dict):
        return None, body.strip(), None
    name = value.get("name")
    args = value.get("arguments", value.get("parameters", value.get("args")))
    tool_input = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    call_id = value.get("id")
    return (str(name) if name is not None else None), tool_input, as_str(call_id)


@dataclass
class XmlAnalysis:
    steps: list[Step]
    notes: list[str] = field(default_factory=list)


def _scan_tags(text: str) -> tuple[list[tuple[int, int, str]], dict[int, tuple[int, int]]]:
    """The opening tags (start, end, lower-cased name; self-closing ones left out) and the
    pairs: opening-tag position -> (close start, close end), nesting-aware, in one pass.

    Each tag name has its own stack; a close pops the latest open of its name, so
    ``<think>a<think>b</think>c</think>`` pairs outermost-with-outermost, stray closes are
    ignored and an open left on a stack is unclosed. Linear, whatever the nesting depth.
    One regex finds opens and closes in text order (neither kind of tag holds a ``<``, so
    no match hides another), which spares sorting them (#12.1).
    """
    opens: list[tuple[int, int, str]] = []
    stacks: dict[str, list[int]] = {}
    pairs: dict[int, tuple[int, int]] = {}
    for m in _TAG.finditer(text):
        closing, opening = m.groups()
        if closing is not None:
            stack = stacks.get(closing.lower())
            if stack:
                pairs[stack.pop()] = m.span()
            continue
        if m.group(0).endswith("/>"):
            continue
        start, end = m.span()
        tag = opening.lower()
        opens.append((start, end, tag))
        if tag in stacks:
            stacks[tag].append(start)
        else:
            stacks[tag] = [start]
    return opens, pairs


def analyze_xml_response(text: str, registry: ToolRegistry) -> XmlAnalysis:
    """Cut a raw_response into canonical steps with offsets, noting every repair made."""
    tool_tags = registry.tool_tag_set
    steps: list[Step] = []
    notes: list[str] = []
    cursor = 0
    after_tool_param = False

    def gap(upto: int) -> None:
        piece = text[cursor:upto]
        if piece.strip():
            steps.append(Step(kind="text", content=piece.strip(), start=cursor, end=upto))

    opens, pairs = _scan_tags(text)
    structural = [start for start, _end, tag in opens
                  if tag in _CONTROL_TAGS or tag in tool_tags]
    same_tag: dict[str, list[int]] = {}
    for start, _end, tag in opens:
        if tag in same_tag:
            same_tag[tag].append(start)
        else:
            same_tag[tag] = [start]

    def next_open(positions: list[int], after: int) -> int | None:
        i = bisect.bisect_left(positions, after)
        return positions[i] if i < len(positions) else None

    for m_start, m_end, tag in opens:
        if m_start < cursor:
            continue
        close = pairs.get(m_start)
        # An unregistered server tag is still a tool call when a trigger or a result
        # follows it; it is scored with the generic rubric and reported, not dropped.
        unregistered = tag not in _CONTROL_TAGS and tag not in tool_tags
        if unregistered and (close is None or not _TRIGGER.match(text, close[1])):
            continue
        same = next_open(same_tag[tag], m_end)
        # An unclosed tag ends where the next one of its name starts. An <answer> (often
        # left open: generation stopped on it) also ends at the next structural tag, so
        # the steps the agent took after it are not swallowed.
        limit = next_open(structural, m_end) if tag == "answer" else (
            same if close is None else None)
        if limit is not None and (close is None or limit < close[0]):
            end_at = m_start + len(text[m_start:limit].rstrip())
            close = (end_at, end_at)
            notes.append(f"unclosed <{tag}> at char {m_start} ended at the next tag")
        elif close is not None and same is not None and same < close[0]:
            notes.append(f"nested <{tag}> at char {m_start} kept inside the outer one")
        if close is None:
            if tag == "answer":
                close = (len(text), len(text))
                notes.append("unclosed <answer> read to the end of the response")
            else:
                notes.append(f"unclosed <{tag}> at char {m_start} kept as text")
                continue
        start, end = m_start, close[1]
        body = text[m_end:close[0]]
        gap(start)
        cursor = end
        if tag == "think":
            steps.append(Step(kind="thought", content=body.strip(), start=start, end=end))
        elif tag == "answer":
            steps.append(Step(kind="answer", content=body.strip(), start=start, end=end))
        elif tag == "tool_param":
            # A parameter-schema lookup, not a tool call: the original tool does not count it.
            steps.append(Step(kind="text", content=text[start:end], start=start, end=end,
                              tool_name="tool_param"))
            after_tool_param = True
            continue
        elif tag == "result":
            if after_tool_param:
                # The schema echo of a <tool_param> lookup; the real result follows the call.
                steps.append(Step(kind="text", content=body.strip(), start=start, end=end,
                                  tool_name="tool_param"))
            else:
                steps.append(Step(kind="tool_result", content=body.strip(), start=start,
                                  end=end))
        elif tag == "tool_call":
            name, tool_input, call_id = parse_tool_call_json(body)
            if name is None:
                notes.append(f"<tool_call> at char {start} has no readable name")
            steps.append(Step(
                kind="tool_call", content=text[start:end], start=start, end=end,
                tool_name=name or "unknown", tool_type=registry.tool_type_for_name(name),
                tool_input=tool_input, tool_call_id=call_id,
            ))
        else:
            action, tool_input = split_action(body)
            tool_type = registry.tool_type_for_tag(tag)
            if tool_type == GENERIC_TOOL_TYPE:
                tool_type = registry.tool_type_for_name(action or tag)
            steps.append(Step(
                kind="tool_call", content=text[start:end], start=start, end=end,
                tool_name=action or tag, tool_type=tool_type, tool_input=tool_input,
            ))
        after_tool_param = False
    gap(len(text))
    if not any(s.kind != "text" for s in steps):
        notes.append("no tags: the whole response is one text step")
    return XmlAnalysis(steps, notes)


def parse_xml_response(text: str, registry: ToolRegistry) -> list[Step]:
    """Cut a raw_response into canonical steps with offsets; text between tags is kept too."""
    return analyze_xml_response(text, registry).steps


def strip_clip_evaluations(text: str) -> tuple[str, list[str]]:
    """Undo the evaluator's output: the response without its ``<clip_evaluation>`` blocks."""
    blocks = [m.group(0).strip() for m in _CLIP_EVALUATION.finditer(text)]
    return _CLIP_EVALUATION.sub("\n", text) if blocks else text, blocks


class XmlTagParser(JsonRecordsParser):
    """JSONL with ``task_id``, ``task_description``, ``raw_response`` and friends.

    Also reads the evaluator's own output (``full_response_with_evaluation``): the
    evaluation blocks are removed from the text and kept in ``extra``.
    """

    name: ClassVar[str] = FORMAT_NAME
    reparse: ClassVar[ReparseRule | None] = "xml_tags"
    known_fields: ClassVar[set[str]] = {
        "timestamp", "task_id", "task_description", "duration", "success", "final_result",
        "raw_response", "full_response_with_evaluation",
    }

    def sniff(self, path: Path, head: str) -> float:
        if '"raw_response"' in head or '"full_response_with_evaluation"' in head:
            return 0.9
        return 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        extra = {k: v for k, v in value.items() if k not in self.known_fields}
        raw = value.get("raw_response")
        if raw is None and isinstance(value.get("full_response_with_evaluation"), str):
            raw, blocks = strip_clip_evaluations(value["full_response_with_evaluation"])
            extra["clip_evaluations"] = blocks
        if not isinstance(raw, str):
            reason = "missing_field" if raw is None else "wrong_type"
            raise RecordError(reason, f"raw_response must be a string, got {type(raw).__name__}")
        analysis = analyze_xml_response(raw, ctx.registry)
        if analysis.notes:
            extra["tag_notes"] = analysis.notes
        if "success" not in value:
            extra["success_missing"] = True
        task_id = value.get("task_id")
        return self.trajectory(
            rec, ctx, index,
            task_id=as_str(task_id) if task_id is not None else f"line{rec.line}",
            task_description=as_str(value.get("task_description")) or "",
            raw_response=raw,
            steps=analysis.steps,
            success=as_bool(value.get("success")),
            final_result=as_str(value.get("final_result")),
            duration=as_float(value.get("duration")),
            timestamp=as_str(value.get("timestamp")),
            extra=extra,
        )
