"""The C kernel's ``tag_scan`` gives exactly ``xml_tags._scan``'s lists (the regex and the
per-name stacks): on every response of the XML-format corpora, on the tag soups the other
kernel tests use, and on soups built to part a code-point loop from the regex: Unicode word
characters and spaces in and after names (``\\w`` and ``\\s`` are Unicode classes on a
str), names whose ``lower()`` changes their length, characters of every str width (1, 2
and 4 bytes), attributes running into ``<`` or the end, self-closing forms."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from eval_pipeline import tagscan
from eval_pipeline.formats.xml_tags import _scan, _scan_python, analyze_xml_rows
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.test_tagscan import FRAGMENTS, soups

pytestmark = pytest.mark.skipif(tagscan.BUILT is None, reason="the C kernel is not built")

UNICODE = [
    "<\u0130x>", "</\u0130X>", "<a\u0130>", "</A\u0130>", "<K\u212a>", "</k\u212a>",
    "<x\u00b2>", "</X\u00b2>", "<a\u0660b>", "<\u00e9>", "<a\u00e9>", "</a\u00c9>",
    "<a\u2028b>", "<a\u1680>", "</a\u3000>", "</a\u0085>", "<a\x1c>", "</a\x1f>",
    "<a\u00a0b='<'>", "<a\u00a0b=c>", "<\u00df>", "<a\u00df>", "</A\u1e9e>", "<a\u01c5b>",
    "<a\U0001d7d8>", "</a\U0001d7d8 >", "<a\U0001f600>", "<a\u02b0>", "<a\u0301>",
    "<th\u0130nk>", "</TH\u0130NK>", "<a_b.c-d>", "</A_B.C-D\t\n >", "<a b", "</a", "<a/",
]


def _unicode_soups(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    pool = FRAGMENTS + UNICODE
    return ["".join(rng.choice(pool) for _ in range(rng.randint(0, 16)))
            for _ in range(count)]


def _same(texts: list[str]) -> None:
    for text in texts:
        assert tagscan.kernel() is not None
        assert _scan(text) == _scan_python(text), text


@pytest.mark.parametrize("seed", range(4))
def test_tag_scan_is_the_regex_scan_on_soups(seed: int) -> None:
    with tagscan.use_kernel(True):
        _same(soups(seed, 1500, parts=16))
        _same(_unicode_soups(seed, 1500))


def test_tag_scan_at_the_edges() -> None:
    with tagscan.use_kernel(True):
        _same(["", "<", "</", "<>", "</>", "<a", "<a>", "</a>", "<a >", "<a/>", "<a />",
               "<a x/>", "<a x/ >", "<a x>/", "<a x<b>", "<a x>>", "<<a>>", "a</a\u00a0>",
               "<a>" * 50 + "</a>" * 60, "</b><b></b></b><b>", "<a\u2028>", "\U0001f600<a>"])


def test_tag_scan_is_the_regex_scan_on_the_corpora(corpora_dir: Path) -> None:
    texts: list[str] = []
    for path in sorted(corpora_dir.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and isinstance(value.get("raw_response"), str):
                texts.append(value["raw_response"])
    if not texts:
        pytest.skip("no XML-format responses in the corpora")
    with tagscan.use_kernel(True):
        _same(texts)


def test_the_tolerant_reading_is_the_same_either_way() -> None:
    registry = default_registry()
    texts = soups(7, 800, parts=20) + _unicode_soups(7, 800)
    with tagscan.use_kernel(True):
        fast = [analyze_xml_rows(t, registry, well_formed=False) for t in texts]
    with tagscan.use_kernel(False):
        slow = [analyze_xml_rows(t, registry, well_formed=False) for t in texts]
    assert fast == slow
