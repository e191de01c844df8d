"""#8.6: duplicate detection compares the calls themselves, so a stray wrapper tag that is
not a tool (``<tool_code>`` around a retried call) no longer hides a repeat, and it does
not merge two different calls either. The corpus test pins the one real case."""

from __future__ import annotations

import json
from pathlib import Path

from eval_pipeline.formats.xml_tags import parse_xml_response
from eval_pipeline.models import Trajectory
from eval_pipeline.preprocess import PreprocessConfig, find_consecutive_duplicates, preprocess_one
from eval_pipeline.tool_registry import default_registry

CALL = '<browser_use><browser_search_google>{"query": "%s"}</browser_search_google></browser_use>'


def _turn(query: str, wrapper: str | None = None) -> str:
    call = CALL % query
    if wrapper:
        call = f"<{wrapper}>\n{call}\n</{wrapper}>"
    return f"<think>search</think>\n{call}\n<execute_tools />\n<result>failed</result>\n"


def _duplicates(text: str) -> list[str]:
    reg = default_registry()
    return find_consecutive_duplicates(parse_xml_response(text, reg), reg)


def test_a_repeat_is_found_with_and_without_a_stray_wrapper():
    plain = _turn("Atmosphere band")
    wrapped = _turn("Atmosphere band", wrapper="tool_code")
    expected = ['browser_use:browser_search_google:{"query": "Atmosphere band"}']
    assert _duplicates(plain + plain) == expected
    assert _duplicates(plain + wrapped) == expected
    assert _duplicates(wrapped + plain) == expected
    # Two levels of wrapper, with attributes, are peeled the same way.
    nested = wrapped.replace("<tool_code>", '<outer id="1"><tool_code>').replace(
        "</tool_code>", "</tool_code></outer>")
    assert _duplicates(nested + plain) == expected


def test_the_wrapped_repeat_removes_the_trajectory_like_a_plain_one():
    text = _turn("q") + _turn("q", wrapper="tool_code") + "<answer>x</answer>"
    reg = default_registry()
    traj = Trajectory(trajectory_id="t", batch="b", source_file="f.jsonl", source_line=1,
                      source_format="xml_tags", task_id="t1", task_description="d",
                      raw_response=text, steps=parse_xml_response(text, reg))
    outcome = preprocess_one(traj, PreprocessConfig(), reg)
    assert outcome.removal_reason == "duplicates" and outcome.has_duplicates


def test_different_calls_around_a_wrapper_are_not_merged():
    assert _duplicates(_turn("a") + _turn("b", wrapper="tool_code")) == []
    assert _duplicates(_turn("a", wrapper="tool_code") + _turn("b")) == []
    # A wrapper holding two calls is not one call: peeling it must not read
    # "<x>1</x><x>2</x>" as a single <x> whose body is "1</x><x>2".
    two = (f"<tool_code>{CALL % 'a'}{CALL % 'b'}</tool_code>\n<execute_tools />\n"
           "<result>r</result>\n")
    assert _duplicates(two + _turn("a")) == []
    assert _duplicates(_turn("b") + two) == []
    # Same action, same input, different tool: not a repeat.
    other_tool = _turn("a").replace("browser_use>", "deepsearch>")
    assert _duplicates(_turn("a", wrapper="tool_code") + other_tool) == []


def test_the_real_wrapped_retry_in_the_corpora_is_found(corpora_dir: Path):
    """agent-data-platform 2025-07-16 retries a failed search inside ``<tool_code>``."""
    reg = default_registry()
    path = corpora_dir / "agent_data_platform" / "trajectories_2025-07-16.jsonl"
    records = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
    wrapped = [r["raw_response"] for r in records if "<tool_code>" in r.get("raw_response", "")]
    assert len(wrapped) == 1
    duplicates = find_consecutive_duplicates(parse_xml_response(wrapped[0], reg), reg)
    assert any("Atmosphere music group country of origin" in d for d in duplicates)
