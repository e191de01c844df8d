"""The category and trajectory assessments: what they are asked, built from a judge's own
clip rows.

After a trajectory's clips are judged, the original tool assesses each MCP tool category
it used ("Enhanced Category Assessment") and then the trajectory as a whole from all clips
and the category assessments ("Final Trajectory Scoring"). Here:

- a **category** is a tool type that at least one tool clip of the trajectory has (the
  closing ``final`` clip is not a category: it belongs to the trajectory assessment). A
  category no clip has gets no request, so nothing is ever assessed from nothing;
- one ``category_assessment`` request per category, sent once every clip of that category
  has its row (the chain goes on meanwhile), with those clips and the judge's evaluation of
  each; row: ``clip_index`` -1, ``tool_type`` the category;
- one ``trajectory_assessment`` request, sent once every clip and every category
  assessment has its row, with all clips, their evaluations and the category results;
  row: ``clip_index`` -1, ``tool_type`` ``trajectory``.

A clip whose evaluation failed (or was skipped by the budget) is still shown, marked as
failed and without a score: the assessment is made, with one piece of evidence fewer, and
no score is invented for the clip. The same holds for a failed category assessment in the
trajectory prompt. Each judge assesses from its own clip rows (as the original's models
each evaluate the whole chain); the averaging over judges happens afterwards, per row.

The scores shown are rounded to three decimals and the summaries are the rows' own, so the
prompts of a rerun whose clip rows came from the cache are the same text, and hit the cache
themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from eval_pipeline.judges.base import (
    CategoryResult,
    ClipResult,
    ClipTask,
    ClipView,
    JudgeRequest,
)
from eval_pipeline.judges.requests import cut_text
from eval_pipeline.models import FINAL_TOOL_TYPE
from eval_pipeline.rubrics import (
    ASSESSMENT_CLIP_CHARS,
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_TRAJECTORY_ASSESSMENT,
    TRAJECTORY_CLIP_INDEX,
    TRAJECTORY_TOOL_TYPE,
    assessment_rubrics,
    assessment_templates_version,
    fence,
    render_category_prompt,
    render_trajectory_prompt,
)

__all__ = ["Answered", "Outcome", "assessment_requests", "categories_of", "category_request",
           "category_result", "clip_result", "clips_text", "trajectory_request"]


class Outcome(Protocol):
    """What an assessment reads of a judgment row (a :class:`JudgmentRow` is one)."""

    @property
    def status(self) -> str: ...

    @property
    def scores(self) -> str: ...

    @property
    def summary(self) -> str: ...


@dataclass(frozen=True)
class Answered:
    """An :class:`Outcome` that is not a row: a cached answer (the dry run follows the
    cache) or a stand-in for one not known yet."""

    status: str
    scores: str
    summary: str


def categories_of(tasks: Sequence[ClipTask]) -> dict[str, list[ClipTask]]:
    """The trajectory's categories, in the order they are first used, each with its tool
    clips in clip order. The closing clip (``final``) is no category."""
    out: dict[str, list[ClipTask]] = {}
    for task in sorted(tasks, key=lambda t: t.clip_index):
        if task.tool_type != FINAL_TOOL_TYPE:
            out.setdefault(task.tool_type, []).append(task)
    return out


def clip_result(task: ClipTask, row: Outcome | None) -> ClipResult:
    """The clip with its row's outcome; no row (not judged, e.g. a failed-row stand-in)
    is shown as failed."""
    ok = row is not None and row.status == "ok"
    return ClipResult(
        clip_index=task.clip_index, tool_type=task.tool_type, clip=task.clip,
        status=row.status if row is not None else "failed",
        scores=json.loads(row.scores) if ok and row is not None else {},
        summary=row.summary if ok and row is not None else "")


def category_result(category: str, clip_count: int, row: Outcome | None
                    ) -> CategoryResult:
    ok = row is not None and row.status == "ok"
    return CategoryResult(
        category=category, clip_count=clip_count,
        status=row.status if row is not None else "failed",
        scores=json.loads(row.scores) if ok and row is not None else {},
        summary=row.summary if ok and row is not None else "")


def _cut(text: str) -> str:
    return cut_text(text, ASSESSMENT_CLIP_CHARS)[0]


def _scores_text(scores: Mapping[str, float]) -> str:
    return json.dumps({m: round(float(v), 3) for m, v in scores.items()})


def _evaluation_text(status: str, scores: Mapping[str, float], summary: str) -> str:
    if status != "ok":
        why = ("not made (the judge's budget ran out)" if status == "skipped"
               else "failed")
        return f"Evaluation: {why}; no score. Judge this clip from its content alone."
    text = f"Evaluation: scores {_scores_text(scores)}"
    if summary.strip():
        text += f"\nEvaluation summary:\n{fence(summary)}"
    return text


def clips_text(results: Sequence[ClipResult]) -> str:
    """Each clip (its content, cut to ``ASSESSMENT_CLIP_CHARS``) and its evaluation."""
    parts = []
    for r in results:
        tool = r.clip.tool_name or r.tool_type
        head = (f"Clip {r.clip_index} (the final answer)" if r.tool_type == FINAL_TOOL_TYPE
                else f"Clip {r.clip_index} (category {r.tool_type}, tool {tool})")
        content = r.clip.content.strip()
        body = fence(_cut(content)) if content else "(empty: no answer was given)"
        parts.append(f"{head}:\n{body}\n{_evaluation_text(r.status, r.scores, r.summary)}")
    return "\n\n".join(parts) if parts else "(no clips)"


def categories_text(results: Sequence[CategoryResult], requested: bool) -> str:
    if not requested:
        return "(category assessments were not requested for this judge)"
    if not results:
        return "(the agent called no tool: there is no category to assess)"
    parts = []
    for r in results:
        head = f"Category {r.category} ({r.clip_count} clip{'s' if r.clip_count != 1 else ''})"
        if r.status != "ok":
            parts.append(f"{head}: assessment {r.status}; no score.")
            continue
        text = f"{head}: scores {_scores_text(r.scores)}"
        if r.summary.strip():
            text += f"\nAssessment summary:\n{fence(r.summary)}"
        parts.append(text)
    return "\n\n".join(parts)


def category_request(category: str, tasks: Sequence[ClipTask],
                     rows: Mapping[int, Outcome]) -> JudgeRequest:
    """The assessment of one category from its clips (``tasks``, non-empty) and the judge's
    rows for them by clip index."""
    if not tasks:
        raise ValueError(f"category {category!r} has no clip: nothing to assess")
    results = [clip_result(t, rows.get(t.clip_index)) for t in tasks]
    first = tasks[0]
    system, user = render_category_prompt(category=category,
                                          task_description=first.task_description,
                                          clips_text=clips_text(results))
    return JudgeRequest(
        trajectory_id=first.trajectory_id, clip_index=TRAJECTORY_CLIP_INDEX,
        evaluation_kind=EVAL_CATEGORY_ASSESSMENT, tool_type=category,
        metrics=assessment_rubrics()[EVAL_CATEGORY_ASSESSMENT].metric_names,
        task_description=first.task_description, previous_context="",
        clip=ClipView(content=""), assessed_clips=results,
        system_prompt=system, user_prompt=user,
        template_version=assessment_templates_version())


def trajectory_request(tasks: Sequence[ClipTask], rows: Mapping[int, Outcome],
                       category_rows: Mapping[str, Outcome | None] | None
                       ) -> JudgeRequest:
    """The final assessment of a trajectory from all its clips (``tasks``, non-empty), the
    judge's clip rows by clip index and its category rows by category (None: category
    assessments not requested)."""
    if not tasks:
        raise ValueError("a trajectory without clips has nothing to assess")
    ordered = sorted(tasks, key=lambda t: t.clip_index)
    results = [clip_result(t, rows.get(t.clip_index)) for t in ordered]
    categories = [category_result(c, len(ts), (category_rows or {}).get(c))
                  for c, ts in categories_of(ordered).items()]
    first = ordered[0]
    system, user = render_trajectory_prompt(
        task_description=first.task_description, clips_text=clips_text(results),
        categories_text=categories_text(categories, category_rows is not None))
    closing = ordered[-1] if ordered[-1].tool_type == FINAL_TOOL_TYPE else None
    return JudgeRequest(
        trajectory_id=first.trajectory_id, clip_index=TRAJECTORY_CLIP_INDEX,
        evaluation_kind=EVAL_TRAJECTORY_ASSESSMENT, tool_type=TRAJECTORY_TOOL_TYPE,
        metrics=assessment_rubrics()[EVAL_TRAJECTORY_ASSESSMENT].metric_names,
        task_description=first.task_description, previous_context="",
        clip=closing.clip if closing else ClipView(content=""),
        assessed_clips=results,
        category_results=categories if category_rows is not None else [],
        system_prompt=system, user_prompt=user,
        template_version=assessment_templates_version())


def assessment_requests(tasks: Sequence[ClipTask], evaluations: Sequence[str],
                        rows: Mapping[int, Outcome] | None = None,
                        category_rows: Mapping[str, Outcome] | None = None
                        ) -> list[JudgeRequest]:
    """ONE trajectory's assessment requests the ``evaluations`` ask for, categories first,
    rendered from the given rows (missing ones shown as failed). The runner builds them one
    at a time as their inputs finish; this is for what needs them all at once (failed-row
    stand-ins, the dry run, the detail files' prompt lengths)."""
    if not tasks:
        return []
    rows = rows or {}
    kinds = set(evaluations)
    out: list[JudgeRequest] = []
    if EVAL_CATEGORY_ASSESSMENT in kinds:
        out += [category_request(c, ts, rows) for c, ts in categories_of(tasks).items()]
    if EVAL_TRAJECTORY_ASSESSMENT in kinds:
        out.append(trajectory_request(
            tasks, rows,
            (category_rows or {}) if EVAL_CATEGORY_ASSESSMENT in kinds else None))
    return out
