"""Render structured trajectories (chat messages, spans, trees) into one text with offsets.

Clips, tag repair and the ``<clip_evaluation>`` output all work on character offsets into
``raw_response``, so every non-text format is rendered into a single readable transcript
and each step records where it landed. One rendering is used by every such format:

```
<system>
...system prompt...
</system>
<user>
...user turn...
</user>
<think>assistant text that accompanies tool calls</think>
<tool_call name="search" id="call_1">{"query": "..."}</tool_call>
<result name="search" id="call_1">...tool output...</result>
assistant text addressed to the user (a ``text`` step)
<answer>the closing assistant message</answer>
```

The tags mirror the original tool's newer dialect (``<think>``, ``<tool_call>``,
``<result>``, ``<answer>``) so a rendered transcript reads like a native one. A step's
``content`` is the inner text (for a tool call: the whole element, as in the XML format);
``raw_response[start:end]`` is always the whole element.
"""

from __future__ import annotations

import json
from typing import Any

from eval_pipeline.models import Step, StepKind

_TAGS: dict[str, str] = {
    "system": "system",
    "user": "user",
    "thought": "think",
    "tool_call": "tool_call",
    "tool_result": "result",
    "answer": "answer",
}


def _attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("\n", " ")


def as_text(value: Any) -> str:
    """Message content as text: strings as they are, anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class Transcript:
    """Accumulates rendered text and the steps located in it."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._pos = 0
        self.steps: list[Step] = []

    @property
    def position(self) -> int:
        return self._pos

    def raw(self, text: str) -> None:
        """Text that belongs to no step (separators)."""
        self._parts.append(text)
        self._pos += len(text)

    def text_block(self, kind: StepKind, text: str, **fields: Any) -> Step:
        """A step rendered verbatim (no tags): free assistant text, ReAct lines."""
        start = self._pos
        self.raw(text)
        step = Step(kind=kind, content=text.strip(), start=start, end=self._pos, **fields)
        self.steps.append(step)
        self.raw("\n")
        return step

    def element(
        self, kind: StepKind, body: str, *, attrs: dict[str, str | None] | None = None,
        **fields: Any,
    ) -> Step:
        """A step rendered as ``<tag attrs>body</tag>`` followed by a newline."""
        tag = _TAGS[kind]
        attr_text = "".join(
            f' {k}="{_attr(v)}"' for k, v in (attrs or {}).items() if v is not None
        )
        block_body = f"\n{body}\n" if kind in ("system", "user") else body
        element = f"<{tag}{attr_text}>{block_body}</{tag}>"
        start = self._pos
        self.raw(element)
        content = element if kind == "tool_call" else body.strip()
        step = Step(kind=kind, content=content, start=start, end=self._pos, **fields)
        self.steps.append(step)
        self.raw("\n")
        return step

    def embed(self, text: str, steps: list[Step]) -> None:
        """Append ``text`` whose steps were computed relative to its own start."""
        base = self._pos
        self.raw(text)
        for s in steps:
            self.steps.append(s.model_copy(update={"start": s.start + base, "end": s.end + base}))
        self.raw("\n")

    def text(self) -> str:
        return "".join(self._parts)
