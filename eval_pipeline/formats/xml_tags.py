"""The original tool's format: JSONL records whose ``raw_response`` holds XML-ish tags.

``<think>`` reasoning, a tool tag from the registry (``<microsandbox>``, ``<deepsearch>`` ...)
wrapping an action tag, the self-closing ``<execute_tools />`` trigger, ``<result>`` with the
tool output and ``<answer>``; the newer dialect writes ``<tool_call>{"name", "arguments"}
</tool_call>`` instead of a tool tag. Real logs leave ``<answer>`` unclosed, nest oddly,
echo a parameter schema in a ``<result>`` after a ``<tool_param>`` lookup and run to 300 kB,
so the text is scanned once for tags and each opening tag is paired with the closing tag of
its name by a stack per name: no XML parser that would reject the text, and no backtracking
regex that goes quadratic on a large record full of unclosed tags. A well-formed response
(whole elements and plain text between them, most real ones) is read by one regex match
per element instead, which the scan would read the same way (``test_well_formed.py``).
Records become table rows directly (``parse_rows``), without a model per record or step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord
from eval_pipeline.formats.records import (
    JsonRecordsParser,
    RecordError,
    as_bool,
    as_float,
    as_str,
    finish_row,
)
from eval_pipeline.models import (
    GENERIC_TOOL_TYPE,
    ParseResult,
    ReparseRule,
    Step,
    Trajectory,
    steps_from_rows,
)
from eval_pipeline.tagscan import kernel
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


StepRow = dict[str, Any]
"""A step as the ``steps`` column holds it: the :class:`Step` fields, in their order."""


@dataclass
class XmlAnalysis:
    steps: list[Step]
    notes: list[str] = field(default_factory=list)


_NO_CALL: dict[str, Any] = dict.fromkeys(
    ("tool_name", "tool_type", "tool_input", "tool_call_id", "turn", "label"))


def _step(kind: str, content: str, start: int, end: int, *, tool_name: str | None = None,
          tool_type: str | None = None, tool_input: str | None = None,
          tool_call_id: str | None = None) -> StepRow:
    return {"kind": kind, "content": content, "start": start, "end": end,
            "tool_name": tool_name, "tool_type": tool_type, "tool_input": tool_input,
            "tool_call_id": tool_call_id, "turn": None, "label": None}


def _scan(text: str) -> tuple[list[int], list[int], list[str], list[int], list[int],
                              list[int]]:
    """The opening tags (self-closing ones left out) as parallel lists: start, end,
    lower-cased name, the start and end of the closing tag paired with it (-1: unclosed)
    and the start of the next opening tag of the same name (-1: none).

    Each tag name has its own stack; a close pops the latest open of its name, so
    ``<think>a<think>b</think>c</think>`` pairs outermost-with-outermost, stray closes are
    ignored and an open left on a stack is unclosed. Linear, whatever the nesting depth.
    One regex finds opens and closes in text order (neither kind of tag holds a ``<``, so
    no match hides another). Parallel lists of ints, not a tuple per tag and dicts keyed
    by position: the scan runs over every tag of every record (#12.1). The C kernel's
    ``tag_scan`` gives the same lists in one pass (``test_tag_scan.py``), where it is
    built and on.
    """
    compiled = kernel()
    if compiled is not None:
        return compiled.tag_scan(text)
    return _scan_python(text)


def _scan_python(text: str) -> tuple[list[int], list[int], list[str], list[int], list[int],
                                     list[int]]:
    """:func:`_scan` with the regex: the reference the C kernel is held to."""
    starts: list[int] = []
    ends: list[int] = []
    tags: list[str] = []
    close_starts: list[int] = []
    close_ends: list[int] = []
    next_same: list[int] = []
    stacks: dict[str, list[int]] = {}
    last: dict[str, int] = {}
    for m in _TAG.finditer(text):
        closing, opening = m.groups()
        if closing is not None:
            stack = stacks.get(closing.lower())
            if stack:
                i = stack.pop()
                close_starts[i], close_ends[i] = m.span()
            continue
        start, end = m.span()
        if text[end - 2] == "/":  # self-closing: <execute_tools />
            continue
        tag = opening.lower()
        i = len(starts)
        starts.append(start)
        ends.append(end)
        tags.append(tag)
        close_starts.append(-1)
        close_ends.append(-1)
        next_same.append(-1)
        previous = last.get(tag)
        if previous is not None:
            next_same[previous] = start
        last[tag] = i
        stack = stacks.get(tag)
        if stack is None:
            stacks[tag] = [i]
        else:
            stack.append(i)
    return starts, ends, tags, close_starts, close_ends, next_same


def analyze_xml_rows(text: str, registry: ToolRegistry, *, well_formed: bool = True
                     ) -> tuple[list[StepRow], list[str]]:
    """Cut a raw_response into step rows (the ``steps`` column's dicts) with offsets,
    noting every repair made.

    The parser's hot path: rows are built as plain dicts, the values :class:`Step` would
    validate and dump (no model per step; validating and dumping them was a third of
    parsing, #12.1). :func:`analyze_xml_response` wraps the same rows in Step models.
    A well-formed response (most of them) is read element by element
    (:func:`_read_well_formed`); any other goes through the tag scan (:func:`_read_tags`),
    which reads a well-formed one the same way (``test_well_formed.py``): a caller that
    knows the response is unlikely to be well formed (the Arrow reading left it to Python)
    passes ``well_formed=False`` to go to the scan without trying.
    """
    found = _read_well_formed(text, registry) if well_formed else None
    return found if found is not None else _read_tags(text, registry)


@lru_cache(maxsize=16)
def _element_pattern(tool_tags: tuple[str, ...]) -> re.Pattern[str]:
    """One whole step element: ``<name>body</name>`` for the control and tool tags, whose
    body holds no tag of its own name (``</?name`` in any case, followed by no name
    character: more than the scan counts as one, never less), or an ``<answer>`` with no
    tag at all in its body, closed or running to the end of the text. Bare lower-case
    tags only: attributes, other spellings and other closers are left to the scan."""
    names = sorted({"think", "result", "tool_param", "tool_call", *tool_tags},
                   key=lambda n: (-len(n), n))
    alternation = "|".join(re.escape(n) for n in names)
    own_free = r"(?:[^<]++|<(?!/?(?i:\1)(?![\w.-])))*+"
    tag_free = r"(?:[^<]++|<(?![A-Za-z_/]))*+"
    return re.compile(rf"<({alternation})>({own_free})</\1>"
                      rf"|<answer>({tag_free})(</answer>|\Z)")


# A tag the scan would pair (an opening or closing one, not self-closing like
# <execute_tools />).
_PAIRED_TAG = re.compile(r"<(?:/[A-Za-z_][\w.-]*\s*|[A-Za-z_][\w.-]*(?:\s[^<>]*)?(?<!/))>")


def _read_well_formed(text: str, registry: ToolRegistry
                      ) -> tuple[list[StepRow], list[str]] | None:
    """:func:`_read_tags`'s reading of a response made of whole elements and text with no
    tags between them (self-closing ones aside), or None for any other response.

    Why it reads the same: outside the elements there is no tag to pair, and inside an
    element no tag of its name, so the scan pairs each element's opening with its own
    closer, whatever tags its body holds (the scan's cursor skips them, and a closer pops
    the latest opening of its name, never one from an earlier body); an ``<answer>`` with
    no tag in its body has no structural tag before its end to stop at, and one running
    to the end of the text is read to the end, as the scan reads it. The text between
    elements becomes text steps as the scan makes them. One regex match per element
    instead of a scan step per tag and a stack per name: a third of the parse (#12.1;
    ``test_well_formed.py`` holds it to :func:`_read_tags`).
    """
    rows: list[StepRow] = []
    notes: list[str] = []
    cursor = 0
    after_tool_param = False
    paired_tag = _PAIRED_TAG.search
    for m in _element_pattern(tuple(registry.tool_tags)).finditer(text):
        start, end = m.span()
        if start > cursor:
            if paired_tag(text, cursor, start):
                return None
            piece = text[cursor:start].strip()
            if piece:
                rows.append({"kind": "text", "content": piece, "start": cursor,
                             "end": start, **_NO_CALL})
        cursor = end
        tag = m[1]
        if tag is None:
            if not m[4]:
                notes.append("unclosed <answer> read to the end of the response")
            rows.append({"kind": "answer", "content": m[3].strip(), "start": start,
                         "end": end, **_NO_CALL})
        elif tag == "think":
            rows.append({"kind": "thought", "content": m[2].strip(), "start": start,
                         "end": end, **_NO_CALL})
        elif tag == "result":
            if after_tool_param:
                rows.append(_step("text", m[2].strip(), start, end, tool_name="tool_param"))
            else:
                rows.append({"kind": "tool_result", "content": m[2].strip(), "start": start,
                             "end": end, **_NO_CALL})
        elif tag == "tool_param":
            rows.append(_step("text", text[start:end], start, end, tool_name="tool_param"))
            after_tool_param = True
            continue
        elif tag == "tool_call":
            name, tool_input, call_id = parse_tool_call_json(m[2])
            if name is None:
                notes.append(f"<tool_call> at char {start} has no readable name")
            rows.append(_step("tool_call", text[start:end], start, end,
                              tool_name=name or "unknown",
                              tool_type=registry.tool_type_for_name(name),
                              tool_input=tool_input, tool_call_id=call_id))
        else:
            action, tool_input = split_action(m[2])
            tool_type = registry.tool_type_for_tag(tag)
            if tool_type == GENERIC_TOOL_TYPE:
                tool_type = registry.tool_type_for_name(action or tag)
            rows.append(_step("tool_call", text[start:end], start, end,
                              tool_name=action or tag, tool_type=tool_type,
                              tool_input=tool_input))
        after_tool_param = False
    if len(text) > cursor:
        if paired_tag(text, cursor):
            return None
        piece = text[cursor:].strip()
        if piece:
            rows.append({"kind": "text", "content": piece, "start": cursor,
                         "end": len(text), **_NO_CALL})
    if all(r["kind"] == "text" for r in rows):
        notes.append("no tags: the whole response is one text step")
    return rows, notes


def _read_tags(text: str, registry: ToolRegistry) -> tuple[list[StepRow], list[str]]:
    """Any response: every tag scanned and paired (:func:`_scan`), then read in order."""
    tool_tags = registry.tool_tag_set
    rows: list[StepRow] = []
    notes: list[str] = []
    cursor = 0
    after_tool_param = False
    starts, ends, tags, close_starts, close_ends, next_same = _scan(text)
    count = len(starts)
    for i in range(count):
        m_start = starts[i]
        if m_start < cursor:
            continue
        tag = tags[i]
        close_start = close_starts[i]
        # An unregistered server tag is still a tool call when a trigger or a result
        # follows it; it is scored with the generic rubric and reported, not dropped.
        if tag not in _CONTROL_TAGS and tag not in tool_tags and (
                close_start < 0 or not _TRIGGER.match(text, close_ends[i])):
            continue
        close_end = close_ends[i]
        m_end = ends[i]
        same = next_same[i]
        # An unclosed tag ends where the next one of its name starts. An <answer> (often
        # left open: generation stopped on it) also ends at the next structural tag, so
        # the steps the agent took after it are not swallowed.
        limit = -1
        if tag == "answer":
            for j in range(i + 1, count):
                if tags[j] in _CONTROL_TAGS or tags[j] in tool_tags:
                    limit = starts[j]
                    break
        elif close_start < 0:
            limit = same
        if limit >= 0 and (close_start < 0 or limit < close_start):
            close_start = close_end = m_start + len(text[m_start:limit].rstrip())
            notes.append(f"unclosed <{tag}> at char {m_start} ended at the next tag")
        elif close_start >= 0 and 0 <= same < close_start:
            notes.append(f"nested <{tag}> at char {m_start} kept inside the outer one")
        if close_start < 0:
            if tag == "answer":
                close_start = close_end = len(text)
                notes.append("unclosed <answer> read to the end of the response")
            else:
                notes.append(f"unclosed <{tag}> at char {m_start} kept as text")
                continue
        if m_start > cursor:
            piece = text[cursor:m_start].strip()
            if piece:
                rows.append({"kind": "text", "content": piece, "start": cursor,
                             "end": m_start, **_NO_CALL})
        body = text[m_end:close_start]
        cursor = close_end
        if tag == "think":
            rows.append({"kind": "thought", "content": body.strip(), "start": m_start,
                         "end": close_end, **_NO_CALL})
        elif tag == "answer":
            rows.append({"kind": "answer", "content": body.strip(), "start": m_start,
                         "end": close_end, **_NO_CALL})
        elif tag == "result":
            if after_tool_param:
                # The schema echo of a <tool_param> lookup; the real result follows the call.
                rows.append(_step("text", body.strip(), m_start, close_end,
                                  tool_name="tool_param"))
            else:
                rows.append({"kind": "tool_result", "content": body.strip(),
                             "start": m_start, "end": close_end, **_NO_CALL})
        elif tag == "tool_param":
            # A parameter-schema lookup, not a tool call: the original tool does not count it.
            rows.append(_step("text", text[m_start:close_end], m_start, close_end,
                              tool_name="tool_param"))
            after_tool_param = True
            continue
        elif tag == "tool_call":
            name, tool_input, call_id = parse_tool_call_json(body)
            if name is None:
                notes.append(f"<tool_call> at char {m_start} has no readable name")
            rows.append(_step("tool_call", text[m_start:close_end], m_start, close_end,
                              tool_name=name or "unknown",
                              tool_type=registry.tool_type_for_name(name),
                              tool_input=tool_input, tool_call_id=call_id))
        else:
            action, tool_input = split_action(body)
            tool_type = registry.tool_type_for_tag(tag)
            if tool_type == GENERIC_TOOL_TYPE:
                tool_type = registry.tool_type_for_name(action or tag)
            rows.append(_step("tool_call", text[m_start:close_end], m_start, close_end,
                              tool_name=action or tag, tool_type=tool_type,
                              tool_input=tool_input))
        after_tool_param = False
    if len(text) > cursor:
        piece = text[cursor:].strip()
        if piece:
            rows.append({"kind": "text", "content": piece, "start": cursor,
                         "end": len(text), **_NO_CALL})
    if all(r["kind"] == "text" for r in rows):
        notes.append("no tags: the whole response is one text step")
    return rows, notes


def analyze_xml_response(text: str, registry: ToolRegistry) -> XmlAnalysis:
    """Cut a raw_response into canonical steps with offsets, noting every repair made."""
    rows, notes = analyze_xml_rows(text, registry)
    return XmlAnalysis(steps_from_rows(rows), notes)


_ANSWER_CLOSED_AT_END = "closed <answer> at end of response"
_ANSWER_CLOSER = "</answer>"


def reanalyze_repaired(text: str, steps: Sequence[StepRow], repaired: str, fixes: list[str],
                       registry: ToolRegistry) -> list[StepRow]:
    """The step rows of ``repaired``, the tag repair of ``text`` whose rows are ``steps``.

    Most repairs only close the ``<answer>`` generation stopped in (four records in five of
    the corpora drop). The text's steps then already end with that answer, read to the end
    of the text; the repaired text reads the same, and only the answer's end moves past
    the added ``</answer>``: the repair adds no tag that an earlier step pairs with (an
    ``<answer>`` closed at the end is the last tag the repair knows, with no closer after
    it), and a closer adds nothing to the text before it. Any other repair is read again
    (``test_reanalysis.py`` holds the shortcut to the full reading on the corpora and on
    generated records).
    """
    if (fixes == [_ANSWER_CLOSED_AT_END] and steps
            and len(repaired) == len(text) + len(_ANSWER_CLOSER)
            and repaired.endswith(_ANSWER_CLOSER) and repaired.startswith(text)):
        last = steps[-1]
        if last["kind"] == "answer" and last["end"] == len(text):
            return [*steps[:-1], {**last, "end": len(repaired)}]
    return analyze_xml_rows(repaired, registry)[0]


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

    def fields(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
               analysis: tuple[Any, list[str]] | None = None) -> dict[str, Any]:
        """The trajectory's fields from one record, its steps as rows; ``analysis``: the
        steps and notes already read from its response (``xml_arrow``), else read here."""
        extra = {k: v for k, v in value.items() if k not in self.known_fields}
        raw = value.get("raw_response")
        if raw is None and isinstance(value.get("full_response_with_evaluation"), str):
            raw, blocks = strip_clip_evaluations(value["full_response_with_evaluation"])
            extra["clip_evaluations"] = blocks
        if not isinstance(raw, str):
            reason = "missing_field" if raw is None else "wrong_type"
            raise RecordError(reason, f"raw_response must be a string, got {type(raw).__name__}")
        steps, notes = analysis if analysis is not None else analyze_xml_rows(
            raw, ctx.registry)
        if notes:
            extra["tag_notes"] = notes
        if "success" not in value:
            extra["success_missing"] = True
        task_id = value.get("task_id")
        return {
            "task_id": as_str(task_id) if task_id is not None else f"line{rec.line}",
            "task_description": as_str(value.get("task_description")) or "",
            "raw_response": raw,
            "steps": steps,
            "success": as_bool(value.get("success")),
            "final_result": as_str(value.get("final_result")),
            "duration": as_float(value.get("duration")),
            "timestamp": as_str(value.get("timestamp")),
            "extra": extra,
        }

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        return self.trajectory(rec, ctx, index, **self.fields(value, rec, ctx))

    def build_row(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
                  index: int, analysis: tuple[Any, list[str]] | None = None
                  ) -> dict[str, Any]:
        return self.row(rec, ctx, index, **self.fields(value, rec, ctx, analysis))

    def parse_rows(self, path: Path, ctx: ParseContext) -> ParseResult:
        """Every record straight to its table row: the same values as building and dumping
        a Trajectory (``test_stage_digests``), at a fraction of the cost (#12.1)."""
        result = ParseResult()
        first_by_task: dict[str, str] = {}
        for index, rec in enumerate(self.records(path)):
            row = self.attempt(self.build_row, rec, ctx, index, result.quarantined)
            if row is not None:
                finish_row(row, rec.repairs, first_by_task)
                result.rows.append(row)
        return result
