"""The offline default judge: deterministic rules over observable signals, not an LLM.

It exists so the whole graph runs on a fresh machine with no key and no network, and so
tests have a judge whose every score can be traced to a signal. Its reasoning names the
signals it used; its provider and model say ``heuristic`` everywhere a score is shown.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from eval_pipeline.judges.base import ClipView, JudgeReply, JudgeRequest
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.models import FINAL_TOOL_TYPE

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
    clip: ClipView = request.clip
    has_call = bool(clip.tool_call)
    result = clip.result.strip()
    code_parses = None
    if request.tool_type == "microsandbox" and has_call:
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
        task_overlap=_overlap(request.task_description,
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


class HeuristicJudge:
    """Scores from signals; ``provider`` and ``model`` say heuristic, never an LLM."""

    provider = "heuristic"

    def __init__(self, config: JudgeConfig):
        self.name = config.name
        self.model = config.model if config.model else "heuristic-v1"

    async def score(self, request: JudgeRequest) -> JudgeReply:
        signals = observe(request)
        scores = score_signals(request.tool_type, request.metrics, signals)
        reasoning = "Heuristic judge (rule-based, not an LLM). Signals: " + "; ".join(
            signals.describe()
        ) + "."
        payload = {"scores": scores, "summary": _summary(request, signals),
                   "reasoning": reasoning}
        return JudgeReply(
            scores=scores,
            summary=payload["summary"],
            reasoning=reasoning,
            label="heuristic",
            raw_response=json.dumps(payload, ensure_ascii=False),
        )

    async def aclose(self) -> None:
        return None
