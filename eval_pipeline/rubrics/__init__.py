"""Rubrics and prompt templates, each with a version that is a hash of its text.

The versions feed the judge assets' ``code_version`` and the cache key, so editing a rubric
or a template makes exactly the judgments that used it stale in the Dagster UI.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache, lru_cache
from importlib import resources
from typing import Final, Literal

import yaml
from pydantic import BaseModel

from eval_pipeline.models import GENERIC_TOOL_TYPE


def text_version(*texts: str) -> str:
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()
    return digest[:12]


class Rubric(BaseModel):
    tool_type: str
    title: str
    metrics: dict[str, str]

    @property
    def metric_names(self) -> list[str]:
        return list(self.metrics)

    @property
    def version(self) -> str:
        return text_version(self.model_dump_json())

    def criteria_text(self) -> str:
        lines = []
        for i, (name, desc) in enumerate(self.metrics.items(), start=1):
            label = name.replace("_", " ").title()
            lines.append(f"{i}. {label} (0-1): {desc}")
        return "\n".join(lines)

    def json_example(self, summary: str = "One sentence summary of what this clip did and "
                     "the result") -> str:
        example = {
            "scores": dict.fromkeys(self.metrics, 0.0),
            "summary": summary,
            "reasoning": "Detailed explanation of your evaluation and scoring rationale",
        }
        return json.dumps(example, indent=4)


def _read(name: str) -> str:
    return resources.files("eval_pipeline").joinpath(f"rubrics/{name}").read_text("utf-8")


@lru_cache(maxsize=1)
def rubrics() -> dict[str, Rubric]:
    data = yaml.safe_load(_read("rubrics.yaml"))
    return {k: Rubric(tool_type=k, title=v["title"], metrics=v["metrics"]) for k, v in data.items()}


def rubric_for(tool_type: str) -> Rubric:
    table = rubrics()
    return table.get(tool_type) or table[GENERIC_TOOL_TYPE]


@cache
def template(name: str) -> str:
    return _read(f"templates/{name}.txt")


def templates_version() -> str:
    """One version over the clip and ReAct templates and rubrics: the ``template_version``
    of those rows and part of their cache key.

    The ReAct templates are included so editing one of them marks every judge stale, just
    like editing a rubric does. The assessments' templates have their own version
    (:func:`assessment_templates_version`), so editing them re-asks only the assessments;
    :func:`all_templates_version` covers both, for the judges' code versions.
    """
    return text_version(
        template("system"), template("clip"), *(r.version for r in rubrics().values()),
        *(template(name) for name in REACT_TEMPLATE_FILES),
        *(e.model_dump_json() for e in REACT_EVALUATIONS.values()),
    )


def fence(text: str) -> str:
    """Untrusted text as one data block it cannot leave.

    Trajectories are written by agents that read the web; a clip may imitate the prompt's
    delimiters ("[END DATA]"), the answer format, or say "ignore the instructions". Each
    field goes between tags named after a hash of its own text, which the text cannot
    contain (checked, and lengthened in the unlikely case), and the system prompt says
    that such blocks are evidence, never instructions. Deterministic, so a rerun's prompt,
    and its cache key, do not change.
    """
    tag = "data-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    while f"</{tag}" in text:
        tag += "x"
    return f"<{tag}>\n{text}\n</{tag}>"


NO_FINAL_ANSWER: Final = (
    "(none: the trajectory ended after its last tool result without a final answer. Score "
    "task completion and the other criteria on what the earlier clips achieved.)")


def render_clip_prompt(
    *, tool_type: str, task_description: str, previous_context: str, clip_content: str
) -> tuple[str, str]:
    """Return (system, user) prompts for scoring one clip on its tool type's rubric.

    The closing clip of a run that stopped without answering is empty: the prompt says so
    in our words, outside any data block, so the judge scores task completion on what the
    earlier clips (its context) achieved instead of guessing at an empty block."""
    rubric = rubric_for(tool_type)
    no_answer = tool_type == "final" and not clip_content.strip()
    user = template("clip").format(
        rubric_title=rubric.title,
        task_description=fence(task_description),
        previous_context=fence(previous_context or "(none)"),
        clip_content=NO_FINAL_ANSWER if no_answer else fence(clip_content),
        tool_type=tool_type,
        criteria=rubric.criteria_text(),
        json_example=rubric.json_example(),
    )
    return template("system").strip(), user


# -- ReAct evaluations (thought-to-tool, query-to-thought, sequence optimality) -----------

EvaluationKind = Literal["clip_rubric", "thought_to_tool", "query_to_thought",
                         "sequence_optimality", "category_assessment",
                         "trajectory_assessment"]
EVAL_KIND_CLIP: Final = "clip_rubric"
EVAL_THOUGHT_TO_TOOL: Final = "thought_to_tool"
EVAL_QUERY_TO_THOUGHT: Final = "query_to_thought"
EVAL_SEQUENCE_OPTIMALITY: Final = "sequence_optimality"
# The original tool's "Enhanced Category Assessment" and "Final Trajectory Scoring": made
# after a trajectory's clips are judged, from the clips and their evaluations (see the
# assessments section at the end of this module).
EVAL_CATEGORY_ASSESSMENT: Final = "category_assessment"
EVAL_TRAJECTORY_ASSESSMENT: Final = "trajectory_assessment"
ASSESSMENT_KINDS: tuple[EvaluationKind, ...] = (EVAL_CATEGORY_ASSESSMENT,
                                                EVAL_TRAJECTORY_ASSESSMENT)
ALL_EVALUATIONS: tuple[EvaluationKind, ...] = (
    EVAL_KIND_CLIP, EVAL_THOUGHT_TO_TOOL, EVAL_QUERY_TO_THOUGHT, EVAL_SEQUENCE_OPTIMALITY,
    *ASSESSMENT_KINDS,
)
TRAJECTORY_CLIP_INDEX = -1
TRAJECTORY_TOOL_TYPE = "trajectory"
REACT_TEMPLATE_FILES = ("react_system", "react_response", EVAL_THOUGHT_TO_TOOL,
                        EVAL_QUERY_TO_THOUGHT, EVAL_SEQUENCE_OPTIMALITY)
# The seed shortens each action input to 50 characters; results are added here so the
# judge can see failed calls and retries, both shortened to stay cheap on long trajectories.
SEQUENCE_INPUT_CHARS = 200
SEQUENCE_RESULT_CHARS = 200


class ReactEvaluation(BaseModel):
    """One ReAct evaluation kind: its template, its two labels and its single metric.

    Every kind answers in the one shared shape, the seed's: an ``explanation`` and a
    ``label``. The row's single metric, named after the kind, follows from the label
    (``positive`` 1.0, ``negative`` 0.0), so providers, validation, the cache and averaging
    need no per-kind code.
    """

    kind: str
    title: str
    positive: str
    negative: str

    @property
    def metric(self) -> str:
        return self.kind

    @property
    def labels(self) -> list[str]:
        return [self.positive, self.negative]

    def score_for(self, label: str) -> float:
        return 1.0 if label == self.positive else 0.0

    def json_example(self) -> str:
        # The seed's answer (EXPLANATION, then LABEL) as JSON; the score follows from the
        # label, so the reply does not carry one.
        example = {
            "explanation": "EXPLANATION: your step-by-step analysis",
            "label": self.positive,
        }
        return json.dumps(example, indent=4)


REACT_EVALUATIONS: dict[str, ReactEvaluation] = {
    EVAL_THOUGHT_TO_TOOL: ReactEvaluation(
        kind=EVAL_THOUGHT_TO_TOOL, title="Thought-to-Tool", positive="correct",
        negative="incorrect"),
    EVAL_QUERY_TO_THOUGHT: ReactEvaluation(
        kind=EVAL_QUERY_TO_THOUGHT, title="Query-to-Thought", positive="correct",
        negative="incorrect"),
    EVAL_SEQUENCE_OPTIMALITY: ReactEvaluation(
        kind=EVAL_SEQUENCE_OPTIMALITY, title="Sequence Optimality", positive="optimal",
        negative="suboptimal"),
}


def _react_user_prompt(kind: str, **fields: str) -> tuple[str, str]:
    spec = REACT_EVALUATIONS[kind]
    response_format = template("react_response").format(
        positive=spec.positive, negative=spec.negative, metric=spec.metric,
        json_example=spec.json_example(),
    ).strip()
    user = template(kind).format(response_format=response_format,
                                 **{name: fence(value) for name, value in fields.items()})
    return template("react_system").strip(), user


def render_thought_to_tool_prompt(*, original_question: str, thought: str, tool_call: str,
                                  action_input: str, tool_definitions: str) -> tuple[str, str]:
    """(system, user) for the seed's Thought-to-Tool question on one tool clip."""
    return _react_user_prompt(
        EVAL_THOUGHT_TO_TOOL, original_question=original_question,
        thought=thought or "(no thought stated)", tool_call=tool_call,
        action_input=action_input or "(none)", tool_definitions=tool_definitions)


def render_query_to_thought_prompt(*, original_question: str, thought: str
                                   ) -> tuple[str, str]:
    """(system, user) for the seed's Query-to-Thought question on one clip's thought."""
    return _react_user_prompt(EVAL_QUERY_TO_THOUGHT, original_question=original_question,
                              thought=thought)


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def render_sequence_prompt(*, original_question: str,
                           steps: list[tuple[str, str, str, str]]) -> tuple[str, str]:
    """(system, user) for the seed's Sequence Optimality question on a whole trajectory.

    ``steps`` are the tool clips in order as (thought, tool, input, result); the seed's
    ``Step i: ...`` lines, with the input and result shortened.
    """
    if steps:
        thoughts = "\n".join(f"Step {i}: {_short(t, 1000) or '(no thought stated)'}"
                             for i, (t, _tool, _inp, _res) in enumerate(steps, start=1))
        tools = "\n".join(
            f"Step {i}: {tool} - {_short(inp, SEQUENCE_INPUT_CHARS) or '{}'}"
            f" -> Result: {_short(res, SEQUENCE_RESULT_CHARS) or '(no result)'}"
            for i, (_t, tool, inp, res) in enumerate(steps, start=1))
    else:
        thoughts = tools = "(the agent made no tool call)"
    return _react_user_prompt(EVAL_SEQUENCE_OPTIMALITY, original_question=original_question,
                              thought_sequence=thoughts, tool_sequence=tools)


def tool_definitions(tools: list[tuple[str, str]]) -> str:
    """The seed's ``{tool_definitions}``: one ``name: description`` line per tool seen.

    The registry has no docstrings, so a tool is described by its tool type's rubric title.
    """
    seen: dict[str, str] = {}
    for name, tool_type in tools:
        if name and name not in seen:
            seen[name] = f"{rubric_for(tool_type).title} (tool type: {tool_type})"
    if not seen:
        return "(no tools seen in this trajectory)"
    return "".join(f"\n{name}: {desc}\n" for name, desc in seen.items())


# -- Category and trajectory assessments ---------------------------------------------------
#
# The original tool assesses each tool category after its clips ("Enhanced Category
# Assessment") and then the whole trajectory from all clips and the category assessments
# ("Final Trajectory Scoring"). Its README names both without their metrics or prompts; the
# rubrics are ours (``rubrics/assessments.yaml``) and the templates ``category.txt`` and
# ``trajectory.txt``, in the shape of the clip template. Both answer like a clip rubric
# (scores per metric, summary, reasoning), so providers, validation, the cache, averaging
# and failed rows need no code of their own.

ASSESSMENT_TEMPLATE_FILES = ("assessment_system", "category", "trajectory")
ASSESSMENT_CLIP_CHARS = 4000
"""Characters of one clip's content shown in an assessment prompt (head and tail kept
around a marker, as :func:`eval_pipeline.judges.requests.cut_text`): the trajectory prompt
shows every clip, and each clip's own evaluation is there beside it."""


@lru_cache(maxsize=1)
def assessment_rubrics() -> dict[str, Rubric]:
    """``category_assessment`` and ``trajectory_assessment`` -> their rubric."""
    data = yaml.safe_load(_read("assessments.yaml"))
    missing = [k for k in ASSESSMENT_KINDS if k not in data]
    if missing:
        raise ValueError(f"rubrics/assessments.yaml lacks {missing}")
    return {k: Rubric(tool_type=k, title=data[k]["title"], metrics=data[k]["metrics"])
            for k in ASSESSMENT_KINDS}


def assessment_templates_version() -> str:
    """The version of the assessment rows: their templates, rubrics and system prompt."""
    return text_version(*(template(name) for name in ASSESSMENT_TEMPLATE_FILES),
                        *(r.version for r in assessment_rubrics().values()))


def all_templates_version() -> str:
    """Every template and rubric a judge may use: feeds the judges' code versions, so
    editing any of them marks the judges that use it stale in the UI."""
    return text_version(templates_version(), assessment_templates_version())


def render_category_prompt(*, category: str, task_description: str, clips_text: str
                           ) -> tuple[str, str]:
    """(system, user) for assessing one tool category of a trajectory.

    ``clips_text`` is the category's clips in order, each with its own evaluation, already
    rendered (untrusted parts fenced) by :mod:`eval_pipeline.judges.assessments`.
    """
    rubric = assessment_rubrics()[EVAL_CATEGORY_ASSESSMENT]
    user = template("category").format(
        category=category,
        task_description=fence(task_description),
        clips=clips_text,
        criteria=rubric.criteria_text(),
        json_example=rubric.json_example(
            "One sentence on how the agent used this tool category"),
    )
    return template("assessment_system").strip(), user


def render_trajectory_prompt(*, task_description: str, clips_text: str,
                             categories_text: str) -> tuple[str, str]:
    """(system, user) for the final assessment of a whole trajectory."""
    rubric = assessment_rubrics()[EVAL_TRAJECTORY_ASSESSMENT]
    user = template("trajectory").format(
        task_description=fence(task_description),
        clips=clips_text,
        categories=categories_text,
        criteria=rubric.criteria_text(),
        json_example=rubric.json_example("One sentence on what the trajectory achieved"),
    )
    return template("assessment_system").strip(), user
