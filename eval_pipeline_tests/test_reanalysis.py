"""A repaired response's steps predicted from the original's equal a full re-reading (#12.1).

``reanalyze_repaired`` skips reading a response again when the tag repair only closed the
``<answer>`` at its end; these tests compare it with ``analyze_xml_rows`` on the repaired
text for every corpora XML record, for corpora records with closers cut out, and for
generated tag soup, and check that the shortcut is taken (a test that never takes it would
prove nothing).
"""

from __future__ import annotations

import random
from pathlib import Path

from eval_pipeline import ingest
from eval_pipeline.formats.xml_tags import analyze_xml_rows, reanalyze_repaired
from eval_pipeline.preprocess import repair_tags
from eval_pipeline.tool_registry import default_registry

REG = default_registry()
XML_FILES = [
    "agent_data_platform/trajectories-2.5-pro_2025-07-12.jsonl",
    "agent_data_platform/trajectories-flash_2025-07-12.jsonl",
    "agent_data_platform/trajectories_2025-07-16.jsonl",
    "dataeva/demo01.jsonl", "dataeva/demo02.jsonl",
]
FRAGMENTS = [
    "<think>", "</think>", "<answer>", "</answer>", "<result>", "</result>", "<tool_param>",
    "</tool_param>", "<microsandbox>", "</microsandbox>", "<microsandbox_execute>",
    "</microsandbox_execute>", "<execute_tools />", "<tool_call>", "</tool_call>",
    '{"name": "tavily-search", "arguments": {"query": "q"}}', "<weird>", "</weird>",
    "<ANSWER a=1>", "</Answer >", "<answer/>", "text ", "\n", "  ", "中文", "<br>",
    "<deepsearch>", "</deepsearch>", "<quick_research>", "</quick_research>",
]


def _check(text: str) -> bool:
    """The prediction equals the full reading; True when the shortcut applied."""
    steps, _notes = analyze_xml_rows(text, REG)
    repair = repair_tags(text, REG.tool_tags)
    if not repair.fixes:
        return False
    predicted = reanalyze_repaired(text, steps, repair.text, repair.fixes, REG)
    assert predicted == analyze_xml_rows(repair.text, REG)[0]
    # The shortcut passes the earlier rows on as they are; a reading makes new ones.
    return len(predicted) == len(steps) >= 2 and predicted[0] is steps[0]


def test_prediction_equals_reading_on_the_corpora(corpora_dir: Path) -> None:
    shortcuts = 0
    for name in XML_FILES:
        raw, _q = ingest.read_batch(corpora_dir / name, None, "b")
        for text in raw["raw_response"]:
            shortcuts += _check(text)
            # Closers cut out: every repair path on real text.
            shortcuts += _check(text.replace("</think>", "", 1).replace("</result>", "", 2))
    assert shortcuts > 100


def test_prediction_equals_reading_on_tag_soup() -> None:
    rng = random.Random(12)
    shortcuts = 0
    for _ in range(20_000):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 40)))
        shortcuts += _check(text)
        shortcuts += _check(text + "<answer>" + "".join(
            rng.choice(FRAGMENTS[-10:]) for _ in range(rng.randint(0, 4))))
    assert shortcuts > 300


def test_answer_closed_at_the_end_moves_only_its_end() -> None:
    text = "<think>a</think>\n<answer>\\boxed{4}"
    steps, _notes = analyze_xml_rows(text, REG)
    repair = repair_tags(text, REG.tool_tags)
    assert repair.fixes == ["closed <answer> at end of response"]
    predicted = reanalyze_repaired(text, steps, repair.text, repair.fixes, REG)
    assert predicted[0] is steps[0]
    assert predicted[-1] == {**steps[-1], "end": len(text) + len("</answer>")}
