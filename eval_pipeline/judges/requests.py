"""What a judge is asked: the rendered clip-rubric and ReAct requests, the repair request
that sends a rejected answer back with the reason, and the cut that keeps an oversized
trajectory field within the judge's ``input_max_chars``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from eval_pipeline.judges.base import ClipTask, ClipView, JudgeRequest
from eval_pipeline.judges.errors import redact
from eval_pipeline.judges.rows import JudgmentRow
from eval_pipeline.models import FINAL_TOOL_TYPE
from eval_pipeline.rubrics import (
    ALL_EVALUATIONS,
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_KIND_CLIP,
    EVAL_QUERY_TO_THOUGHT,
    EVAL_SEQUENCE_OPTIMALITY,
    EVAL_THOUGHT_TO_TOOL,
    EVAL_TRAJECTORY_ASSESSMENT,
    REACT_EVALUATIONS,
    TRAJECTORY_CLIP_INDEX,
    TRAJECTORY_TOOL_TYPE,
    render_clip_prompt,
    render_query_to_thought_prompt,
    render_sequence_prompt,
    render_thought_to_tool_prompt,
    rubric_for,
    templates_version,
    tool_definitions,
)

__all__ = ["Truncation", "build_react_requests", "build_request", "chain_context",
           "cut_text", "fit_tasks", "prompt_hash", "record_truncation", "repair_request"]


# -- oversized fields ----------------------------------------------------------------------

def _marker(left_out: int) -> str:
    return f"\n[... {left_out} characters left out ...]\n"


def cut_text(text: str, max_chars: int) -> tuple[str, int]:
    """``text`` in at most ``max_chars`` characters, and how many were left out.

    A clip of 200 kB of tool output costs the judge as much as a hundred ordinary ones and
    can overflow a small model's context. Head and tail are kept, because a tool's call is
    at the start of a clip and its outcome (the error, the answer) at the end; the marker
    between them says how much is missing, so the judge does not take the cut for the
    agent's own output ending there.
    """
    if len(text) <= max_chars:
        return text, 0
    keep = max_chars - len(_marker(len(text)))  # the count never has more digits than len
    head = (keep + 1) // 2
    tail = keep - head
    left_out = len(text) - keep
    return text[:head] + _marker(left_out) + text[len(text) - tail:], left_out


# The ClipTask fields that reach a prompt (task description, clip, thought, tool input,
# result); tool names are short and the earlier-clip summaries have their own bound
# (context_budget_chars).
_CLIP_FIELDS = ("content", "thought", "action_input", "result")
# Which of them each evaluation kind renders. The sequence prompt shows every step shortened
# to its seed length (1,000 / 200 / 200 characters from the start) whatever the limit, and
# a cut keeps more than that from the start (input_max_chars >= 2,500), so only its task
# description can be cut.
_FIELDS_BY_KIND: dict[str, tuple[str, ...]] = {
    EVAL_KIND_CLIP: ("task_description", "content"),
    EVAL_THOUGHT_TO_TOOL: ("task_description", "thought", "action_input"),
    EVAL_QUERY_TO_THOUGHT: ("task_description", "thought"),
    EVAL_SEQUENCE_OPTIMALITY: ("task_description",),
    # The assessments show each clip shortened to ASSESSMENT_CLIP_CHARS whatever the limit
    # (the prompt's own marker says how much), so only the task description counts here.
    EVAL_CATEGORY_ASSESSMENT: ("task_description",),
    EVAL_TRAJECTORY_ASSESSMENT: ("task_description",),
}


@dataclass
class Truncation:
    """What :func:`fit_tasks` cut: characters left out per (trajectory, clip) and field."""

    cut: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)

    def chars_for(self, row: JudgmentRow) -> int:
        """Characters left out of the fields this row's prompt was rendered from."""
        names = _FIELDS_BY_KIND.get(row.evaluation_kind, ())
        if row.clip_index == TRAJECTORY_CLIP_INDEX:  # the trajectory's task description
            cuts = next((c for (t, _), c in self.cut.items() if t == row.trajectory_id), {})
        else:
            cuts = self.cut.get((row.trajectory_id, row.clip_index), {})
        return sum(cuts.get(name, 0) for name in names)


def fit_tasks(tasks: Sequence[ClipTask], max_chars: int | None
              ) -> tuple[list[ClipTask], Truncation]:
    """The tasks with every prompt field cut to ``max_chars`` (None: as they are), and what
    was cut. Done before the requests are rendered, so the prompt, its hash and the cache
    key all see the cut text, and a changed limit re-asks exactly the clips it cuts."""
    truncation = Truncation()
    if max_chars is None:
        return list(tasks), truncation
    fitted: list[ClipTask] = []
    for task in tasks:
        description, cut_description = cut_text(task.task_description, max_chars)
        clip_update: dict[str, str] = {}
        cuts = {"task_description": cut_description} if cut_description else {}
        for name in _CLIP_FIELDS:
            text, left_out = cut_text(getattr(task.clip, name), max_chars)
            if left_out:
                clip_update[name] = text
                cuts[name] = left_out
        if not cuts:
            fitted.append(task)
            continue
        truncation.cut[(task.trajectory_id, task.clip_index)] = cuts
        fitted.append(task.model_copy(update={
            "task_description": description,
            "clip": task.clip.model_copy(update=clip_update)}))
    return fitted, truncation


def record_truncation(rows: Sequence[JudgmentRow], truncation: Truncation
                      ) -> list[JudgmentRow]:
    """The rows with ``truncated_chars`` set from what :func:`fit_tasks` cut."""
    if not truncation.cut:
        return list(rows)
    return [row.model_copy(update={"truncated_chars": n}) if (n := truncation.chars_for(row))
            else row for row in rows]


def chain_context(summaries: Sequence[str], budget_chars: int | None = None
                  ) -> tuple[str, int]:
    """The earlier clips' summaries as the next prompt's ``previous_context``, and how many
    were left out.

    Unbounded (``None``, the original tool's behaviour) the context grows with the clip
    index; with a budget, the most recent whole summaries that fit in ``budget_chars``
    characters are kept (a summary is never cut), so prompt size stops growing.
    """
    parts = [f"[Previous: {s}]" for s in summaries]
    if budget_chars is None:
        return " ".join(parts), 0
    kept: list[str] = []
    used = 0
    for part in reversed(parts):
        cost = len(part) + (1 if kept else 0)
        if used + cost > budget_chars:
            break
        kept.append(part)
        used += cost
    return " ".join(reversed(kept)), len(parts) - len(kept)


def build_request(task: ClipTask, previous_context: str) -> JudgeRequest:
    system, user = render_clip_prompt(
        tool_type=task.tool_type,
        task_description=task.task_description,
        previous_context=previous_context,
        clip_content=task.clip.content,
    )
    return JudgeRequest(
        trajectory_id=task.trajectory_id,
        clip_index=task.clip_index,
        tool_type=task.tool_type,
        metrics=rubric_for(task.tool_type).metric_names,
        task_description=task.task_description,
        previous_context=previous_context,
        clip=task.clip,
        system_prompt=system,
        user_prompt=user,
        template_version=templates_version(),
    )


def _is_tool_clip(task: ClipTask) -> bool:
    return task.tool_type != FINAL_TOOL_TYPE


def _react_request(task: ClipTask, kind: str, system: str, user: str) -> JudgeRequest:
    spec = REACT_EVALUATIONS[kind]
    return JudgeRequest(
        trajectory_id=task.trajectory_id, clip_index=task.clip_index, evaluation_kind=kind,
        tool_type=task.tool_type, metrics=[spec.metric], labels=spec.labels,
        task_description=task.task_description, previous_context="", clip=task.clip,
        system_prompt=system, user_prompt=user, template_version=templates_version(),
    )


def build_react_requests(tasks: Sequence[ClipTask], evaluations: Sequence[str] = ALL_EVALUATIONS
                         ) -> list[JudgeRequest]:
    """The ReAct requests for ONE trajectory's clips, in a stable order.

    - thought_to_tool: one per tool clip (the final clip has no call, so it is skipped);
    - query_to_thought: one per tool clip that states a thought (a clip without a thought
      has nothing to align with the query, so it gets no row rather than a made-up label);
    - sequence_optimality: one per trajectory (clip_index -1, tool_type "trajectory"),
      over the ordered (thought, tool, input, short result) of all its tool clips.
    """
    if not tasks:
        return []
    ordered = sorted(tasks, key=lambda t: t.clip_index)
    tool_clips = [t for t in ordered if _is_tool_clip(t)]
    kinds = set(evaluations)
    tools_text = tool_definitions([(t.clip.tool_name or t.tool_type, t.tool_type)
                                   for t in tool_clips])
    requests: list[JudgeRequest] = []
    for task in tool_clips:
        clip = task.clip
        if EVAL_THOUGHT_TO_TOOL in kinds:
            system, user = render_thought_to_tool_prompt(
                original_question=task.task_description, thought=clip.thought.strip(),
                tool_call=clip.tool_name or task.tool_type, action_input=clip.action_input,
                tool_definitions=tools_text)
            requests.append(_react_request(task, EVAL_THOUGHT_TO_TOOL, system, user))
        if EVAL_QUERY_TO_THOUGHT in kinds and clip.thought.strip():
            system, user = render_query_to_thought_prompt(
                original_question=task.task_description, thought=clip.thought.strip())
            requests.append(_react_request(task, EVAL_QUERY_TO_THOUGHT, system, user))
    if EVAL_SEQUENCE_OPTIMALITY in kinds:
        first = ordered[0]
        system, user = render_sequence_prompt(
            original_question=first.task_description,
            steps=[(t.clip.thought.strip(), t.clip.tool_name or t.tool_type,
                    t.clip.action_input, t.clip.result) for t in tool_clips])
        closing = ordered[-1] if not _is_tool_clip(ordered[-1]) else None
        spec = REACT_EVALUATIONS[EVAL_SEQUENCE_OPTIMALITY]
        requests.append(JudgeRequest(
            trajectory_id=first.trajectory_id, clip_index=TRAJECTORY_CLIP_INDEX,
            evaluation_kind=EVAL_SEQUENCE_OPTIMALITY, tool_type=TRAJECTORY_TOOL_TYPE,
            metrics=[spec.metric], labels=spec.labels,
            task_description=first.task_description, previous_context="",
            # The closing clip (answer or not) stands for the trajectory's end.
            clip=closing.clip if closing else ClipView(content=""),
            sequence=[t.clip for t in tool_clips], beta_threshold=first.beta_threshold,
            system_prompt=system, user_prompt=user, template_version=templates_version(),
        ))
    return requests


def repair_request(request: JudgeRequest, error: str, raw_response: str,
                   secrets: Sequence[str | None] = ()) -> JudgeRequest:
    """The same question again, with the rejected answer and why it was rejected."""
    if request.labels:  # a ReAct kind: the seed's explanation and label, no score
        wanted = ("an \"explanation\" string and a \"label\" that is exactly one of "
                  f"{request.labels}.")
    else:
        wanted = ("exactly the criteria listed above under \"scores\", each a number from "
                  "0.0 to 1.0, plus \"summary\" and \"reasoning\" strings.")
    note = (
        "\n\nYour previous reply could not be used: "
        f"{redact(error, secrets)}\n\nYour previous reply was:\n"
        f"{redact(raw_response[:4000], secrets)}\n\n"
        f"Reply again with only the corrected JSON object: {wanted}"
    )
    return request.model_copy(update={"user_prompt": request.user_prompt + note})


def prompt_hash(request: JudgeRequest) -> str:
    return hashlib.sha256(
        (request.system_prompt + "\x00" + request.user_prompt).encode("utf-8")
    ).hexdigest()[:16]
