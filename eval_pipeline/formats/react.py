"""ReAct text: the LlamaIndex style and the numbered paper style, as steps with offsets.

```
Thought: I need the weather.                      Thought 1: I need to search X.
Action: get_weather                               Action 1: Search[X]
Action Input: {"city": "Paris"}                   Observation 1: X is ...
Observation: 18C and sunny                        Action 2: Finish[answer]
Final Answer: It is 18C.
```

A ReAct log is already one readable text, so nothing is rendered: steps point straight into
it. ``Action`` and its ``Action Input`` become one tool call; ``Finish[...]`` (and
``Final Answer:``) is the answer; the observation after a ``Finish`` is the environment's
verdict, kept as text so it never closes a tool clip. The log files of the paper style
(Reflexion) hold many runs in ``BEGIN CORRECT/INCORRECT/HALTED AGENTS`` sections; each
``Question:`` entry is one trajectory and its section is its outcome label.
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path
from typing import ClassVar

from eval_pipeline.formats.base import ParseContext, trajectory_id
from eval_pipeline.formats.records import finish
from eval_pipeline.models import ParseResult, Step, StepKind, Trajectory
from eval_pipeline.tool_registry import ToolRegistry

FORMAT_NAME = "react_text"

_LABEL = re.compile(
    r"^[ \t]*(?P<label>Thought|Action Input|Action|Observation|Final Answer|Answer|Question"
    r"|Correct answer|Reflections)"
    r"(?:[ \t]+(?P<num>\d+))?[ \t]*:[ \t]*",
    re.MULTILINE | re.IGNORECASE,
)
_BRACKET_ACTION = re.compile(r"^\s*(?P<name>[A-Za-z_][\w.-]*)\s*\[(?P<arg>.*)\]\s*$", re.DOTALL)
_SECTION = re.compile(r"^-+\s*BEGIN\s+(?P<outcome>[A-Z]+)\s+AGENTS\s*-+\s*$", re.MULTILINE)
_QUESTION = re.compile(r"^Question:", re.MULTILINE)
_FINISH = {"finish", "final_answer", "finalanswer"}
_KINDS: dict[str, StepKind] = {
    "thought": "thought", "observation": "tool_result", "final answer": "answer",
    "answer": "answer", "question": "user", "correct answer": "text", "reflections": "text",
}


def looks_like_react(text: str) -> bool:
    """At least one Thought/Action line: worth parsing as ReAct rather than plain text."""
    return bool(re.search(r"^[ \t]*(?:Thought|Action)(?:[ \t]+\d+)?[ \t]*:", text,
                          re.MULTILINE | re.IGNORECASE))


def parse_action(body: str) -> tuple[str, str]:
    """``Search[Jonny Craig]`` -> ("Search", "Jonny Craig"); ``get_weather`` -> itself."""
    match = _BRACKET_ACTION.match(body)
    if match:
        return match.group("name"), match.group("arg").strip()
    first, _, rest = body.strip().partition("\n")
    return first.strip(), rest.strip()


def parse_react_text(text: str, registry: ToolRegistry) -> list[Step]:
    """Steps of a ReAct transcript; offsets are into ``text``."""
    marks = list(_LABEL.finditer(text))
    steps: list[Step] = []
    if not marks:
        if text.strip():
            steps.append(Step(kind="text", content=text.strip(), start=0, end=len(text)))
        return steps
    lead = text[: marks[0].start()]
    if lead.strip():
        steps.append(Step(kind="text", content=lead.strip(), start=0, end=len(lead.rstrip())))
    last_action_finished = False
    i = 0
    while i < len(marks):
        m = marks[i]
        label = m.group("label").lower()
        seg_end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end():seg_end]
        end = m.start() + len(text[m.start():seg_end].rstrip())
        if label == "action":
            name, arg = parse_action(body)
            if (i + 1 < len(marks) and marks[i + 1].group("label").lower() == "action input"):
                i += 1
                nxt = marks[i]
                nxt_end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
                arg = text[nxt.end():nxt_end].strip()
                end = nxt.start() + len(text[nxt.start():nxt_end].rstrip())
            if name.lower() in _FINISH:
                steps.append(Step(kind="answer", content=arg, start=m.start(), end=end,
                                  tool_name=name))
                last_action_finished = True
            else:
                steps.append(Step(
                    kind="tool_call", content=text[m.start():end], start=m.start(), end=end,
                    tool_name=name, tool_type=registry.tool_type_for_name(name),
                    tool_input=arg,
                ))
                last_action_finished = False
        elif label == "action input":
            # An input with no action line before it: keep it, do not invent a tool.
            steps.append(Step(kind="text", content=body.strip(), start=m.start(), end=end))
        else:
            kind = _KINDS[label]
            if kind == "tool_result" and last_action_finished:
                kind = "text"
            steps.append(Step(kind=kind, content=body.strip(), start=m.start(), end=end))
        i += 1
    return steps


def _entries(text: str) -> list[tuple[int, int, str | None]]:
    """(start, end, section outcome) of each ``Question:`` entry of a Reflexion log."""
    sections = [(m.end(), m.group("outcome")) for m in _SECTION.finditer(text)]
    starts = [m.start() for m in _QUESTION.finditer(text)]
    boundaries = sorted(starts + [m.start() for m in _SECTION.finditer(text)])
    entries = []
    for start in starts:
        j = bisect.bisect_right(boundaries, start)
        end = boundaries[j] if j < len(boundaries) else len(text)
        outcome = None
        for sec_start, name in sections:
            if sec_start <= start:
                outcome = name
        entries.append((start, end, outcome))
    return entries


class ReactTextParser:
    """A ``.txt``/``.log`` ReAct transcript: one trajectory per ``Question:`` entry, or the
    whole file as one trajectory when it has no entries."""

    name: ClassVar[str] = FORMAT_NAME

    def sniff(self, path: Path, head: str) -> float:
        if head.lstrip().startswith(("{", "[")):
            return 0.0
        if _SECTION.search(head) or (_QUESTION.search(head) and looks_like_react(head)):
            return 0.95
        return 0.7 if looks_like_react(head) else 0.0

    def parse(self, path: Path, ctx: ParseContext) -> ParseResult:
        result = ParseResult()
        data = path.read_bytes()
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        if b"\x00" in data:
            result.quarantined.append(ctx.quarantine(
                1, "binary_data", "NUL bytes in a text log", data[:2000], self.name))
            return result
        repairs: tuple[str, ...] = ()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = data.decode("utf-8", "replace")
            repairs = (f"invalid_utf8_replaced: {exc.reason} at byte {exc.start}",)
        text = text.replace("\r\n", "\n")
        entries = _entries(text) or ([(0, len(text), None)] if text.strip() else [])
        if not entries:
            result.quarantined.append(ctx.quarantine(
                1, "empty_file", "no ReAct text in the file", text, self.name))
            return result
        first_by_task: dict[str, str] = {}
        for index, (start, end, outcome) in enumerate(entries):
            body = text[start:end].rstrip()
            line = text.count("\n", 0, start) + 1
            steps = parse_react_text(body, ctx.registry)
            if not steps:
                result.quarantined.append(ctx.quarantine(
                    line, "empty_record", "entry has no text", body, self.name))
                continue
            question = next((s.content for s in steps if s.kind == "user"), "")
            answer = next((s.content for s in reversed(steps) if s.kind == "answer"), None)
            extra: dict[str, object] = {}
            if outcome:
                extra["outcome"] = outcome
            correct = re.search(r"^Correct answer:\s*(.+)$", body, re.MULTILINE)
            if correct:
                extra["correct_answer"] = correct.group(1).strip()
            traj = Trajectory(
                trajectory_id=trajectory_id(ctx.source_file, index, body),
                batch=ctx.batch, source_file=ctx.source_file, source_line=line,
                source_format=self.name,
                task_id=f"{path.stem}:{line}",
                task_description=question,
                raw_response=body, steps=steps,
                success={"CORRECT": True, "INCORRECT": False, "HALTED": False}.get(
                    outcome or ""),
                final_label={"CORRECT": 1.0, "INCORRECT": -1.0, "HALTED": -1.0}.get(
                    outcome or ""),
                final_result=answer,
                extra=extra,
            )
            finish(traj, repairs, first_by_task)
            result.trajectories.append(traj)
        return result
