"""The C tag-scan kernel (``eval_pipeline/_tagscan.c``) gives exactly its numpy twins' arrays.

The stage tests (``test_xml_arrow.py``, ``test_prep_arrow.py``, ``test_stage_digests.py``)
run both ways and compare whole tables; here each kernel function is held to the numpy code
it replaces, array by array, on the inputs where a byte loop and a vectorised pass could
part: multi-byte UTF-8 right before and after tags, empty strings and empty batches, a tag
(or half of one) at the very end of the buffer, names of 31 to 40 bytes, upper case, sliced
arrays (a non-zero offset), ``string`` as well as ``large_string`` offsets, nulls, and
thousands of random tag soups. Skipped when the extension is not built.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from eval_pipeline import tagscan
from eval_pipeline.clips_arrow import _char_to_byte, char_lengths, clip_batch
from eval_pipeline.formats import xml_arrow
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.preprocess_arrow import (
    _repair_status,
    _scan,
    _stripped,
    _stripped_keys,
    _tag_counts,
    screen_batch,
    utf8_bytes,
)
from eval_pipeline.tool_registry import default_registry

pytestmark = pytest.mark.skipif(tagscan.BUILT is None, reason="the C kernel is not built")

REGISTRY = default_registry()
NAMES = xml_arrow._names(REGISTRY)

FRAGMENTS = [
    "<think>", "</think>", "<result>", "</result>", "<answer>", "</answer>", "<tool_param>",
    "</tool_param>", "<tool_call>", "<microsandbox>", "</microsandbox>",
    "<microsandbox_execute>", "</microsandbox_execute>", "<browser_use>", "</browser_use>",
    "<execute_tools />", "<execute_tools/>", "<THINK>", "<Think>", "</think >", "<think x>",
    "<think\u00e9>", "<\u00e9think>", "</\u00e9>", "<", ">", "</", "</>", "<a b='c'>", "<a/>",
    "<x-y.z>", "<_u>", "<1a>", "< think>", "<think\n>", "<br>", "</br>", "<" + "n" * 31 + ">",
    "<" + "n" * 32 + ">", "<" + "n" * 40 + ">", "</" + "q" * 33, "<tag attr>", "<tag\tattr/>",
    "\u00e9", "\u4e2d", "\U0001f600", "\u00a0", "\u3000", "\u2003", "\u0085", " ", "\n", "\t",
    "plain text", "a < b", "x>y", "<<think>>", "<ab\u00e9>", "<K\u212a>", "</x\u4e2d>",
    "<execute_tools/", "<execute_tools /", "<execute_tools/ >", "<execute_tools />x",
]


def soup(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, parts)))


def soups(seed: int, count: int, parts: int = 12) -> list[str]:
    rng = random.Random(seed)
    texts = [soup(rng, parts) for _ in range(count)]
    texts += ["", "<think>", "x<think", "<", "</", "<think>a</think", "\u00e9<answer>",
              "<answer>\u00e9", "<" + "n" * 40, "<a b"]
    return texts


def both(function: Callable[[], Any]) -> tuple[Any, Any]:
    """``function()`` with the kernel, then with numpy."""
    with tagscan.use_kernel(True):
        compiled = function()
    with tagscan.use_kernel(False):
        fallback = function()
    return compiled, fallback


def chunk(texts: list[str]) -> tuple[np.ndarray, int, np.ndarray, pa.Buffer]:
    """A batch's buffer as ``_chunk_steps`` sees it."""
    array = pa.array(texts, pa.large_string())
    offsets = np.frombuffer(array.buffers()[1], np.int64)[:len(texts) + 1]
    total = int(offsets[-1])
    data = array.buffers()[2] if total else pa.py_buffer(b"\0")
    buf = np.frombuffer(data, np.uint8)[:total] if total else np.zeros(1, np.uint8)
    return buf, total, offsets, data


def classes(keys: np.ndarray) -> list[int]:
    """Each entry's first index with an equal key: equal keys as a partition."""
    first: dict[Any, int] = {}
    return [first.setdefault(k, i) for i, k in enumerate(keys.tolist())]


@pytest.mark.parametrize("seed", range(6))
def test_xml_candidates_match_numpy(seed: int) -> None:
    buf, total, offsets, _ = chunk(soups(seed, 400))
    compiled, fallback = both(lambda: xml_arrow._candidates(buf, total, offsets, NAMES))
    for field in ("lt", "rec", "closing", "taglike", "run", "term", "exact_id", "loose",
                  "self_closing"):
        got, want = getattr(compiled, field), getattr(fallback, field)
        assert got.tolist() == want.tolist(), field
    # The name hashes differ by design; equal names must hash equal in both.
    assert classes(compiled.name_hash) == classes(fallback.name_hash)
    assert len(compiled.lt) > 1000


@pytest.mark.parametrize("seed", range(6))
def test_xml_pairs_match_numpy(seed: int) -> None:
    """The nesting checks record by record (C) against the numpy passes: the same bad
    records, elements' tags, limited answers and orphans; and so the same steps."""
    texts = soups(50 + seed, 600, parts=8)
    buf, total, offsets, _ = chunk(texts)
    with tagscan.use_kernel(False):
        candidates = xml_arrow._candidates(buf, total, offsets, NAMES)
    n = len(texts)
    compiled, fallback = both(lambda: xml_arrow._pairs(candidates, n, NAMES))
    bad = fallback.bad
    assert compiled.bad.tolist() == bad.tolist()
    assert 50 < int((~bad).sum()) < n  # both kinds of record are common here
    for group in (("tok_pos", "tok_name", "tok_close", "tok_rec", "tok_end", "tok_rec"),
                  ("lim_pos", "lim_end", "lim_limit", "lim_rec", "lim_rec"),
                  ("orphan_pos", "orphan_name", "orphan_rec", "orphan_rec"),
                  ("verify_pos", "verify_rec", "verify_rec")):
        # Only good records' entries are used (bad ones are read in Python).
        keep_c = ~bad[getattr(compiled, group[-1])]
        keep_n = ~bad[getattr(fallback, group[-1])]
        for field in group[:-1]:
            got = getattr(compiled, field)[keep_c].tolist()
            assert got == getattr(fallback, field)[keep_n].tolist(), field
    steps, steps_numpy = both(lambda: xml_arrow.arrow_steps(texts, REGISTRY))
    assert steps.ok.tolist() == steps_numpy.ok.tolist()
    assert steps.steps.to_pylist() == steps_numpy.steps.to_pylist()
    assert steps.notes == steps_numpy.notes
    assert steps.unknown == steps_numpy.unknown


BODY_PARTS = [
    "<a>", "</a>", "<A>", "</A>", "<a.b-c>", "</a.b-c>", "<a x='1'>", "<a\n>", "<a\x1c>",
    "<a/>", "<_u>", "</_u>", "<1>", "<\u00e9>", "<a\u00e9>", "</a\u00e9>", "<a\u3000>", "<",
    ">", "</", "x", "code()", "\u4e2d", " ", "\n", "\t", "\x1c", "\u00a0", "\u3000", "\u2003",
    "\u0085", "\U0001f600", "<microsandbox_execute>", "</microsandbox_execute>",
]


@pytest.mark.parametrize("seed", range(4))
def test_split_actions_match_split_action(seed: int) -> None:
    """The kernel's reading of the tool bodies is ``split_action``'s: the same action names
    and values (the ones it leaves to Python included)."""
    rng = random.Random(600 + seed)
    bodies = ["".join(rng.choice(BODY_PARTS) for _ in range(rng.randint(0, 9)))
              for _ in range(3000)]
    for _ in range(1000):  # well formed, with whitespace of every kind around
        pad = [rng.choice(["", " ", "\n", "\x1c", "\u3000", "\u00a0", "\u4e2d", "x"])
               for _ in range(4)]
        name = rng.choice(["a", "microsandbox_execute", "a.b-c", "Q"])
        bodies.append(f"{pad[0]}<{name}>{pad[1]}code{pad[2]}</{name}>{pad[3]}")
    bodies += ["", "<a></a>", "<a>x</a> </a>", "<a </a>", "<a>", "  <a>\n</a>\n"]
    array = pa.array(bodies, pa.large_string())
    data = array.buffers()[2]
    offsets = np.frombuffer(array.buffers()[1], np.int64)[:len(bodies) + 1]
    expected = [xml_arrow.split_action(b) for b in bodies]
    with tagscan.use_kernel(True):
        pairs, values = xml_arrow._split_actions(data, offsets[:-1], offsets[1:])
    assert values is not None
    assert [a for a, _ in pairs] == [a for a, _ in expected]
    assert values.to_pylist() == [v for _, v in expected]
    with tagscan.use_kernel(False):
        assert xml_arrow._split_actions(data, offsets[:-1], offsets[1:]) == (expected, None)
    assert sum(a is not None for a, _ in expected) > 400
    assert tagscan.BUILT is not None
    how = np.frombuffer(tagscan.BUILT.split_actions(
        np.frombuffer(data, np.uint8), offsets[:-1].copy(), offsets[1:].copy())[0], np.uint8)
    assert (how == 1).sum() > 100 and (how == 2).sum() < len(bodies) / 2  # mostly in C


def test_xml_candidates_at_the_very_end_and_empty() -> None:
    for texts in (["<think>"], ["abc", "</think>"], ["<"], ["x<"], ["</"], [""], ["", ""],
                  ["<think>\u00e9"], ["\u00e9<think>"], ["<thin"], ["<" + "a" * 32]):
        buf, total, offsets, _ = chunk(texts)
        compiled, fallback = both(lambda buf=buf, total=total, offsets=offsets:
                                  xml_arrow._candidates(buf, total, offsets, NAMES))
        for field in ("lt", "rec", "closing", "run", "term", "exact_id", "loose"):
            assert getattr(compiled, field).tolist() == getattr(fallback, field).tolist(), (
                texts, field)


def test_a_name_of_32_bytes_or_more_is_read_not_raised() -> None:
    """The numpy scan indexed past its window for a 32-byte name run (IndexError)."""
    texts = ["<think>a</think> <" + "a" * 40 + "> b", "<" + "b" * 32 + ">"]
    compiled, fallback = both(lambda: xml_arrow.arrow_steps(texts, REGISTRY))
    assert compiled.ok.tolist() == fallback.ok.tolist()
    assert compiled.steps.to_pylist() == fallback.steps.to_pylist()


@pytest.mark.parametrize("seed", range(3))
def test_trim_and_continuations_match_numpy(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = [" ", "\t", "\n", "\x1c", "a", "\u00e9", "\u4e2d", "\U0001f600", "\u00a0",
                "\u3000", "\u2003", "\u0085", "\u1680", "\u00c2"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
             for _ in range(300)]
    buf, total, _offsets, data = chunk(texts)
    # Ranges at character boundaries, as the callers pass them.
    bounds = [0]
    for text in texts:
        pos = bounds[-1]
        bounds += [pos + len(c.encode()) for c in text]
    points = np.array(sorted(set(bounds)), np.int64)
    starts = np.array([rng.choice(points.tolist()) for _ in range(2000)], np.int64)
    ends = np.array([rng.choice(points[points >= s].tolist()) for s in starts], np.int64)
    compiled, fallback = both(lambda: xml_arrow._trim(buf, starts, ends))
    for got, want in zip(compiled, fallback, strict=True):
        assert got.tolist() == want.tolist()
    shuffled = rng.sample(points.tolist(), len(points))
    compiled, fallback = both(lambda: xml_arrow._continuation_before(
        data, np.array(shuffled, np.int64), total))
    assert compiled.tolist() == fallback.tolist()
    expected = [sum((b & 0xC0) == 0x80 for b in bytes(buf[:p])) for p in shuffled]
    assert compiled.tolist() == expected


@pytest.mark.parametrize("seed", range(6))
def test_preprocess_scan_and_counts_match_numpy(seed: int) -> None:
    texts = soups(100 + seed, 400)
    data, offsets = utf8_bytes(pa.array(texts, pa.large_string()))
    compiled, fallback = both(lambda: _scan(data, offsets))
    for field in ("row", "closing", "name", "attrs", "attr_start", "end", "self_closing",
                  "unsure"):
        assert getattr(compiled, field).tolist() == getattr(fallback, field).tolist(), field
    counts, counts_numpy = both(lambda: _tag_counts(fallback, len(texts)))
    assert counts == counts_numpy
    assert [list(c) for c in counts] == [list(c) for c in counts_numpy]  # key order too
    assert len(compiled.row) > 1000


def test_preprocess_scan_of_sliced_and_small_strings() -> None:
    texts = ["pad <think>", "\u00e9<result>x</result>", "", "<answer>a", "<a b"]
    whole = pa.array(texts, pa.string())  # 32-bit offsets: utf8_bytes casts
    for array in (whole, whole.slice(1), whole.slice(2, 2), whole.slice(5)):
        data, offsets = utf8_bytes(array)
        compiled, fallback = both(lambda data=data, offsets=offsets: _scan(data, offsets))
        for field in ("row", "closing", "name", "end", "unsure"):
            assert getattr(compiled, field).tolist() == getattr(fallback, field).tolist()


REPAIR_FRAGMENTS = [
    "<think>", "</think>", "<result>", "</result>", "<answer>", "</answer>", "<tool_param>",
    "</tool_param>", "<browser_use>", "</browser_use>", "<microsandbox>", "</microsandbox>",
    "</result >", "</result \u00a0>", "</result \u00e9>", "</result x>", "<result/>",
    "<result a='1'>", "<think/>", "</think/>", "<answer/>", "<THINK>", "<Result>", "<br/>",
    "<a>", "</a>", "x", "\u4e2d", " ", "\n",
]


@pytest.mark.parametrize("seed", range(6))
def test_repair_status_matches_numpy(seed: int) -> None:
    rng = random.Random(400 + seed)
    texts = ["".join(rng.choice(REPAIR_FRAGMENTS) for _ in range(rng.randint(0, 10)))
             for _ in range(1500)]
    for _ in range(500):  # well formed, so both answers are common
        parts = [rng.choice(["<think>t</think>", "<result>r <think> q</result>",
                             "<browser_use><a>1</a></browser_use>", "x", "<br/>",
                             "<answer>a</answer>"]) for _ in range(rng.randint(0, 6))]
        texts.append("".join(parts) + ("<answer>open" if rng.random() < 0.4 else ""))
    data, offsets = utf8_bytes(pa.array(texts, pa.large_string()))
    tags = _scan(data, offsets)
    tool_tags = list(REGISTRY.tool_tags)
    (python, closed), (python_numpy, closed_numpy) = both(
        lambda: _repair_status(tags, data, len(texts), tool_tags))
    assert python.tolist() == python_numpy.tolist()
    assert closed.tolist() == closed_numpy.tolist()
    assert 300 < int((~python).sum()) < len(texts) and closed.sum() > 50


def _fnv(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) % (1 << 64)
    return value


@pytest.mark.parametrize("seed", range(4))
def test_strip_hash_is_the_hash_of_the_regex_strip(seed: int) -> None:
    """The kernel hashes what ``replace_substring_regex(_STRIP)`` leaves, byte for byte."""
    texts = soups(200 + seed, 500, parts=8)
    texts += ["a <b c> d", "<a<b>", "a>b<c", "x\u2028y\u205fz\u202f", "\u2000\u200a\u200b"]
    values = pa.array(texts, pa.large_string())
    with tagscan.use_kernel(True):
        keys = _stripped_keys(values)
    assert isinstance(keys, np.ndarray)
    stripped = _stripped(values).to_pylist()
    assert keys.tolist() == [_fnv(s.encode()) for s in stripped]


def test_strip_hash_of_sliced_values_and_nulls() -> None:
    values = pa.array(["x", " <a> y", "y", None, "<b>y "], pa.large_string())
    with tagscan.use_kernel(True):
        sliced = _stripped_keys(values.slice(1, 2))
        with_nulls = _stripped_keys(values)
    assert isinstance(sliced, np.ndarray) and sliced[0] == sliced[1]
    # Nulls: the strings themselves, as without the kernel.
    assert not isinstance(with_nulls, np.ndarray)


def test_char_to_byte_matches_numpy_with_multibyte_edges() -> None:
    rng = random.Random(9)
    alphabet = ["a", "\u00e9", "\u4e2d", "\U0001f600", "<", ">"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70)))
             for _ in range(200)] + ["", "\U0001f600" * 20]
    for array in (pa.array(texts, pa.large_string()), pa.array(texts).slice(3)):
        data, offsets = utf8_bytes(array)
        rows = [i for i in range(len(array)) for _ in range(len(array[i].as_py()) + 1)]
        chars = [c for i in range(len(array)) for c in range(len(array[i].as_py()) + 1)]
        compiled, fallback = both(lambda data=data, offsets=offsets, rows=rows, chars=chars:
                                  _char_to_byte(data, offsets, np.array(rows, np.int64),
                                                np.array(chars, np.int64)))
        assert compiled.tolist() == fallback.tolist()
        lengths, lengths_arrow = both(lambda array=array: char_lengths(array))
        assert lengths.tolist() == lengths_arrow.tolist() == [len(t) for t in array.to_pylist()]


def test_batch_functions_agree_on_sliced_batches() -> None:
    """``screen_batch`` and ``clip_batch`` on a slice of a batch (non-zero offsets into the
    buffers) give the same with and without the kernel."""
    texts = soups(300, 200, parts=10)
    texts = [t for t in texts if t] + ["<think>\u00e9</think><answer>\u4e2d"]
    found = xml_arrow.arrow_steps(texts, REGISTRY)
    responses = found.responses.slice(7)
    steps = found.steps.slice(7)
    reparse = np.ones(len(responses), bool)

    def run() -> tuple[Any, ...]:
        screened = screen_batch(responses, steps, reparse, PreprocessConfig(), REGISTRY)
        clips = clip_batch(responses, steps)
        return (screened.fast.tolist(), screened.answer_closed.tolist(),
                screened.tool_calls.tolist(), screened.duplicates, screened.tag_counts,
                clips.fast.tolist(), clips.start.tolist(), clips.end.tolist(),
                clips.content.to_pylist(), clips.thought.to_pylist(),
                clips.result.to_pylist(), clips.answer.to_pylist(), clips.has_answer.tolist(),
                str(clips.thought.type), str(clips.answer.type))

    compiled, fallback = both(run)
    assert compiled == fallback


def test_use_kernel_switches_and_restores() -> None:
    before = tagscan.kernel()
    with tagscan.use_kernel(False):
        assert tagscan.kernel() is None
        with tagscan.use_kernel(True):
            assert tagscan.kernel() is tagscan.BUILT
        assert tagscan.kernel() is None
    assert tagscan.kernel() is before


def test_the_kernel_refuses_ranges_outside_its_buffers() -> None:
    """Bad offsets raise instead of reading outside the buffer."""
    compiled = tagscan.BUILT
    assert compiled is not None
    data = np.frombuffer("abc\u00e9def".encode(), np.uint8)
    one, five = np.array([0], np.int64), np.array([5], np.int64)
    with pytest.raises(IndexError):
        compiled.char_to_byte(data, np.array([0, 8], np.int64), one, np.array([-1], np.int64))
    with pytest.raises(IndexError):
        compiled.trim(data, one, np.array([20], np.int64))
    with pytest.raises(IndexError):
        compiled.gather(data, five, np.array([2], np.int64))
    with pytest.raises(IndexError):
        compiled.continuation_before(data, np.array([9], np.int64))
    with pytest.raises(IndexError):
        compiled.split_actions(data, one, np.array([9], np.int64))
    with pytest.raises((IndexError, ValueError)):
        compiled.join_groups(data, np.array([0, 8], np.int64), five, np.array([0], np.int64),
                             1, b"\n")
    with pytest.raises(ValueError):
        compiled.xml_scan(data, 20, np.array([0, 8], np.int64), (b"think",))
