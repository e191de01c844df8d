"""The element-by-element reading of well-formed responses equals the tag scan's (#12.1).

``_read_well_formed`` reads a response made of whole elements with one regex match per
element and gives up (None) on anything else; whenever it does not give up, its steps and
notes must be exactly what ``_read_tags`` (the scan that pairs every tag) makes of the same
text. Checked on every corpora XML record, on those records with closers cut out or tags
respelled, and on generated tag soup built from the forms the two readings could disagree
on; and it must not give up on most real records, or the shortcut proves nothing.
"""

from __future__ import annotations

import random
from pathlib import Path

from eval_pipeline import ingest
from eval_pipeline.formats.xml_tags import _read_tags, _read_well_formed, analyze_xml_rows
from eval_pipeline.tool_registry import default_registry

REG = default_registry()
XML_FILES = [
    "agent_data_platform/trajectories-2.5-pro_2025-07-12.jsonl",
    "agent_data_platform/trajectories-flash_2025-07-12.jsonl",
    "agent_data_platform/trajectories-lite_2025-07-12.jsonl",
    "agent_data_platform/trajectories_2025-07-16.jsonl",
    "dataeva/demo01.jsonl", "dataeva/demo02.jsonl",
]
FRAGMENTS = [
    "<think>", "</think>", "<answer>", "</answer>", "<result>", "</result>", "<tool_param>",
    "</tool_param>", "<microsandbox>", "</microsandbox>", "<microsandbox_execute>",
    "</microsandbox_execute>", "<execute_tools />", "<execute_tools/>", "<execute_tools>",
    "<tool_call>", "</tool_call>", '{"name": "tavily-search", "arguments": {"q": 1}}',
    "<tavily-search>", "</tavily-search>", "<tavily>", "</tavily>", "<weird>", "</weird>",
    "<THINK>", "</Think >", "<think a=1>", "<think.x>", "<thinking>", "</think/>",
    "<answer/>", "<answer />", "<Result>", "</result >", "<br>", "x < y ", "a<b and c>d",
    "< think>", "</ think>", "thin\u212a", "<thin\u212a>", "</thin\u212a>", "text ", "\n",
    "  ", "中文", "\u3000", "<deepsearch>", "</deepsearch>", "<quick_research>",
    "</quick_research>", "<tool_id>", "</tool_id>",
]


def _same(text: str) -> bool:
    """The readings agree; True when the element reading did not give up."""
    found = _read_well_formed(text, REG)
    if found is None:
        return False
    assert found == _read_tags(text, REG)
    return True


def test_well_formed_reading_equals_the_scan_on_the_corpora(corpora_dir: Path) -> None:
    read = total = 0
    for name in XML_FILES:
        raw, _q = ingest.read_batch(corpora_dir / name, None, "b")
        for text in raw["raw_response"]:
            total += 1
            read += _same(text)
            _same(text.replace("</think>", "", 1))
            _same(text.replace("</result>", "</result >", 1).replace("<think>", "<Think>", 2))
            _same(text + "\n<answer>" + text[:200])
    assert read > total * 0.7


def test_well_formed_reading_equals_the_scan_on_tag_soup() -> None:
    rng = random.Random(12)
    read = 0
    for _ in range(30_000):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 30)))
        read += _same(text)
    assert read > 1_000


def test_well_formed_elements_read_in_one_pass() -> None:
    text = ("<think>plan <b>bold</b></think>\n<tool_param><tool_id>deepsearch</tool_id>"
            "</tool_param>\n<result>schema</result>\n<deepsearch><quick_research>q"
            "</quick_research></deepsearch>\n<execute_tools />\n<result>r < s</result>\n"
            "<answer>\\boxed{1}")
    found = _read_well_formed(text, REG)
    assert found is not None and found == analyze_xml_rows(text, REG)
    rows, notes = found
    assert [r["kind"] for r in rows] == [
        "thought", "text", "text", "tool_call", "text", "tool_result", "answer"]
    assert notes == ["unclosed <answer> read to the end of the response"]
    # A tag of its own name inside an element, or any tag between elements: the scan reads it.
    assert _read_well_formed("<think>a<think>b</think>", REG) is None
    assert _read_well_formed("<think>a</think><br>x</br>", REG) is None
