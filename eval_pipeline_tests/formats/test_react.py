"""ReAct text: the numbered paper style on the Reflexion logs, and the LlamaIndex style."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from eval_pipeline.formats import detect_format, parse_file
from eval_pipeline.formats.react import parse_react_text
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.formats.helpers import assert_result_ok, calls, n_calls

REG = default_registry()


def test_reflexion_log_entries_sections_and_calls(corpora_dir):
    path = corpora_dir / "reflexion_react" / "hotpotqa_ReAct_base_react_thought_log.txt"
    assert detect_format(path) == "react_text"
    result = parse_file(path, "b")
    assert_result_ok(result)
    trajs = result.trajectories
    # Counted from the file: 33 CORRECT, 57 INCORRECT, 12 HALTED entries;
    # 72 + 135 + 70 non-Finish actions.
    assert Counter(t.extra["outcome"] for t in trajs) == {
        "CORRECT": 33, "INCORRECT": 57, "HALTED": 12}
    assert n_calls(result) == 277
    assert Counter(t.success for t in trajs) == {True: 33, False: 69}
    first = trajs[0]
    assert first.task_description.startswith("Which of Jonny Craig and Pete Doherty")
    assert [(c.tool_name, c.tool_input) for c in calls(first)] == [
        ("Search", "Jonny Craig"), ("Search", "Pete Doherty")]
    assert first.final_result == "Jonny Craig" and first.final_label == 1.0
    # The verdict after Finish is not a tool result (it would close a tool clip).
    assert first.steps[-1].kind == "text" and "CORRECT" in first.steps[-1].content
    kinds = [s.kind for s in first.steps]
    assert kinds[:4] == ["user", "thought", "tool_call", "tool_result"]
    assert first.raw_response.startswith("Question:")


def test_reflexion_sample_with_reflections(corpora_dir):
    path = (corpora_dir / "reflexion_react"
            / "hotpotqa_ReAct_reflexion_50_sample_react_reflect_correct.txt")
    result = parse_file(path, "b")
    assert_result_ok(result)
    assert len(result.trajectories) == 17 and n_calls(result) == 40
    assert all(t.extra["outcome"] == "CORRECT" for t in result.trajectories)
    assert result.trajectories[0].extra["correct_answer"] == "Marktown"


def test_llamaindex_style_action_input_json():
    text = ("Thought: I need the weather.\nAction: get_weather\n"
            'Action Input: {"city": "Paris"}\nObservation: 18C and sunny\n'
            "Thought: I can answer.\nAnswer: It is 18C in Paris.")
    steps = parse_react_text(text, REG)
    assert [s.kind for s in steps] == ["thought", "tool_call", "tool_result", "thought", "answer"]
    call = steps[1]
    assert call.tool_name == "get_weather" and call.tool_input == '{"city": "Paris"}'
    assert text[call.start:call.end] == 'Action: get_weather\nAction Input: {"city": "Paris"}'
    assert steps[-1].content == "It is 18C in Paris."


def test_multiline_observation_and_registered_tool(tmp_path: Path):
    text = ("Thought 1: search\nAction 1: tavily-search[rust borrow checker]\n"
            "Observation 1: line one\nline two\n\nThought 2: done\nAction 2: Finish[yes]\n")
    path = tmp_path / "run.log"
    path.write_text(text)
    result = parse_file(path, "b")
    (traj,) = result.trajectories
    steps = traj.steps
    assert steps[1].tool_type == "tavily" and steps[1].tool_input == "rust borrow checker"
    assert steps[2].content == "line one\nline two"
    assert steps[-1].kind == "answer" and steps[-1].content == "yes"
