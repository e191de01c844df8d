"""The judge protocol: what every provider receives and must return.

A provider only turns a :class:`JudgeRequest` into a :class:`JudgeReply` or raises
:class:`JudgeError`. Validation, context chaining, caching and the failed-row policy live
in the runner, once, so no provider can invent a score.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from eval_pipeline.rubrics import EVAL_KIND_CLIP

__all__ = ["EVAL_KIND_CLIP", "CategoryResult", "ClipResult", "ClipTask", "ClipView", "Judge",
           "JudgeError", "JudgeReply", "JudgeRequest"]


class ClipView(BaseModel):
    """The structured clip fields a non-LLM judge (the heuristic) needs."""

    content: str
    thought: str = ""
    tool_call: str = ""
    tool_name: str | None = None
    action_input: str = ""
    result: str = ""
    has_answer: bool = False
    answer: str = ""
    earlier_calls: list[str] = Field(
        default_factory=list, description="tool_name + input of earlier calls in the trajectory"
    )


class ClipTask(BaseModel):
    """One clip to judge, as read from the ``clips`` table."""

    trajectory_id: str
    clip_index: int
    tool_type: str
    task_description: str
    clip: ClipView
    beta_threshold: int | None = Field(
        default=None, description="The tool-call limit preprocessing applied to the "
        "trajectory (None: not recorded, the default applies)")


class ClipResult(BaseModel):
    """A clip and the judge's own evaluation of it, as an assessment request carries it
    (so a non-LLM judge reads them without parsing the prompt).

    ``status`` is the clip row's: ``ok`` with its scores and summary, ``failed`` or
    ``skipped`` with none (a failed evaluation is shown as failed, never given a score).
    """

    clip_index: int
    tool_type: str
    clip: ClipView
    status: str
    scores: dict[str, float] = Field(default_factory=dict)
    summary: str = ""


class CategoryResult(BaseModel):
    """One category assessment's outcome, as the trajectory assessment request carries it."""

    category: str
    clip_count: int
    status: str
    scores: dict[str, float] = Field(default_factory=dict)
    summary: str = ""


class JudgeRequest(BaseModel):
    trajectory_id: str
    clip_index: int
    evaluation_kind: str = EVAL_KIND_CLIP
    tool_type: str
    metrics: list[str]
    task_description: str
    previous_context: str
    clip: ClipView
    system_prompt: str
    user_prompt: str
    template_version: str
    labels: list[str] = Field(
        default_factory=list,
        description="ReAct kinds: the allowed labels, positive first (it scores 1.0); "
        "empty for the clip rubric, which has no label",
    )
    sequence: list[ClipView] = Field(
        default_factory=list,
        description="sequence_optimality: the trajectory's tool clips in order, so a "
        "non-LLM judge can read the calls without parsing the prompt",
    )
    beta_threshold: int | None = Field(
        default=None, description="sequence_optimality: the tool-call limit the run used")
    assessed_clips: list[ClipResult] = Field(
        default_factory=list,
        description="category_assessment: the category's clips; trajectory_assessment: "
        "every clip; each with this judge's evaluation of it")
    category_results: list[CategoryResult] = Field(
        default_factory=list,
        description="trajectory_assessment: this judge's category assessments")


class JudgeReply(BaseModel):
    """A provider's answer before validation against the rubric."""

    scores: dict[str, Any]
    summary: str = ""
    reasoning: str = ""
    label: str | None = None
    raw_response: str = ""
    tokens_in: int = 0
    tokens_out: int = 0


class JudgeError(Exception):
    """A provider call that failed for good; ``raw_response`` keeps what came back, if any."""

    def __init__(self, message: str, raw_response: str = ""):
        super().__init__(message)
        self.raw_response = raw_response


class Judge(Protocol):
    name: str
    provider: str
    model: str
    # The reply mode in use now (json_schema, json_object, tool, text; heuristic) and, after
    # a fallback, why it changed; rows and run metadata carry both.
    reply_mode: str
    reply_mode_note: str | None

    async def score(self, request: JudgeRequest) -> JudgeReply: ...

    async def aclose(self) -> None: ...
