"""The offline default judge: deterministic rules over observable signals, not an LLM.

It exists so the whole graph runs on a fresh machine with no key and no network, and so
tests have a judge whose every score can be traced to a signal. Its reasoning names the
signals it used; its provider and model say ``heuristic`` everywhere a score is shown.

The category and trajectory assessments are figures over the clips the request carries
(their signals and the clips' own evaluation scores), by the formulas in
``_ASSESSMENT_RULES``, which each row's reasoning repeats. A clip whose evaluation failed
still counts by its signals; its missing score is left out of the means, never filled in.
There is no category request without clips, so no category is scored from nothing.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from itertools import pairwise

from eval_pipeline.judges.base import ClipResult, ClipView, JudgeReply, JudgeRequest
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.models import FINAL_TOOL_TYPE
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.rubrics import (
    ASSESSMENT_KINDS,
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_QUERY_TO_THOUGHT,
    EVAL_SEQUENCE_OPTIMALITY,
    EVAL_THOUGHT_TO_TOOL,
    EVAL_TRAJECTORY_ASSESSMENT,
    REACT_EVALUATIONS,
)

_ERROR = re.compile(
    r"traceback \(most recent call last\)|\b\w*error\b|\bexception\b|\bfailed\b|\bfailure\b"
    r"|\btimed? ?out\b|\binvalid\b|\bnot found\b|错误|失败|异常|超时",
    re.IGNORECASE,
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s*\w+Error: ", re.MULTILINE)
_URL = re.compile(r"https?://\S+")
_WORD = re.compile(r"[A-Za-z]{4,}|[\u4e00-\u9fff]")
_CODE_KEYS = ("code", "command", "script", "source")


@dataclass(frozen=True)
class Signals:
    """What can be seen in a clip without understanding it."""

    has_thought: bool
    has_call: bool
    input_is_json: bool
    code_parses: bool | None
    result_present: bool
    result_empty: bool
    result_error: bool
    result_traceback: bool
    result_urls: int
    repeats_earlier: bool
    task_overlap: float
    has_answer: bool
    answer_empty: bool
    thought_mentions_result: bool

    def describe(self) -> list[str]:
        notes = [
            "reasoning precedes the call" if self.has_thought else "no reasoning before the step",
        ]
        if self.has_call:
            notes.append("input is well-formed JSON" if self.input_is_json
                         else "input is not JSON")
        if self.code_parses is not None:
            notes.append("the code parses" if self.code_parses else "the code does not parse")
        if self.has_call:
            if not self.result_present:
                notes.append("no result follows the call")
            elif self.result_empty:
                notes.append("the result is empty")
            elif self.result_traceback:
                notes.append("the result holds a traceback")
            elif self.result_error:
                notes.append("the result reports an error")
            else:
                notes.append("the result holds output")
            if self.result_urls:
                notes.append(f"the result cites {self.result_urls} URL(s)")
            if self.repeats_earlier:
                notes.append("the call repeats an earlier call")
        notes.append(f"overlap with the task's words {self.task_overlap:.2f}")
        if not self.has_call:
            if self.has_answer:
                notes.append("an empty answer tag" if self.answer_empty
                             else "the answer tag is present")
            else:
                notes.append("no answer tag")
        return notes


def _code_of(action_input: str) -> str:
    try:
        value = json.loads(action_input)
    except (json.JSONDecodeError, TypeError):
        return action_input
    if isinstance(value, dict):
        for key in _CODE_KEYS:
            if isinstance(value.get(key), str):
                return value[key]
    return action_input


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return False
    return True


def _overlap(task: str, text: str) -> float:
    task_words = {w.lower() for w in _WORD.findall(task)}
    if not task_words:
        return 0.0
    seen = {w.lower() for w in _WORD.findall(text)}
    return len(task_words & seen) / len(task_words)


def observe(request: JudgeRequest) -> Signals:
    return observe_clip(request.tool_type, request.task_description, request.clip)


def observe_clip(tool_type: str, task_description: str, clip: ClipView) -> Signals:
    """The signals of one clip of ``tool_type`` in a trajectory on ``task_description``."""
    has_call = bool(clip.tool_call)
    result = clip.result.strip()
    code_parses = None
    if tool_type == "microsandbox" and has_call:
        code_parses = _parses(_code_of(clip.action_input))
    signature = f"{clip.tool_name}:{' '.join(clip.action_input.split())}"
    result_words = {w.lower() for w in _WORD.findall(result)}
    thought_words = {w.lower() for w in _WORD.findall(clip.thought)}
    return Signals(
        has_thought=bool(clip.thought.strip()),
        has_call=has_call,
        input_is_json=_is_json(clip.action_input),
        code_parses=code_parses,
        result_present=bool(clip.result) or "<result" in clip.content,
        result_empty=has_call and not result,
        result_error=bool(_ERROR.search(result[:4000])),
        result_traceback=bool(_TRACEBACK.search(result)),
        result_urls=len(_URL.findall(result)),
        repeats_earlier=has_call and signature in clip.earlier_calls,
        task_overlap=_overlap(task_description,
                              clip.action_input + " " + clip.thought + " " + clip.answer),
        has_answer=clip.has_answer,
        answer_empty=clip.has_answer and not clip.answer.strip(),
        thought_mentions_result=bool(result_words & thought_words),
    )


def _clamp(x: float) -> float:
    return round(min(1.0, max(0.0, x)), 3)


def _outcome(s: Signals) -> float:
    """How well the call went, from what its result shows."""
    if not s.result_present or s.result_empty:
        return 0.2
    if s.result_traceback:
        return 0.15
    if s.result_error:
        return 0.35
    return 0.9


def score_signals(tool_type: str, metrics: list[str], s: Signals) -> dict[str, float]:
    outcome = _outcome(s)
    thought = 0.15 if s.has_thought else 0.0
    repeat = 0.3 if s.repeats_earlier else 0.0
    relevance = 0.4 + 0.6 * min(1.0, s.task_overlap * 2)
    if tool_type == FINAL_TOOL_TYPE:
        answered = s.has_answer and not s.answer_empty
        base = {
            "task_completion": 0.85 if answered else 0.1,
            "response_quality": (0.5 + 0.4 * relevance) if answered else 0.1,
            "reasoning_coherence": 0.5 + (0.35 if s.has_thought else 0.0) + 0.15 * answered,
            "problem_resolution": 0.8 if answered else 0.2,
        }
        generic_value = sum(base.values()) / len(base)
        return {m: _clamp(base.get(m, generic_value)) for m in metrics}
    code = 0.5 if s.code_parses is None else (0.85 if s.code_parses else 0.1)
    if s.result_traceback:
        code = min(code, 0.3)
    well_formed = 0.85 if s.input_is_json or s.code_parses else 0.55
    sources = min(1.0, 0.3 + 0.1 * s.result_urls) if outcome > 0.5 else 0.2
    integration = (0.4 + thought + (0.3 if s.thought_mentions_result else 0.0)) * (
        1.0 if outcome > 0.5 else 0.6
    )
    table = {
        # microsandbox
        "code_correctness": code,
        "computational_efficiency": 0.6 + thought - repeat if outcome > 0.5 else 0.35 - repeat,
        "error_handling": 0.8 if not s.result_error else 0.3,
        "result_interpretation": integration,
        # deepsearch
        "search_depth_appropriateness": outcome * 0.8 + thought,
        "query_refinement_quality": relevance - repeat,
        "source_diversity": sources,
        "synthesis_quality": integration,
        # browser_use
        "query_relevance": relevance - repeat,
        "information_extraction_quality": outcome,
        "navigation_efficiency": 0.75 - repeat if outcome > 0.5 else 0.35 - repeat,
        "content_integration": integration,
        # search_tool
        "tool_selection_accuracy": 0.5 + thought + 0.2 * (outcome > 0.5) - repeat,
        "parameter_optimization": well_formed - repeat,
        "fallback_strategy": 0.7 if outcome > 0.5 else 0.3,
        "meta_reasoning_quality": 0.4 + 2 * thought,
        # generic and other tool families
        "parameter_quality": well_formed - repeat,
        "result_utilization": integration,
        "progress_contribution": outcome - repeat,
        "tool_use_quality": 0.5 + thought + 0.2 * (outcome > 0.5) - repeat,
        "information_relevance": relevance * (1.0 if outcome > 0.5 else 0.5),
        "content_extraction": outcome,
        "goal_achievement": outcome - repeat,
        "interaction_quality": well_formed * (1.0 if outcome > 0.5 else 0.6),
        "source_quality": sources,
        "information_synthesis": integration,
    }
    fallback = (outcome + relevance) / 2 - repeat
    return {m: _clamp(table.get(m, fallback)) for m in metrics}


def _summary(request: JudgeRequest, s: Signals) -> str:
    clip = request.clip
    if request.tool_type == FINAL_TOOL_TYPE:
        if s.has_answer and not s.answer_empty:
            return "The agent closed the trajectory with an answer."
        return "The trajectory ended without an answer."
    tool = clip.tool_name or request.tool_type
    if not s.result_present:
        state = "got no result"
    elif s.result_empty:
        state = "got an empty result"
    elif s.result_traceback:
        state = "got a traceback"
    elif s.result_error:
        state = "got an error"
    else:
        state = "got output"
    repeat = " repeating an earlier call" if s.repeats_earlier else ""
    return f"The agent called {tool}{repeat} and {state}."


# -- ReAct evaluations: a label from named signals, never an LLM's judgement -------------

HEURISTIC_NOTE = "Heuristic judge (rule-based, not an LLM)."
# Share of the task's words a thought must repeat to count as aligned with the task.
QUERY_OVERLAP_MIN = 0.2
# ... or this many shared words, for long task descriptions.
QUERY_SHARED_WORDS_MIN = 3
BETA_THRESHOLD = PreprocessConfig.model_fields["beta_threshold"].default
_RULES = {
    EVAL_THOUGHT_TO_TOOL: "'correct' when a thought precedes the call, names the tool or "
    "shares a key term with the input, and the input is well-formed",
    EVAL_QUERY_TO_THOUGHT: "'correct' when the thought repeats enough of the task's words",
    EVAL_SEQUENCE_OPTIMALITY: "'optimal' when no call repeats the previous one, no failed "
    "call is retried identically, no call follows an answer and the call count is within "
    "the beta threshold",
}
_NAME_PART = re.compile(r"[A-Za-z]{3,}")
_STOP = frozenset({"that", "this", "with", "from", "have", "will", "what", "which", "then",
                   "than", "into", "need", "should", "could", "would", "there", "their",
                   "about", "true", "false", "null", "none"})


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)} - _STOP


def _input_values(action_input: str) -> str:
    """The input's values as text (JSON keys are schema, not intent)."""
    try:
        value = json.loads(action_input)
    except (json.JSONDecodeError, TypeError):
        return action_input
    parts: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif node is not None:
            parts.append(str(node))

    walk(value)
    return " ".join(parts)


def _input_well_formed(request: JudgeRequest) -> tuple[bool, str]:
    text = request.clip.action_input.strip()
    if not text:
        return False, "the input is empty"
    if text[0] in "[{":
        if not _is_json(text):
            return False, "the input looks like JSON but does not parse"
        if request.tool_type == "microsandbox" and not _parses(_code_of(text)):
            return False, "the input's code does not parse"
        return True, "the input is well-formed JSON"
    if request.tool_type == "microsandbox":
        return (_parses(text), "the input's code parses" if _parses(text)
                else "the input's code does not parse")
    return True, "the input is non-empty text"


def _signature(clip: ClipView) -> str:
    return f"{clip.tool_name}:{' '.join(clip.action_input.split())}"


def _failed(clip: ClipView) -> bool:
    result = clip.result.strip()
    return not result or bool(_ERROR.search(result[:4000]))


def react_verdict(request: JudgeRequest) -> tuple[bool, str, list[str]]:
    """(positive?, summary, signals) for a ReAct request, from observable signals only."""
    clip = request.clip
    kind = request.evaluation_kind
    if kind == EVAL_THOUGHT_TO_TOOL:
        tool = clip.tool_name or request.tool_type
        thought = clip.thought.lower()
        names = {p.lower() for p in _NAME_PART.findall(tool)} | {tool.lower()}
        names_tool = bool(thought) and any(n in thought for n in names)
        input_terms = _words(_input_values(clip.action_input))
        shared = sorted(input_terms & _words(clip.thought))
        well_formed, form_note = _input_well_formed(request)
        signals = [
            "a thought precedes the call" if thought.strip() else "no thought precedes the call",
            f"the thought names the tool {tool!r}" if names_tool
            else f"the thought does not name the tool {tool!r}",
            f"the thought shares {len(shared)} key term(s) with the input"
            + (f" ({', '.join(shared[:5])})" if shared else ""),
            form_note,
        ]
        ok = bool(thought.strip()) and (names_tool or bool(shared)) and well_formed
        summary = (f"The call to {tool} follows from the stated thought." if ok else
                   f"The call to {tool} is not supported by the stated thought or its input.")
        return ok, summary, signals
    if kind == EVAL_QUERY_TO_THOUGHT:
        task_words = _words(request.task_description)
        common = task_words & _words(clip.thought)
        overlap = len(common) / len(task_words) if task_words else 0.0
        ok = overlap >= QUERY_OVERLAP_MIN or len(common) >= QUERY_SHARED_WORDS_MIN
        signals = [f"the thought shares {len(common)} of the task's {len(task_words)} words "
                   f"(overlap {overlap:.2f}; aligned at >= {QUERY_OVERLAP_MIN} or >= "
                   f"{QUERY_SHARED_WORDS_MIN} words)"]
        summary = ("The thought works on the task's request." if ok else
                   "The thought does not visibly address the task's request.")
        return ok, summary, signals
    if kind == EVAL_SEQUENCE_OPTIMALITY:
        calls = request.sequence
        signatures = [_signature(c) for c in calls]
        consecutive = sum(1 for a, b in pairwise(signatures) if a == b)
        failed_before: set[str] = set()
        retries = 0
        for call, sig in zip(calls, signatures, strict=True):
            if sig in failed_before:
                retries += 1
            if _failed(call):
                failed_before.add(sig)
        after_answer = sum(1 for c in calls if c.has_answer)
        # The threshold the run preprocessed with (--beta-threshold), not the default.
        limit = BETA_THRESHOLD if request.beta_threshold is None else request.beta_threshold
        too_many = len(calls) > limit
        signals = [
            f"{len(calls)} tool call(s) (beta threshold {limit})"
            + (", over the threshold" if too_many else ""),
            f"{consecutive} consecutive identical call(s)",
            f"{retries} identical retry(ies) of a failed call",
            f"{after_answer} tool call(s) after an answer",
        ]
        ok = not (consecutive or retries or after_answer or too_many)
        summary = ("No redundant step: no repeated or retried identical call, no call after "
                   "the answer." if ok else "The sequence has redundant or misplaced steps.")
        return ok, summary, signals
    raise ValueError(f"not a ReAct evaluation kind: {kind!r}")


# -- Category and trajectory assessments: figures over the clips, from signals and the
# clips' own evaluations, never an LLM's judgement -----------------------------------------

_ASSESSMENT_RULES = {
    EVAL_CATEGORY_ASSESSMENT: (
        "tool_effectiveness = share of the category's calls whose result holds output (not "
        "empty, no error); usage_appropriateness = mean over its calls of 0.5 for a thought "
        "stated before the call + 0.5 for not repeating an earlier call; result_quality = "
        "mean of the clips' own evaluation scores over the clips whose evaluation succeeded "
        "(none succeeded: the mean outcome of the results, 0.9 output, 0.35 error, 0.15 "
        "traceback, 0.2 none or empty); task_contribution = mean over its calls of "
        "min(1, 2 x overlap with the task's words) x (1 if the call returned output else "
        "0.5)"),
    EVAL_TRAJECTORY_ASSESSMENT: (
        "task_completion = 0.85 when the trajectory ends with a non-empty answer, else 0.1; "
        "strategy_coherence = mean over all clips of 0.5 for stated reasoning + 0.5 for not "
        "repeating an earlier call; tool_usage_efficiency = share of tool calls that "
        "returned output without repeating an earlier call (1.0 when no tool was called: "
        "nothing was wasted); answer_quality = mean of the final clip's own evaluation "
        "scores when it succeeded, else task_completion's value. The category assessments "
        "are not used: they restate the same signals"),
}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _call_worked(s: Signals) -> bool:
    return _outcome(s) > 0.5


def category_assessment_scores(task_description: str, clips: list[ClipResult]
                               ) -> tuple[dict[str, float], list[str]]:
    """The heuristic's category assessment of ``clips`` (the category's, at least one),
    and the signals it counted. See ``_ASSESSMENT_RULES`` for the formulas."""
    if not clips:
        raise ValueError("a category assessment needs at least one clip")
    signals = [observe_clip(c.tool_type, task_description, c.clip) for c in clips]
    judged = [_mean(list(c.scores.values())) for c in clips
              if c.status == "ok" and c.scores]
    worked = [_call_worked(s) for s in signals]
    scores = {
        "tool_effectiveness": _mean([float(w) for w in worked]),
        "usage_appropriateness": _mean([0.5 * s.has_thought + 0.5 * (not s.repeats_earlier)
                                        for s in signals]),
        "result_quality": _mean(judged) if judged else _mean([_outcome(s) for s in signals]),
        "task_contribution": _mean([min(1.0, 2 * s.task_overlap) * (1.0 if w else 0.5)
                                    for s, w in zip(signals, worked, strict=True)]),
    }
    notes = [f"{len(clips)} call(s)", f"{sum(worked)} returned output",
             f"{sum(s.has_thought for s in signals)} preceded by a thought",
             f"{sum(s.repeats_earlier for s in signals)} repeat an earlier call",
             f"{len(judged)} of {len(clips)} clip evaluations succeeded"]
    return {m: _clamp(v) for m, v in scores.items()}, notes


def trajectory_assessment_scores(task_description: str, clips: list[ClipResult]
                                 ) -> tuple[dict[str, float], list[str]]:
    """The heuristic's assessment of a whole trajectory from its clips (at least one) and
    their evaluations. See ``_ASSESSMENT_RULES`` for the formulas."""
    if not clips:
        raise ValueError("a trajectory assessment needs at least one clip")
    signals = [observe_clip(c.tool_type, task_description, c.clip) for c in clips]
    closing = clips[-1] if clips[-1].tool_type == FINAL_TOOL_TYPE else None
    answered = closing is not None and closing.clip.has_answer \
        and bool(closing.clip.answer.strip())
    completion = 0.85 if answered else 0.1
    calls = [s for c, s in zip(clips, signals, strict=True) if c.tool_type != FINAL_TOOL_TYPE]
    useful = [_call_worked(s) and not s.repeats_earlier for s in calls]
    final_judged = (closing is not None and closing.status == "ok" and bool(closing.scores))
    scores = {
        "task_completion": completion,
        "strategy_coherence": _mean([0.5 * s.has_thought + 0.5 * (not s.repeats_earlier)
                                     for s in signals]),
        "tool_usage_efficiency": _mean([float(u) for u in useful]) if useful else 1.0,
        "answer_quality": _mean(list(closing.scores.values()))
        if final_judged and closing is not None else completion,
    }
    notes = ["the trajectory ends with an answer" if answered
             else "the trajectory ends without an answer",
             f"{len(calls)} tool call(s), {sum(useful)} returned output without repeating "
             "an earlier call",
             f"{sum(s.has_thought for s in signals)} of {len(clips)} clips state reasoning",
             "the final clip's evaluation succeeded" if final_judged
             else "no successful evaluation of a final clip"]
    return {m: _clamp(v) for m, v in scores.items()}, notes


def _assessment_summary(request: JudgeRequest, notes: list[str]) -> str:
    if request.evaluation_kind == EVAL_CATEGORY_ASSESSMENT:
        return f"The agent used {request.tool_type}: {notes[0]}, {notes[1]}."
    return f"{notes[1][:1].upper()}{notes[1][1:]}; {notes[0]}."


class HeuristicJudge:
    """Scores from signals; ``provider`` and ``model`` say heuristic, never an LLM."""

    provider = "heuristic"
    reply_mode = "heuristic"
    reply_mode_note: str | None = None

    def __init__(self, config: JudgeConfig):
        self.name = config.name
        self.model = config.model if config.model else "heuristic-v1"

    async def score(self, request: JudgeRequest) -> JudgeReply:
        if request.evaluation_kind in REACT_EVALUATIONS:
            return self._react(request)
        if request.evaluation_kind in ASSESSMENT_KINDS:
            return self._assess(request)
        signals = observe(request)
        scores = score_signals(request.tool_type, request.metrics, signals)
        reasoning = "Heuristic judge (rule-based, not an LLM). Signals: " + "; ".join(
            signals.describe()
        ) + "."
        summary = _summary(request, signals)
        payload = {"scores": scores, "summary": summary, "reasoning": reasoning}
        return JudgeReply(
            scores=scores,
            summary=summary,
            reasoning=reasoning,
            label="heuristic",
            raw_response=json.dumps(payload, ensure_ascii=False),
        )

    def _react(self, request: JudgeRequest) -> JudgeReply:
        spec = REACT_EVALUATIONS[request.evaluation_kind]
        ok, summary, signals = react_verdict(request)
        label = spec.positive if ok else spec.negative
        scores = {spec.metric: spec.score_for(label)}
        reasoning = (f"{HEURISTIC_NOTE} Signals: " + "; ".join(signals)
                     + f". Rule: {_RULES[request.evaluation_kind]}.")
        payload = {"scores": scores, "label": label, "summary": summary,
                   "reasoning": reasoning}
        return JudgeReply(scores=scores, summary=summary, reasoning=reasoning, label=label,
                          raw_response=json.dumps(payload, ensure_ascii=False))

    def _assess(self, request: JudgeRequest) -> JudgeReply:
        figures = (category_assessment_scores
                   if request.evaluation_kind == EVAL_CATEGORY_ASSESSMENT
                   else trajectory_assessment_scores)
        computed, notes = figures(request.task_description, request.assessed_clips)
        scores = {m: computed[m] for m in request.metrics if m in computed}
        summary = _assessment_summary(request, notes)
        reasoning = (f"{HEURISTIC_NOTE} Signals: " + "; ".join(notes)
                     + f". Rules: {_ASSESSMENT_RULES[request.evaluation_kind]}.")
        payload = {"scores": scores, "summary": summary, "reasoning": reasoning}
        return JudgeReply(scores=scores, summary=summary, reasoning=reasoning,
                          label="heuristic",
                          raw_response=json.dumps(payload, ensure_ascii=False))

    async def aclose(self) -> None:
        return None
