"""Clip segmentation as the original tool does it, on canonical steps.

A clip runs from the end of the previous clip to the end of a tool call's ``<result>``
(or of the call itself when no result follows before the next call); whatever remains
after the last tool clip is the ``final`` clip. Offsets index the trajectory's
``raw_response`` so the evaluation can later be embedded right after each clip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from eval_pipeline.models import FINAL_TOOL_TYPE, Step, steps_to_rows


class Clip(BaseModel):
    """The row contract of the ``clips`` table (plus trajectory fields added by the asset)."""

    clip_index: int
    tool_type: str
    tool_name: str | None
    start: int
    end: int
    content: str
    thought: str
    tool_call: str
    action_input: str
    result: str
    has_answer: bool
    answer: str
    step_start: int
    step_end: int
    human_label: float | None = None
    """Mean of the source's step labels inside the clip (e.g. AgentProcessBench +1/0/-1)."""


ClipRow = tuple[int, str, str | None, int, int, str, str, str, str, str, bool, str, int, int,
                float | None]
"""A clip's values in :class:`Clip`'s field order."""

StepRow = dict[str, Any]
"""A step as the ``steps`` column holds it (``Step`` fields, dumped)."""


def _clip(index: int, text: str, steps: Sequence[StepRow], first: int, last: int,
          start: int, end: int, call: StepRow | None) -> ClipRow:
    thoughts: list[str] = []
    results: list[str] = []
    answers: list[str] = []
    labels: list[float] = []
    for step in steps[first:last]:
        kind = step["kind"]
        if kind == "thought":
            thoughts.append(step["content"])
        elif kind == "tool_result":
            results.append(step["content"])
        elif kind == "answer":
            answers.append(step["content"])
        if step["label"] is not None:
            labels.append(step["label"])
    return (
        index,
        (call["tool_type"] or "generic") if call else FINAL_TOOL_TYPE,
        call["tool_name"] if call else None,
        start,
        end,
        text[start:end],
        "\n".join(thoughts),
        call["content"] if call else "",
        (call["tool_input"] or "") if call else "",
        "\n".join(results),
        bool(answers),
        "\n".join(answers),
        first,
        last,
        sum(labels) / len(labels) if labels else None,
    )


def segment_rows(text: str, steps: Sequence[StepRow]) -> list[ClipRow]:
    """The clips of a response given its ``steps`` rows, as tuples in :class:`Clip`'s field
    order: the clips table's hot path, with no model per step or clip (validating the
    steps and building the clips were half of the stage, #12.1)."""
    clips: list[ClipRow] = []
    clip_start, first = 0, 0
    count = len(steps)
    i = 0
    while i < count:
        step = steps[i]
        if step["kind"] != "tool_call":
            i += 1
            continue
        end_step = i
        j = i + 1
        while j < count:
            kind = steps[j]["kind"]
            if kind == "tool_call":
                break
            if kind == "tool_result":
                end_step = j
                break
            j += 1
        end = steps[end_step]["end"]
        clips.append(_clip(len(clips), text, steps, first, end_step + 1, clip_start, end, step))
        clip_start, first = end, end_step + 1
        i = end_step + 1
    # Every trajectory closes with a ``final`` clip, scored on task completion. One that
    # stopped right after a tool result (its step limit, a crash) gets an empty one: the
    # original tool made none, so a run that never answered went without the clip that
    # says so.
    if clips or first < count or text[clip_start:].strip():
        clips.append(_clip(len(clips), text, steps, first, count, clip_start, len(text), None))
    return clips


def segment(text: str, steps: Sequence[Step]) -> list[Clip]:
    """The clips of a response and its steps, as the clips table's rows describe them."""
    names = list(Clip.model_fields)
    clips: list[Clip] = []
    for row in segment_rows(text, steps_to_rows(list(steps))):
        values: dict[str, Any] = dict(zip(names, row, strict=True))
        # Built without validation: every value comes from validated steps.
        clips.append(Clip.model_construct(**values))
    return clips
