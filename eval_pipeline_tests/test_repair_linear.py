"""#12.4(a): tag repair is linear, and its output is exactly what the quadratic version gave.

The reference is the previous implementation, frozen in ``repair_reference.py``; these tests
fail if the reuse of earlier matches ever returns a different match than a fresh search.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from eval_pipeline import ingest
from eval_pipeline.preprocess import repair_tags
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.repair_reference import reference_repair_tags
from eval_pipeline_tests.tagscan_modes import scan_mode  # noqa: F401

pytestmark = pytest.mark.usefixtures("scan_mode")  # the C repair and the Python walk

TOOLS = list(default_registry().tool_tags)
XML_FILES = [
    *(f"agent_data_platform/{p}" for p in (
        "trajectories-2.5-pro_2025-07-12.jsonl", "trajectories-flash_2025-07-12.jsonl",
        "trajectories-lite_2025-07-12.jsonl", "trajectories_2025-07-04.jsonl",
        "trajectories_2025-07-05.jsonl", "trajectories_2025-07-16.jsonl",
        "trajectories_2025-07-19.jsonl")),
    "dataeva/demo01.jsonl", "dataeva/demo02.jsonl", "dataeva/aime_cleaned.first50.jsonl",
    "dataeva/nq_hotpot_qa_cleaned.first50.jsonl", "dataeva/example_0721_evaluated.jsonl",
]


def _same(text: str) -> None:
    new, old = repair_tags(text, TOOLS), reference_repair_tags(text, TOOLS)
    assert (new.text, new.fixes) == (old.text, old.fixes)


@pytest.mark.parametrize("name", XML_FILES)
def test_repair_is_unchanged_on_the_corpora_xml_files(corpora_dir: Path, name: str) -> None:
    raw, _quarantined = ingest.read_batch(corpora_dir / name, None, "b")
    assert len(raw)
    for text in raw["raw_response"]:
        _same(text)


def broken_corpora_texts(corpora_dir: Path) -> list[str]:
    """The corpora are mostly well formed: a file's responses with half of their closers
    cut out, so every repair path runs on real text (unclosed results and tool calls,
    stray closers, quoted tags)."""
    raw, _q = ingest.read_batch(corpora_dir / "dataeva" / "demo02.jsonl", None, "b")
    rng = random.Random(7)
    texts = []
    for text in raw["raw_response"]:
        for closer in ("</result>", "</think>", "</microsandbox>", "</deepsearch>"):
            parts = text.split(closer)
            text = "".join(p + (closer if rng.random() < 0.5 else "") for p in parts[:-1]
                           ) + parts[-1]
        texts.append(text)
    return texts


def test_repair_is_unchanged_on_broken_corpora_records(corpora_dir: Path) -> None:
    texts = broken_corpora_texts(corpora_dir)
    fixed = 0
    for text in texts:
        _same(text)
        fixed += bool(repair_tags(text, TOOLS).fixes)
    assert fixed > len(texts) // 2


FRAGMENTS = [
    "<think>", "</think>", "<result>", "</result>", "<result id=\"3\">", "</ result >",
    "<RESULT>", "<result/>", "<answer>", "</answer>", "<tool_param>", "</tool_param>",
    "<microsandbox>", "</microsandbox>", "<microsandbox_execute>", "</microsandbox_execute>",
    "<deepsearch>", "</deepsearch>", "<browser_use>", "\n<think>", "\n  <result>",
    "\n<microsandbox>", "\n", "text ", "x < y > z ", "<unknown>", "</unknown>", "{\"q\": 1}",
    # Forms the closer and opener lookups must tell apart from the tags (#12.1).
    "</result >", "</result/>", "</result x>", "<result />", "</Result\n>", "<answer/>",
    "\n\t<answer x>", "\n<results>", "</microsandbox />", "<microsandbox a=1>",
]


@pytest.mark.parametrize("seed", range(300))
def test_repair_is_unchanged_on_generated_records(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 120)))
    _same(text)


def _unclosed_results(n: int, nested: bool) -> str:
    call = ("<think>step {i}</think><microsandbox><microsandbox_execute>"
            + ("<result>quoted</result><think>q</think>" if nested else "")
            + "print({i})</microsandbox_execute></microsandbox>\n<result>out {i}")
    return "".join(call.format(i=i) for i in range(n)) + "\n<answer>done"


@pytest.mark.parametrize("nested", [False, True])
def test_unclosed_results_are_closed_as_before(nested: bool) -> None:
    text = _unclosed_results(300, nested)
    _same(text)
    repaired = repair_tags(text, TOOLS)
    assert repaired.text.count("</result>") == 300 + (300 if nested else 0)
    assert sum(f.startswith("closed <result>") for f in repaired.fixes) == 300


def test_last_result_closed_far_away_is_reused_not_rescanned() -> None:
    """Every result unclosed but the last: each opening finds the same far closer."""
    text = _unclosed_results(200, nested=False) + "</result>"
    _same(text)
    fixes = repair_tags(text, TOOLS).fixes
    assert len(fixes) == 199 and all(f.startswith("closed <result>") for f in fixes)
