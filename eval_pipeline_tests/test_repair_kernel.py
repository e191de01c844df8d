"""The C tag repair (``_tagscan.repair_tags``) gives exactly what the Python walk gives.

``preprocess.repair_tags`` hands a response to the kernel when it is on and keeps
``_repair_tags_python`` for the rows the kernel says it is unsure of (None). These tests
call both directly, so a kernel that returned None everywhere would fail them (they
require an answer where the kernel should be sure), and compare repaired text and fixes
(their "at char N" are character offsets) on the corpora's XML responses, the bench's
generated drop, every fix kind, the Unicode classes re uses (``\\s``, ``\\w``, the
IGNORECASE folds onto ASCII letters) and tens of thousands of random tag soups with
non-ASCII text of each str kind (Latin-1, UCS-2, UCS-4) mixed in.
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import pytest

from eval_pipeline import ingest, tagscan
from eval_pipeline.preprocess import _kernel_names, _repair_tags_python, repair_tags
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.tagscan_modes import scan_mode  # noqa: F401
from eval_pipeline_tests.test_repair_linear import XML_FILES, broken_corpora_texts

pytestmark = pytest.mark.skipif(tagscan.BUILT is None, reason="the C kernel is not built")

TOOLS = tuple(default_registry().tool_tags)
SPEC = _kernel_names(TOOLS)
FOLDS = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}
"""The non-ASCII characters re.IGNORECASE matches with an ASCII letter (checked below
against re itself): where one stands in a tag name the kernel answers None."""


def _kernel(text: str, tools: tuple[str, ...] = TOOLS) -> tuple[str, list[str]] | None:
    spec = _kernel_names(tools)
    assert spec is not None and tagscan.BUILT is not None
    result: tuple[str, list[str]] | None = tagscan.BUILT.repair_tags(text, *spec)
    return result


def _same(text: str, tools: tuple[str, ...] = TOOLS, sure: bool = True) -> list[str]:
    """The kernel's repair equals the Python walk's (when it answers); its fixes. With
    ``sure`` it must answer."""
    want = _repair_tags_python(text, tools)
    got = _kernel(text, tools)
    if got is None:
        assert not sure, text
        return want.fixes
    assert got == (want.text, want.fixes), text
    # Canonical str: equal texts hash alike (a wide kind left after a removal would not).
    assert hash(got[0]) == hash(want.text)
    return want.fixes


def _unsure(text: str) -> bool:
    return _kernel(text) is None


@pytest.mark.parametrize("name", XML_FILES)
def test_kernel_equals_python_on_the_corpora_xml_files(corpora_dir: Path, name: str) -> None:
    raw, _quarantined = ingest.read_batch(corpora_dir / name, None, "b")
    assert len(raw)
    for text in raw["raw_response"]:
        _same(text)
        # Closers cut out: every repair path on real text.
        _same(text.replace("</think>", "", 1).replace("</result>", "", 2))


def test_kernel_equals_python_on_broken_corpora_records(corpora_dir: Path) -> None:
    texts = broken_corpora_texts(corpora_dir)
    fixed = sum(bool(_same(text)) for text in texts)
    assert fixed > len(texts) // 2


def test_kernel_equals_python_on_the_generated_drop(tmp_path: Path) -> None:
    """The bench's drop (bench/drops.py): unclosed answers and thinks, Chinese results."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from drops import write_drop

    path = tmp_path / "drop.jsonl"
    write_drop(path, 2.0, seed=5)
    raw, _q = ingest.read_batch(path, None, "b")
    fixed = sum(bool(_same(text)) for text in raw["raw_response"])
    assert fixed > 10


EDGES = [
    ("", []),
    ("plain text, no tags at all", []),
    ("<think>a</think><answer>b</answer>", []),
    # a flat tag closed before another known tag opens
    ("<think>plan<answer>x</answer>", ["closed <think> before <answer> at char 11"]),
    ("<think>a<think>b</think>", ["closed <think> before <think> at char 8"]),
    # an opaque tag unclosed: to the next tag starting a line, or to the end
    ("<result>out\n<think>t</think>", ["closed <result> at char 11"]),
    ("<result>out\n \t<ANSWER x>a</answer>", ["closed <result> at char 11"]),
    ("<result>out\n<thinking>t", ["closed <result> at char 23"]),
    ("<result>out\n<tavily-x", ["closed <result> at char 11"]),
    ("<microsandbox>print(1)", ["closed <microsandbox> at char 22"]),
    ("<result>a<result>b</result>", ["closed <result> at char 27"]),
    # stray and nested closers
    ("a</result>b", ["removed stray </result> at char 1"]),
    ("<think>a</answer>b", ["removed stray </answer> at char 8",
                            "closed <think> at end of response"]),
    ("<answer><think>a</answer>", ["closed <answer> before <think> at char 8",
                                   "removed stray </answer> at char 16",
                                   "closed <think> at end of response"]),
    # self-closing and attributes: "<think/>" self-closes, "<think />" opens
    ("<think/>x", []),
    ("<think />x", ["closed <think> at end of response"]),
    ("<result/>x<result a=1>y</result >", []),
    ("<result>y</result x>z", ["closed <result> at char 21"]),
    ("<result>y</result/>z</result>", []),
    ("<result>y</Result\n>", []),
    ("<Think>a</THINK>", []),
    ("<tHiNk>a", ["closed <think> at end of response"]),
    # a tag at the very end, and not quite tags
    ("text<answer>", ["closed <answer> at end of response"]),
    ("text<answer", []),
    ("text</answer", []),
    ("< think>x</ think>", []),
    ("<think\n>a", ["closed <think> at end of response"]),
    ("<think\t x=\"<\">a", []),
    # non-ASCII text around and inside tags (each str kind)
    ("é<think>ü</think>é", []),
    ("中<think>文\n<result>中", ["closed <think> before <result> at char 10",
                                "closed <result> at char 19"]),
    ("😀<answer>😀", ["closed <answer> at end of response"]),
    ("<think 中文>x", ["closed <think> at end of response"]),
    ("<result>x</result 😀>\n<answer>y", ["closed <result> at char 20",
                                          "closed <answer> at end of response"]),
    ("</think 中>", ["removed stray </think> at char 0"]),
    ("<answer>a</answer é>b", []),
    # Unicode \s opens attributes; Unicode \w decides \b after a line-start name
    ("<think\u00a0>a", ["closed <think> at end of response"]),
    ("<think\u3000>a</think\u2028>", []),
    ("<think\x1c>a</think\x1f>", []),
    ("<result>a</result\u0085>", []),
    ("<result>a\n<thinké", ["closed <result> at char 17"]),
    ("<result>a\n<think·", ["closed <result> at char 9"]),
    ("<result>a\n<think中", ["closed <result> at char 17"]),
    ("<result>a\n<think-", ["closed <result> at char 9"]),
]


@pytest.mark.parametrize(("text", "fixes"), EDGES)
def test_kernel_equals_python_on_edge_cases(text: str, fixes: list[str]) -> None:
    assert _same(text) == _repair_tags_python(text, TOOLS).fixes
    # Every case's fixes as written: the list covers each fix kind.
    got = _kernel(text)
    assert got is not None
    assert sorted(got[1]) == sorted(fixes)


def test_edge_cases_cover_every_fix_kind() -> None:
    kinds = {re.sub(r"<[^>]*>|\d+", "", f) for _t, fixes in EDGES for f in fixes}
    assert kinds == {"closed  before  at char ", "closed  at char ", "removed stray  at char ",
                     "closed  at end of response"}


def test_nested_closers_close_the_tags_inside() -> None:
    """The fifth kind, "closed <x> before </y>", needs a known tag that is neither flat nor
    opaque, which repair_tags's names never have (think, result, answer, tool_param are
    flat, result and the tool tags opaque): the kernel's own flags make one."""
    assert tagscan.BUILT is not None
    names = ("think", "x", "y")
    got = tagscan.BUILT.repair_tags("<x>a<y>b<think>c</x>d", names, b"\1\0\0", b"\0\0\0")
    assert got == ("<x>a<y>b<think>c</think></y></x>d",
                   ["closed <think> before </x> at char 16", "closed <y> before </x> at char 16"])


def test_the_kernels_folds_are_re_s() -> None:
    """The non-ASCII characters re.IGNORECASE matches with a tag name's ASCII characters
    are exactly FOLDS (the kernel's table); where one stands in a name, it answers None."""
    everything = "".join(chr(c) for c in range(0x110000))
    found: dict[str, str] = {}
    for c in "abcdefghijklmnopqrstuvwxyz0123456789_-.:":
        for other in re.findall(re.escape(c), everything, re.IGNORECASE):
            if not other.isascii():
                found[other] = c
    assert found == FOLDS
    # The same in a character set (re may compile the names' alternation into sets).
    in_set = re.findall(r"[a-z0-9_.:-]", everything, re.IGNORECASE)
    assert {c for c in in_set if not c.isascii()} == set(FOLDS)
    for char, letter in FOLDS.items():
        for name in [n for n in SPEC[0] if letter in n] if SPEC else []:
            folded = name.replace(letter, char, 1)
            for text in (f"<{folded}>x", f"a</{folded}>", f"<result>x\n<{folded}>"):
                assert _unsure(text), text
                _same(text, sure=False)
    # Elsewhere they are text like any other.
    _same("<think>\u0130\u0131\u017f\u212a</think>\u212a<answer>\u017f")


def test_unicode_spaces_and_word_characters_are_re_s() -> None:
    everything = "".join(chr(c) for c in range(0x110000))
    spaces = re.findall(r"\s", everything)
    assert len(spaces) == 29
    for s in spaces:
        _same(f"<think{s}>a</think{s}>b<result>c</result{s}{s}>")
        _same(f"<think{s}x>a")
        _same(f"<result>a\n<think{s}")
    rng = random.Random(3)
    words = re.findall(r"\w", everything)
    others = re.findall(r"\W", everything)
    for c in [*rng.sample(words, 3000), *rng.sample(others, 3000), "_", "\u00b7", "\u0300"]:
        _same(f"<result>a\n<think{c}")
        _same(f"<result>a\n\t <answer{c}x")


def test_names_outside_the_kernels_alphabet_go_to_python() -> None:
    """A tool tag the kernel cannot match by ASCII folding: the Python walk decides."""
    assert _kernel_names(("ſearch",)) is None
    assert _kernel_names(("a b",)) is None
    with tagscan.use_kernel(True):
        assert repair_tags("<ſearch>x", ("ſearch",)).fixes == ["closed <ſearch> at char 9"]
    # Mixed-case and repeated tool tags are one name to both walks.
    assert _kernel_names(("Search", "search", "THINK"))[0] == (
        "think", "result", "answer", "tool_param", "search")
    for text in ("<SEARCH>x", "<think>a<Search>b</search>", "</search>"):
        _same(text, ("Search", "search", "THINK"))


def test_long_texts_of_each_kind() -> None:
    """'<' and newlines at every alignment of the four-at-a-time scan, in long texts."""
    for wide in ("", "é", "中", "😀"):
        for pad in range(9):
            body = ("x" * pad + wide + "<think>t" + "y" * 37 + "\n<result>" + "z" * 101) * 40
            _same(body + "</result><answer>" + wide)
            _same(wide + "q" * pad + "</answer>" + body)


TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "<result>", "</result>",
          "<tool_param>", "</tool_param>", "<browser_use>", "</browser_use>", "<think/>",
          "<result/>", "</result >", "</result x>", "<result a=1>", "<Answer>", "</ANSWER>",
          "<tavily-search>", "</tavily-search>", "<tavily>", "</tavily >", "<tavily-map/>",
          "<microsandbox>", "</microsandbox>", "<microsandbox_execute>", "<b>", "<br/>",
          "< think>", "<think", "<think />", "</think/>", ">", "<", "/", "x", " ", "\n",
          "\n  ", "\n\t", "中", "é", "\U0001f600", "\u00a0", "\u2028", "\u3000",
          "<think\u2003>", "</think\x1c>", "<search_tool>", "</search_tool>", "<thinké>",
          "</result\u0085>", "<result 中>", "<answer é/>", "K", "<deepsearch>",
          "</deepsearch>", "\n<answer", "\n<think·", "<RESULT\n>", "</Result\t\n>"]
FOLDED = ["<ſearch_tool>", "</ſearch_tool>", "<\u212aey>", "\n<thınk>", "<th\u0130nk>", "ı"]


def _soup(rng: random.Random, most: int) -> str:
    """Up to ``most`` tokens, one in fifty of them with a fold."""
    return "".join(rng.choice(TOKENS) if rng.random() > 0.02 else rng.choice(FOLDED)
                   for _ in range(rng.randint(0, most)))


@pytest.mark.parametrize("seed", range(8))
def test_kernel_equals_python_on_random_soup(seed: int) -> None:
    rng = random.Random(seed)
    answered = 0
    for _ in range(5000):
        text = _soup(rng, 40)
        answered += _kernel(text) is not None
        _same(text, sure=not any(c in text for c in FOLDS))
    assert answered > 3500  # the folds are rare; the kernel answers the rest


def test_repair_tags_switches_with_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """repair_tags uses the kernel when it is on, the Python walk when it is off or unsure."""
    assert tagscan.BUILT is not None
    calls: list[str] = []
    real = tagscan.BUILT.repair_tags

    class Spy:
        @staticmethod
        def repair_tags(text: str, *spec: object) -> object:
            calls.append(text)
            return real(text, *spec)

    monkeypatch.setattr(tagscan, "BUILT", Spy)
    with tagscan.use_kernel(True):
        assert repair_tags("<think>a", TOOLS).fixes == ["closed <think> at end of response"]
        assert repair_tags("<ſearch_tool>a", TOOLS).fixes == (
            _repair_tags_python("<ſearch_tool>a", TOOLS).fixes)
    with tagscan.use_kernel(False):
        assert repair_tags("<answer>b", TOOLS).fixes == ["closed <answer> at end of response"]
    assert calls == ["<think>a", "<ſearch_tool>a"]


@pytest.mark.usefixtures("scan_mode")
@pytest.mark.parametrize("seed", range(3))
def test_repair_tags_equals_the_python_walk_either_way(seed: int) -> None:
    rng = random.Random(100 + seed)
    for _ in range(500):
        text = _soup(rng, 30)
        got, want = repair_tags(text, TOOLS), _repair_tags_python(text, TOOLS)
        assert (got.text, got.fixes) == (want.text, want.fixes)
