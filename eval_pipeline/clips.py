"""Clip segmentation as the original tool does it, on canonical steps.

A clip runs from the end of the previous clip to the end of a tool call's ``<result>``
(or of the call itself when no result follows before the next call); whatever remains
after the last tool clip is the ``final`` clip. Offsets index the trajectory's
``raw_response`` so the evaluation can later be embedded right after each clip.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from eval_pipeline.models import FINAL_TOOL_TYPE, Step


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


def _clip(index: int, text: str, steps: Sequence[Step], first: int, last: int, start: int,
          end: int, call: Step | None) -> Clip:
    inside = steps[first:last]
    results = [s.content for s in inside if s.kind == "tool_result"]
    labels = [s.label for s in inside if s.label is not None]
    answers = [s.content for s in inside if s.kind == "answer"]
    # Built without validation: every value comes from validated steps, and validating
    # copied each clip's text again (a sixth of the clip stage).
    return Clip.model_construct(
        clip_index=index,
        tool_type=(call.tool_type or "generic") if call else FINAL_TOOL_TYPE,
        tool_name=call.tool_name if call else None,
        start=start,
        end=end,
        content=text[start:end],
        thought="\n".join(s.content for s in inside if s.kind == "thought"),
        tool_call=call.content if call else "",
        action_input=(call.tool_input or "") if call else "",
        result="\n".join(results),
        has_answer=bool(answers),
        answer="\n".join(answers),
        step_start=first,
        step_end=last,
        human_label=sum(labels) / len(labels) if labels else None,
    )


def segment(text: str, steps: Sequence[Step]) -> list[Clip]:
    clips: list[Clip] = []
    clip_start, first = 0, 0
    i = 0
    while i < len(steps):
        step = steps[i]
        if step.kind != "tool_call":
            i += 1
            continue
        end_step = i
        j = i + 1
        while j < len(steps) and steps[j].kind != "tool_call":
            if steps[j].kind == "tool_result":
                end_step = j
                break
            j += 1
        end = steps[end_step].end
        clips.append(_clip(len(clips), text, steps, first, end_step + 1, clip_start, end, step))
        clip_start, first = end, end_step + 1
        i = end_step + 1
    # Every trajectory closes with a ``final`` clip, scored on task completion. One that
    # stopped right after a tool result (its step limit, a crash) gets an empty one: the
    # original tool made none, so a run that never answered went without the clip that
    # says so.
    if text[clip_start:].strip() or first < len(steps) or clips:
        clips.append(_clip(len(clips), text, steps, first, len(steps), clip_start, len(text),
                           None))
    return clips
