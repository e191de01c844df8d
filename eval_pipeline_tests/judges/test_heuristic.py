"""The heuristic judge: deterministic, labelled as a heuristic, driven by visible signals."""

import asyncio

from eval_pipeline.judges.base import ClipView
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.heuristic import HeuristicJudge
from eval_pipeline.judges.runner import ClipTask, build_request
from eval_pipeline.rubrics import rubric_for


def _score(tool_type, task="Sort the numbers 3 1 2 with python", **clip):
    clip.setdefault("content", "clip")
    request = build_request(ClipTask(trajectory_id="t", clip_index=0, tool_type=tool_type,
                                     task_description=task, clip=ClipView(**clip)), "")
    return asyncio.run(HeuristicJudge(JudgeConfig(name="h")).score(request))


def test_every_rubric_metric_is_scored_in_unit_interval():
    for tool_type in ["microsandbox", "deepsearch", "browser_use", "search_tool", "generic",
                      "final"]:
        reply = _score(tool_type, tool_call="<x>", action_input="{}", result="ok")
        assert set(reply.scores) == set(rubric_for(tool_type).metric_names)
        assert all(0.0 <= v <= 1.0 for v in reply.scores.values())


def test_code_that_does_not_parse_or_raises_scores_lower_than_working_code():
    good = _score("microsandbox", thought="sort it", tool_call="<microsandbox>",
                  action_input="print(sorted([3, 1, 2]))", result="[1, 2, 3]")
    broken = _score("microsandbox", thought="sort it", tool_call="<microsandbox>",
                    action_input="print(sorted([3, 1, 2])",
                    result="SyntaxError: '(' was never closed")
    raising = _score("microsandbox", thought="sort it", tool_call="<microsandbox>",
                     action_input="print(len(3))",
                     result="Traceback (most recent call last):\nTypeError: object of type 'int'")
    assert good.scores["code_correctness"] > raising.scores["code_correctness"]
    assert good.scores["code_correctness"] > broken.scores["code_correctness"]
    assert "the code does not parse" in broken.reasoning
    assert "the result holds a traceback" in raising.reasoning
    assert "the code parses" in good.reasoning


def test_empty_result_error_and_repeated_calls_are_named_and_penalised():
    ok = _score("browser_use", tool_call="<b>", tool_name="search",
                action_input='{"query": "python sort"}', result="1. https://docs.python.org")
    empty = _score("browser_use", tool_call="<b>", tool_name="search",
                   action_input='{"query": "python sort"}', result="",
                   content="<b>search</b><result></result>")
    missing = _score("browser_use", tool_call="<b>", tool_name="search",
                     action_input='{"query": "python sort"}', result="", content="<b>search</b>")
    assert "no result follows the call" in missing.reasoning
    repeat = _score("browser_use", tool_call="<b>", tool_name="search",
                    action_input='{"query": "python sort"}', result="1. https://a.b",
                    earlier_calls=['search:{"query": "python sort"}'])
    assert "the result is empty" in empty.reasoning
    assert "the call repeats an earlier call" in repeat.reasoning
    assert ok.scores["information_extraction_quality"] > empty.scores[
        "information_extraction_quality"]
    assert ok.scores["query_relevance"] > repeat.scores["query_relevance"]


def test_final_clip_with_answer_beats_one_without_and_says_heuristic():
    answered = _score("final", has_answer=True, answer="1 2 3", thought="done")
    missing = _score("final")
    assert answered.scores["task_completion"] > missing.scores["task_completion"]
    assert "the answer tag is present" in answered.reasoning
    assert "no answer tag" in missing.reasoning
    assert answered.reasoning.startswith("Heuristic judge (rule-based, not an LLM)")
    assert HeuristicJudge(JudgeConfig(name="h")).provider == "heuristic"
    # Deterministic: the same clip always gets the same scores.
    assert _score("final", has_answer=True, answer="1 2 3", thought="done") == answered
