"""Per-judge detail files as the original tool writes them in multi-model mode:
``{provider}_{model}_{task_id}_eva.json``, one per judge and trajectory, with each clip's
evaluation input (prompt length, tool type) and output (scores, summary, reasoning, raw
response, error).

The averaged ``evaluated.jsonl`` hides which judge said what; these files are where a user
of the original tool looks to see one model's view of a trajectory. A failed judgment stays
failed here: ``success: false``, no scores, its error in ``error_message``.

``prompt_length`` is the length of the prompt the judge was sent (system and user text),
as the judgment row recorded it (``prompt_chars``). Rows judged before the rows recorded it
have it rendered again from the clip and the row's context chain, given only when the
rendered prompt hashes to the row's ``prompt_hash``, so it is never a guess (a judge whose
``input_max_chars`` cut the clip, for instance, gets ``null`` there). Rendering every
prompt again was a fifth of a run's exports (#12); it is done only for such rows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from eval_pipeline.exports.common import TrajectoryInfo, records, safe_name, trajectory_info
from eval_pipeline.ingest import clip_tasks
from eval_pipeline.judges.assessments import Answered, assessment_requests
from eval_pipeline.judges.requests import build_react_requests, build_request, prompt_hash
from eval_pipeline.rubrics import (
    ASSESSMENT_KINDS,
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_KIND_CLIP,
    REACT_EVALUATIONS,
)

JUDGE_DETAILS_DIR = "judge_details"
_ROW_COLUMNS = ["trajectory_id", "clip_index", "evaluation_kind", "tool_type", "judge",
                "provider", "model", "status", "success", "scores", "label", "summary",
                "reasoning", "raw_response", "error", "previous_context", "prompt_hash",
                "prompt_chars"]


class EvaluationInput(BaseModel):
    prompt_length: int | None
    tool_type: str
    has_tool_call: bool


class EvaluationOutput(BaseModel):
    success: bool
    status: str
    scores: dict[str, float]
    label: str | None = None
    summary: str
    reasoning: str
    model_name: str
    provider: str
    raw_response: str
    error_message: str | None


class ClipEvaluation(BaseModel):
    clip_index: int
    tool_type: str
    evaluation_kind: str
    clip_content: str
    evaluation_input: EvaluationInput
    evaluation_output: EvaluationOutput


class JudgeDetailFile(BaseModel):
    """One judge's view of one trajectory; the original's keys first, ours after."""

    task_id: str
    model_name: str
    total_clips: int
    evaluations: list[ClipEvaluation]
    react_evaluations: list[ClipEvaluation]
    assessments: list[ClipEvaluation]
    """The category assessments (``tool_type`` the category) and the final trajectory
    assessment, ``clip_index`` -1."""
    judge: str
    trajectory_id: str
    batch: str


def _recorded(row: Mapping[str, Any]) -> int | None:
    """The row's own prompt length, if it recorded one."""
    chars = row.get("prompt_chars")
    return chars if isinstance(chars, int) and chars > 0 else None


class _Prompts:
    """Prompt lengths: each row's recorded length, or, for rows that have none, rendered
    again from the clips and checked against the row's hash (built at the first such row)."""

    def __init__(self, clips: pd.DataFrame, trajectories: pd.DataFrame) -> None:
        self._clips, self._trajectories = clips, trajectories
        self._tasks: dict[tuple[str, int], Any] | None = None
        self._react: dict[tuple[str, int, str], tuple[str, int]] = {}
        self._assessments: dict[tuple[str, str, str], tuple[str, int]] = {}

    def _rendered(self) -> dict[tuple[str, int], Any]:
        if self._tasks is None:
            self._tasks = self._render()
        return self._tasks

    def _render(self) -> dict[tuple[str, int], Any]:
        clips, trajectories = self._clips, self._trajectories
        tasks = {(t.trajectory_id, t.clip_index): t
                 for t in clip_tasks(clips, trajectories)} if len(clips) else {}
        by_traj: dict[str, list[Any]] = defaultdict(list)
        for task in tasks.values():
            by_traj[task.trajectory_id].append(task)
        for tid, chain in by_traj.items():
            for request in build_react_requests(chain):
                self._react[(tid, request.clip_index, request.evaluation_kind)] = (
                    prompt_hash(request),
                    len(request.system_prompt) + len(request.user_prompt))
        return tasks

    def assessed(self, tid: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Render one judge's assessment prompts of trajectory ``tid`` from its own clip
        and category rows, as its run did, for :meth:`length` (not when every row recorded
        its length)."""
        if all(_recorded(r) is not None for r in rows):
            return
        tasks = [t for (t_id, _), t in self._rendered().items() if t_id == tid]
        kinds = {str(r["evaluation_kind"]) for r in rows} & set(ASSESSMENT_KINDS)
        if not tasks or not kinds:
            return
        clip_rows = {int(r["clip_index"]): _answered(r) for r in rows
                     if r["evaluation_kind"] == EVAL_KIND_CLIP}
        category_rows = {str(r["tool_type"]): _answered(r) for r in rows
                         if r["evaluation_kind"] == EVAL_CATEGORY_ASSESSMENT}
        for request in assessment_requests(tasks, [EVAL_KIND_CLIP, *sorted(kinds)],
                                           clip_rows, category_rows):
            self._assessments[(tid, request.evaluation_kind, request.tool_type)] = (
                prompt_hash(request), len(request.system_prompt) + len(request.user_prompt))

    def length(self, row: Mapping[str, Any]) -> int | None:
        recorded = _recorded(row)
        if recorded is not None:
            return recorded
        rendered = self._rendered()
        key = (str(row["trajectory_id"]), int(row["clip_index"]))
        if row["evaluation_kind"] in ASSESSMENT_KINDS:
            found = self._assessments.get(
                (key[0], str(row["evaluation_kind"]), str(row["tool_type"])), ("", 0))
            return found[1] if found[0] and found[0] == row.get("prompt_hash") else None
        if row["evaluation_kind"] == EVAL_KIND_CLIP:
            task = rendered.get(key)
            if task is None:
                return None
            request = build_request(task, row.get("previous_context") or "")
            found = (prompt_hash(request),
                     len(request.system_prompt) + len(request.user_prompt))
        else:
            found = self._react.get((*key, str(row["evaluation_kind"])), ("", 0))
        return found[1] if found[0] and found[0] == row.get("prompt_hash") else None


def _answered(row: Mapping[str, Any]) -> Answered:
    return Answered(str(row["status"]), str(row.get("scores") or "{}"),
                    str(row.get("summary") or ""))


def _evaluation(row: Mapping[str, Any], clip: Mapping[str, Any] | None,
                prompts: _Prompts) -> ClipEvaluation:
    ok = row["status"] == "ok"
    scores = json.loads(row["scores"]) if ok and row.get("scores") else {}
    return ClipEvaluation(
        clip_index=int(row["clip_index"]), tool_type=str(row["tool_type"]),
        evaluation_kind=str(row["evaluation_kind"]),
        clip_content=str(clip["content"]) if clip else "",
        evaluation_input=EvaluationInput(
            prompt_length=prompts.length(row), tool_type=str(row["tool_type"]),
            has_tool_call=bool(clip and clip.get("tool_call"))),
        evaluation_output=EvaluationOutput(
            success=ok, status=str(row["status"]), scores=scores,
            label=row.get("label") if isinstance(row.get("label"), str)
            and row["evaluation_kind"] in REACT_EVALUATIONS else None,
            summary=str(row.get("summary") or ""), reasoning=str(row.get("reasoning") or ""),
            model_name=str(row["model"]), provider=str(row["provider"]),
            raw_response=str(row.get("raw_response") or ""),
            error_message=None if ok else str(row.get("error") or row["status"])))


def judge_models(judgments: Mapping[str, pd.DataFrame]) -> dict[str, tuple[str, str]]:
    """Judge name -> (provider, model) of its first row, for the judges with rows."""
    out = {}
    for name, table in judgments.items():
        first = records(table.head(1), ["provider", "model"])
        if first:
            out[name] = (str(first[0]["provider"]), str(first[0]["model"]))
    return out


class JudgeDetails:
    """:func:`judge_detail_files` over a run's batches, one batch at a time (#12.3).

    ``models`` is every judge's (provider, model) over the whole run (its first row's, as
    :func:`judge_models` reads it): a judge sharing them with another gets its name in its
    files' names. A task id met again in a later batch continues its ``__2``, ``__3``
    count, as in one table. Rows of a trajectory that is not among its batch's
    trajectories (never, from the pipeline: judgments come from the batch's clips) are
    named after every batch's, in trajectory id order, by :meth:`rest`.
    """

    def __init__(self, models: Mapping[str, tuple[str, str]]) -> None:
        self._models = dict(models)
        pairs = list(self._models.values())
        shared = {pm for pm in pairs if pairs.count(pm) > 1}
        self._prefix = {}
        for name, (provider, model) in self._models.items():
            prefix = f"{safe_name(provider)}_{safe_name(model)}"
            self._prefix[name] = prefix + (f"_{safe_name(name)}" if (provider, model) in shared
                                           else "")
        self._seen: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._unknown: dict[str, dict[str, list[ClipEvaluation]]] = defaultdict(dict)
        self._unknown_clips: dict[str, int] = defaultdict(int)

    def add(self, judgments: Mapping[str, pd.DataFrame], clips: pd.DataFrame,
            trajectories: pd.DataFrame) -> dict[str, JudgeDetailFile]:
        """File name -> content for this batch's trajectories."""
        info = trajectory_info(trajectories)
        prompts = _Prompts(clips, trajectories)
        clip_rows = {(str(c["trajectory_id"]), int(c["clip_index"])): c
                     for c in records(clips, ["trajectory_id", "clip_index", "content",
                                              "tool_call"])}
        clip_counts: dict[str, int] = defaultdict(int)
        for tid, _ in clip_rows:
            clip_counts[tid] += 1
        for tid, count in clip_counts.items():
            if tid not in info:
                self._unknown_clips[tid] += count
        tables = {name: records(t, _ROW_COLUMNS) for name, t in judgments.items() if len(t)}
        order = {tid: i for i, tid in enumerate(info)}
        files: dict[str, JudgeDetailFile] = {}
        for name, rows in tables.items():
            by_traj: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for row in rows:
                by_traj[str(row["trajectory_id"])].append(row)
            for tid in sorted(by_traj, key=lambda t: (order.get(t, len(order)), t)):
                prompts.assessed(tid, by_traj[tid])
                ordered = sorted(by_traj[tid], key=lambda r: (int(r["clip_index"]),
                                                              str(r["evaluation_kind"])))
                evaluations = [_evaluation(r, clip_rows.get((tid, int(r["clip_index"]))),
                                           prompts) for r in ordered]
                if tid not in info:
                    self._unknown[name].setdefault(tid, []).extend(evaluations)
                    continue
                filename, content = self._file(name, info[tid], evaluations,
                                               clip_counts.get(tid, 0))
                files[filename] = content
        return files

    def rest(self) -> dict[str, JudgeDetailFile]:
        """The files of trajectories no batch's trajectories held (see the class)."""
        files: dict[str, JudgeDetailFile] = {}
        for name in self._models:
            for tid in sorted(self._unknown.get(name, {})):
                evaluations = sorted(self._unknown[name][tid],
                                     key=lambda e: (e.clip_index, e.evaluation_kind))
                filename, content = self._file(
                    name, TrajectoryInfo(trajectory_id=tid, task_id=tid), evaluations,
                    self._unknown_clips.get(tid, 0))
                files[filename] = content
        return files

    def _file(self, name: str, traj: TrajectoryInfo, evaluations: list[ClipEvaluation],
              total_clips: int) -> tuple[str, JudgeDetailFile]:
        provider, model = self._models[name]
        seen = self._seen[name]
        seen[traj.task_id] += 1
        suffix = "" if seen[traj.task_id] == 1 else f"__{seen[traj.task_id]}"
        filename = f"{self._prefix[name]}_{safe_name(traj.task_id)}{suffix}_eva.json"
        return filename, JudgeDetailFile(
            task_id=traj.task_id, model_name=f"{provider}_{model}", total_clips=total_clips,
            evaluations=[e for e in evaluations if e.evaluation_kind == EVAL_KIND_CLIP],
            react_evaluations=[e for e in evaluations
                               if e.evaluation_kind in REACT_EVALUATIONS],
            assessments=[e for e in evaluations if e.evaluation_kind in ASSESSMENT_KINDS],
            judge=name, trajectory_id=traj.trajectory_id, batch=traj.batch)


def judge_detail_files(judgments: Mapping[str, pd.DataFrame], clips: pd.DataFrame,
                       trajectories: pd.DataFrame) -> dict[str, JudgeDetailFile]:
    """File name -> content, for every judge and every trajectory it has rows for.

    Names follow the original's pattern; a judge sharing provider and model with another
    gets its name added, and a task id met twice (duplicate ids are kept) gets ``__2``,
    ``__3``... in trajectory order, so no file overwrites another.
    """
    builder = JudgeDetails(judge_models(judgments))
    return {**builder.add(judgments, clips, trajectories), **builder.rest()}


def judge_detail_text(content: JudgeDetailFile) -> str:
    """One file's text."""
    return json.dumps(content.model_dump(), ensure_ascii=False, indent=2) + "\n"


def write_judge_details(folder: Path, files: Mapping[str, JudgeDetailFile]) -> list[str]:
    """Write the files into ``folder`` (which the caller swaps in whole); their names."""
    for filename, content in files.items():
        (folder / filename).write_text(judge_detail_text(content), "utf-8")
    return sorted(files)


def judgment_tables(tables: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The judges' tables among a run's exports (``judgments__<judge>``), by judge name."""
    prefix = "judgments__"
    return {name[len(prefix):]: t for name, t in tables.items() if name.startswith(prefix)}


__all__: Sequence[str] = ["JUDGE_DETAILS_DIR", "JudgeDetailFile", "JudgeDetails",
                          "judge_detail_files", "judge_detail_text", "judge_models",
                          "judgment_tables", "write_judge_details"]
