"""Hand-written cases for each quirk of the XML-tag format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval_pipeline.formats import parse_file
from eval_pipeline.formats.xml_tags import analyze_xml_response, parse_xml_response
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.formats.helpers import assert_offsets, assert_result_ok

REG = default_registry()


def _kinds(text: str) -> list[str]:
    return [s.kind for s in parse_xml_response(text, REG)]


def test_tool_param_preamble_and_schema_echo_are_not_tool_results():
    text = (
        "<think>check params</think>\n"
        "<tool_param><tool_id>deepsearch</tool_id><action>quick_research</action></tool_param>\n"
        '<result>{"parameters": {"question": {"type": "string"}}}</result>\n'
        '<deepsearch><quick_research>{"question": "q"}</quick_research></deepsearch>\n'
        "<execute_tools />\n"
        "<result>the real answer</result>\n"
        "<answer>done</answer>"
    )
    steps = parse_xml_response(text, REG)
    assert [s.kind for s in steps] == [
        "thought", "text", "text", "tool_call", "text", "tool_result", "answer"]
    call = steps[3]
    assert (call.tool_name, call.tool_type, call.tool_input) == (
        "quick_research", "deepsearch", '{"question": "q"}')
    assert steps[4].content == "<execute_tools />"  # the self-closing trigger is kept as text
    assert steps[5].content == "the real answer"


def test_unclosed_answer_runs_to_the_end_and_is_noted():
    analysis = analyze_xml_response("<think>x</think>\n<answer>\\boxed{42}", REG)
    assert analysis.steps[-1].kind == "answer" and analysis.steps[-1].content == "\\boxed{42}"
    assert analysis.notes == ["unclosed <answer> read to the end of the response"]


def test_answer_left_open_before_more_steps_does_not_swallow_them():
    text = ("<answer>first try\n<think>more</think>\n"
            "<microsandbox><microsandbox_execute>print(1)</microsandbox_execute></microsandbox>"
            "\n<result>1</result>\n<answer>1</answer>")
    assert _kinds(text) == ["answer", "thought", "tool_call", "tool_result", "answer"]


def test_no_tags_is_one_text_step_with_a_note():
    analysis = analyze_xml_response("The answer is 4.", REG)
    assert [s.kind for s in analysis.steps] == ["text"]
    assert analysis.notes == ["no tags: the whole response is one text step"]


def test_chinese_text_offsets_are_character_offsets():
    text = "<think>我需要搜索</think><browser_use><browser_search_google>北京天气" \
           "</browser_search_google></browser_use><result>找到 10 个相关结果</result>"
    steps = parse_xml_response(text, REG)
    assert text[steps[2].start:steps[2].end] == "<result>找到 10 个相关结果</result>"
    assert steps[1].tool_input == "北京天气"


def test_tavily_perform_web_task_and_unknown_tags():
    text = ('<tavily><tavily-search>{"query": "q"}</tavily-search></tavily>\n<result>r</result>\n'
            "<perform_web_task><go_to_url>{\"url\": \"u\"}</go_to_url></perform_web_task>\n"
            "<result>ok</result>\n"
            "<weather_api><get_forecast>{}</get_forecast></weather_api>\n<execute_tools />\n"
            "<result>sunny</result>\n<br>not a tool</br> text")
    calls = [s for s in parse_xml_response(text, REG) if s.kind == "tool_call"]
    assert [(c.tool_name, c.tool_type) for c in calls] == [
        ("tavily-search", "tavily"), ("go_to_url", "perform_web_task"),
        ("get_forecast", "generic")]


def test_newer_dialect_tool_call_with_broken_json_keeps_the_call():
    text = '<tool_call>{"name": "tavily-search", "arguments": {"query": </tool_call>'
    analysis = analyze_xml_response(text, REG)
    (call,) = analysis.steps
    assert call.tool_name == "tavily-search" and call.tool_type == "tavily"
    text = "<tool_call>just words</tool_call><result>r</result>"
    analysis = analyze_xml_response(text, REG)
    assert analysis.steps[0].tool_name == "unknown" and analysis.steps[0].tool_type == "generic"
    assert any("no readable name" in n for n in analysis.notes)


@pytest.mark.timeout(300)  # a hang guard, not a speed figure: quadratic here takes hours
def test_deeply_nested_and_unbalanced_tags_stay_linear():
    nested = "<think>" * 20000 + "deep" + "</think>" * 20000
    unbalanced = "<result>" * 50000 + "tail"
    for text in (nested, unbalanced, "</think></result>" * 10000):
        analysis = analyze_xml_response(text, REG)
        for s in analysis.steps:
            assert 0 <= s.start <= s.end <= len(text)


def test_field_over_100k_chars_and_record_helpers(tmp_path: Path):
    big = "<think>" + "x" * 150_000 + "</think><answer>ok</answer>"
    rows = [
        {"task_id": "big", "task_description": "t", "raw_response": big, "success": "True",
         "duration": "1.5"},
        {"task_id": "nosuccess", "raw_response": "plain"},
    ]
    path = tmp_path / "drop.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    result = parse_file(path, "b")
    assert_result_ok(result)
    big_traj, plain = result.trajectories
    assert big_traj.success is True and big_traj.duration == 1.5
    assert len(big_traj.steps[0].content) == 150_000
    assert plain.success is None and plain.extra["success_missing"] is True
    assert_offsets(plain)
