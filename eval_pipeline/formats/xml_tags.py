"""The original tool's format: JSONL records whose ``raw_response`` holds XML-ish tags.

``<think>`` reasoning, a tool tag from the registry (``<microsandbox>``, ``<deepsearch>`` ...)
wrapping an action tag, ``<result>`` with the tool output and ``<answer>``. Real logs leave
``<answer>`` unclosed and nest oddly, so spans are found with tolerant regexes and overlaps
resolved by position rather than by an XML parser that would reject the text.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, iter_jsonl, trajectory_id
from eval_pipeline.models import ParseResult, Step, Trajectory
from eval_pipeline.tool_registry import ToolRegistry

FORMAT_NAME = "xml_tags"
REQUIRED_FIELDS = ("raw_response",)
_INNER_ACTION = re.compile(r"^\s*<([A-Za-z_][\w.-]*)(?:\s[^>]*)?>(.*?)</\1>\s*$", re.DOTALL)


@lru_cache(maxsize=32)
def _span_pattern(tool_tags: tuple[str, ...]) -> re.Pattern[str]:
    tools = "|".join(re.escape(t) for t in tool_tags) or "(?!x)x"
    return re.compile(
        r"<(?P<tag>think|result|tool_param|" + tools + r")(?:\s[^>]*)?>(?P<body>.*?)</(?P=tag)>"
        r"|<answer(?:\s[^>]*)?>(?P<answer>.*?)(?:</answer>|$)",
        re.DOTALL | re.IGNORECASE,
    )


def split_action(body: str) -> tuple[str | None, str]:
    """``<microsandbox_execute>code</microsandbox_execute>`` -> ("microsandbox_execute", "code")."""
    match = _INNER_ACTION.match(body)
    if match:
        return match.group(1), match.group(2).strip()
    return None, body.strip()


def parse_xml_response(text: str, registry: ToolRegistry) -> list[Step]:
    """Cut a raw_response into canonical steps with offsets; text between tags is kept too."""
    pattern = _span_pattern(tuple(registry.tool_tags))
    steps: list[Step] = []
    cursor = 0
    for match in pattern.finditer(text):
        start, end = match.span()
        gap = text[cursor:start]
        if gap.strip():
            steps.append(Step(kind="text", content=gap.strip(), start=cursor, end=start))
        cursor = end
        if match.group("answer") is not None:
            steps.append(
                Step(kind="answer", content=match.group("answer").strip(), start=start, end=end)
            )
            continue
        tag = match.group("tag").lower()
        body = match.group("body")
        if tag == "think":
            steps.append(Step(kind="thought", content=body.strip(), start=start, end=end))
        elif tag == "result":
            steps.append(Step(kind="tool_result", content=body.strip(), start=start, end=end))
        elif tag == "tool_param":
            # A parameter-schema lookup, not a tool call: the original tool does not count it.
            steps.append(Step(kind="text", content=match.group(0), start=start, end=end))
        else:
            action, tool_input = split_action(body)
            steps.append(
                Step(
                    kind="tool_call",
                    content=match.group(0),
                    start=start,
                    end=end,
                    tool_name=action or tag,
                    tool_type=registry.tool_type_for_tag(tag),
                    tool_input=tool_input,
                )
            )
    tail = text[cursor:]
    if tail.strip():
        steps.append(Step(kind="text", content=tail.strip(), start=cursor, end=len(text)))
    return steps


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
        return value.strip().lower() == "true"
    if isinstance(value, int | float):
        return bool(value)
    return None


def _as_float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class XmlTagParser:
    """JSONL with ``task_id``, ``task_description``, ``raw_response`` and friends."""

    name: ClassVar[str] = FORMAT_NAME
    known_fields: ClassVar[set[str]] = {
        "timestamp", "task_id", "task_description", "duration", "success", "final_result",
        "raw_response",
    }

    def sniff(self, path: Path, head: str) -> float:
        if '"raw_response"' in head:
            return 0.9
        return 0.0

    def parse(self, path: Path, ctx: ParseContext) -> ParseResult:
        result = ParseResult()
        for index, rec in enumerate(iter_jsonl(path)):
            if rec.error:
                result.quarantined.append(
                    ctx.quarantine(rec.line, rec.reason or "unreadable", rec.error, rec.text,
                                   self.name)
                )
                continue
            value: dict[str, Any] = rec.value
            raw = value.get("raw_response")
            if not isinstance(raw, str):
                reason = "missing_field" if raw is None else "wrong_type"
                result.quarantined.append(
                    ctx.quarantine(rec.line, reason,
                                   f"raw_response must be a string, got {type(raw).__name__}",
                                   rec.text, self.name)
                )
                continue
            task_id = value.get("task_id")
            result.trajectories.append(
                Trajectory(
                    trajectory_id=trajectory_id(ctx.source_file, index, rec.text),
                    batch=ctx.batch,
                    source_file=ctx.source_file,
                    source_line=rec.line,
                    source_format=self.name,
                    task_id=str(task_id) if task_id is not None else f"line{rec.line}",
                    task_description=str(value.get("task_description") or ""),
                    raw_response=raw,
                    steps=parse_xml_response(raw, ctx.registry),
                    success=_as_bool(value.get("success")),
                    final_result=(None if value.get("final_result") is None
                                  else str(value.get("final_result"))),
                    duration=_as_float(value.get("duration")),
                    timestamp=(None if value.get("timestamp") is None
                               else str(value.get("timestamp"))),
                    extra={k: v for k, v in value.items() if k not in self.known_fields},
                )
            )
        return result
