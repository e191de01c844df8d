"""The XML-tag format's steps built in Arrow for a whole batch at once (#12.1, target 1).

:func:`~eval_pipeline.formats.xml_tags.analyze_xml_rows` reads one response at a time into
Python dicts, and every dict then has to be converted to the ``steps`` column's Arrow type
(``STEPS_ARROW_TYPE``): the two together cost several times ``json.loads`` of the batch.
Here the batch's responses go into one Arrow string array, the known tags (``<think>``,
``</result>``, the registry's tool tags ...) are found with numpy on its UTF-8 buffer, and
the steps of every response that is *simply* well formed are cut as offsets into that
buffer: the step texts are taken from it by one Arrow ``take``, no Python string per step.
The scans, the nesting checks, the trims and the offsets run in the C kernel
(``_tagscan.c``, one pass each) when it is built, in numpy when not: the same arrays
(:mod:`eval_pipeline.tagscan`).

"Simply well formed" is a condition checked per response that implies the Python reading
(``_read_well_formed``, or the tag scan ``_read_tags`` where that gives up) reads it as done
here (``test_xml_arrow.py`` holds every corpora file, generated edge cases and random tag
soup to the Python reading):

- its known tags nest: each closer closes the latest open tag, of its name; the elements
  are the outermost ones, and tags inside a body are its text (but none of the body's own
  name, nor any inside an ``<answer>``);
- what the scan reads as text between elements may be there: a closer that closes nothing,
  an opener with no tag of its name after it (noted "kept as text"), a tag of another name
  never closed, a self-closing ``<execute_tools />``; an ``<answer>`` left open is read to
  the end, or to the next known opening right after its text ("ended at the next tag");
- no other spelling of a known name occurs (``<THINK>``, ``<think x>``, ``</think >``, a
  non-ASCII character right after a name or right after ``<``: Python's case-insensitive
  regex matches some of those), and nothing else tag-like is outside the bodies;
- no ``<tool_call>`` (its JSON body is read in Python), and no step text whose trimmed edge
  is non-ASCII whitespace (``str.strip`` strips it; the byte trim here strips ASCII only).

Any other response (a tenth of the generated drop's records: a tag closed after another
of its name, an ``<execute_tools>`` wrapper, tags inside an answer ...) goes through the
Python reading, so every value is the same. Character offsets are Python ``str`` indexes:
byte offsets less the UTF-8 continuation bytes before them.

The records: a batch of plain records (only the fields the format knows, each of its one
JSON type, one object per line) is decoded straight into Arrow buffers (by the C reader
``_jsonlines.c`` when it is built, else by Arrow's JSON reader), so the responses are
never Python strings (:func:`json_table` says exactly when that reads what ``json.loads``
would); any other batch is read by ``json.loads`` per line, as the Python path does, so
quarantine, line numbers and ids stay the same. A response that does not encode as UTF-8
(an escaped lone surrogate, which ``json.loads`` accepts) cannot be held by the Arrow table
at all (before this module, ``read_batch`` raised on the whole batch when pandas made the
``str`` column): its record is quarantined as ``invalid_encoding``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pydantic import Field

from eval_pipeline.formats.base import ParseContext, RawRecord, line_ids, one_array
from eval_pipeline.formats.records import extra_json, finish_row, unregistered_row_tools
from eval_pipeline.formats.xml_tags import (
    _TRIGGER,
    StepRow,
    XmlTagParser,
    _scan,
    analyze_xml_rows,
    split_action,
    strip_clip_evaluations,
)
from eval_pipeline.models import GENERIC_TOOL_TYPE, STEP_ARROW_TYPE, ParseResult
from eval_pipeline.steps_column import steps_array
from eval_pipeline.tagscan import json_reader, kernel
from eval_pipeline.tool_registry import ToolRegistry

_WINDOW = 32
"""Bytes read after each ``<``: a known name up to 31 characters is recognised."""
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
_CHUNK_BYTES = 32 << 20
"""Responses are cut in chunks of about this many bytes: the numpy work arrays are a few
times a chunk's size, never the whole of a large batch's."""

_KINDS = ["text", "thought", "tool_result", "answer", "tool_call"]
_TEXT, _THOUGHT, _RESULT, _ANSWER, _CALL = range(5)
_KIND_ARRAY = pa.array(_KINDS, pa.large_string())

_IS_NAME = np.zeros(256, dtype=bool)
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-":
    _IS_NAME[_c] = True
_IS_FIRST = _IS_NAME.copy()
_IS_FIRST[list(b"0123456789.-")] = False
_TAGLIKE_NEXT = _IS_FIRST.copy()
_TAGLIKE_NEXT[ord("/")] = True
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[65:91] += 32
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True  # what str.strip strips < 128
_MAYBE_SPACE_LEAD = np.zeros(256, dtype=bool)
_MAYBE_SPACE_LEAD[[0xC2, 0xE1, 0xE2, 0xE3]] = True  # leads of U+0085 ... U+3000
_SELF_CLOSING = (b"execute_tools />", b"execute_tools/>")
_NOTE_UNCLOSED_ANSWER = "unclosed <answer> read to the end of the response"
_NOTE_NO_TAGS = "no tags: the whole response is one text step"


@dataclass
class _Names:
    """The known names: ``think``, ``result``, ``tool_param``, ``tool_call``, the
    registry's tool tags, then ``answer``; as packed keys for matching in numpy."""

    names: list[str]
    keys: np.ndarray  # (n, _WINDOW // 8) uint64: each name's bytes zero-padded
    answer: int
    tool_call: int
    think: int
    result: int
    tool_param: int
    sorted_hashes: np.ndarray
    hash_order: np.ndarray

    def match(self, window: np.ndarray) -> np.ndarray:
        """Each row of ``window`` (name bytes, zero-padded to ``_WINDOW``) -> the index of
        the name it spells, or -1."""
        words = np.ascontiguousarray(window).view(np.uint64)
        hashes = _hash(words)
        at = np.minimum(np.searchsorted(self.sorted_hashes, hashes),
                        len(self.sorted_hashes) - 1)
        found = np.where(self.sorted_hashes[at] == hashes, self.hash_order[at], -1)
        hit = found >= 0
        found[hit] = np.where((words[hit] == self.keys[found[hit]]).all(axis=1),
                              found[hit], -1)
        return found


def _names(registry: ToolRegistry) -> _Names | None:
    """The names to look for, or None when one cannot be matched byte for byte here."""
    element = sorted({"think", "result", "tool_param", "tool_call", *registry.tool_tags})
    if "answer" in element or not all(_NAME_RE.match(n) and n.isascii()
                                      and len(n) < _WINDOW and n == n.lower()
                                      for n in element):
        return None
    names = [*element, "answer"]
    keys = np.zeros((len(names), _WINDOW), dtype=np.uint8)
    for i, name in enumerate(names):
        keys[i, :len(name)] = np.frombuffer(name.encode(), dtype=np.uint8)
    words = keys.view(np.uint64)
    hashes = _hash(words)
    order = np.argsort(hashes)
    return _Names(names, words, len(names) - 1, names.index("tool_call"),
                  names.index("think"), names.index("result"), names.index("tool_param"),
                  hashes[order], order)


_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                 0x27D4EB2F165667C5], dtype=np.uint64)


def _hash(words: np.ndarray) -> np.ndarray:
    """One uint64 per row of packed words (wrapping arithmetic): a sort key to look names
    up by; equal rows hash equal, and every hit is checked word for word."""
    with np.errstate(over="ignore"):
        return (words * _MIX[:words.shape[1]]).sum(axis=1, dtype=np.uint64)


@dataclass
class ArrowSteps:
    """The compiled reading of a batch's responses, one entry per response handed in."""

    ok: np.ndarray
    """True where the steps here are the Python reading's; False: read it in Python."""
    steps: pa.Array
    """``STEPS_ARROW_TYPE``, one list per response (empty where not ``ok``)."""
    notes: list[list[str]]
    unknown: list[list[str]]
    """The unregistered tool names of each response's calls, sorted (``finish_row``)."""
    responses: pa.Array
    """The responses as a large_string array ("" where one is missing or not UTF-8)."""
    encoded: np.ndarray
    """True where ``responses`` holds the response."""


def _trim(buf: np.ndarray, start: np.ndarray, end: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[start, end)`` byte ranges with ASCII whitespace trimmed off both ends, and
    whether a trimmed edge may be non-ASCII whitespace (then Python must strip it)."""
    compiled = kernel()
    if compiled is not None:
        got = compiled.trim(buf, np.ascontiguousarray(start, np.int64),
                            np.ascontiguousarray(end, np.int64))
        s, e, lead_end = (np.frombuffer(x, np.int64) for x in got[:3])
        return s, e, _unsure_edges(buf, s, e, lead_end, np.frombuffer(got[3], np.bool_))
    s, e = start.copy(), end.copy()
    for _ in range(16):
        more = (s < e) & _ASCII_SPACE[buf[np.minimum(s, len(buf) - 1)]]
        if not more.any():
            break
        s[more] += 1
    else:
        for i in np.flatnonzero((s < e) & _ASCII_SPACE[buf[np.minimum(s, len(buf) - 1)]]):
            rest = np.flatnonzero(~_ASCII_SPACE[buf[s[i]:e[i]]])
            s[i] = s[i] + rest[0] if len(rest) else e[i]
    for _ in range(16):
        more = (e > s) & _ASCII_SPACE[buf[np.maximum(e - 1, 0)]]
        if not more.any():
            break
        e[more] -= 1
    else:
        for i in np.flatnonzero((e > s) & _ASCII_SPACE[buf[np.maximum(e - 1, 0)]]):
            rest = np.flatnonzero(~_ASCII_SPACE[buf[s[i]:e[i]]])
            e[i] = s[i] + rest[-1] + 1 if len(rest) else s[i]
    filled = s < e
    # The first character's lead byte, and the last character's (back over up to three
    # continuation bytes).
    lead_end = np.maximum(e - 1, 0)
    for _ in range(3):
        back = (lead_end > s) & ((buf[lead_end] & 0xC0) == 0x80)
        lead_end[back] -= 1
    suspect = filled & (_MAYBE_SPACE_LEAD[buf[np.minimum(s, len(buf) - 1)]]
                        | _MAYBE_SPACE_LEAD[buf[lead_end]])
    return s, e, _unsure_edges(buf, s, e, lead_end, suspect)


def _unsure_edges(buf: np.ndarray, s: np.ndarray, e: np.ndarray, lead_end: np.ndarray,
                  suspect: np.ndarray) -> np.ndarray:
    """Of the trimmed ranges whose first or last character may be non-ASCII whitespace
    (``suspect``: its lead byte is one such characters have), those where it is."""
    unsure = np.zeros(len(s), dtype=bool)
    for i in np.flatnonzero(suspect):
        first = bytes(buf[s[i]:min(s[i] + 3, e[i])]).decode("utf-8", "ignore")[:1]
        last = bytes(buf[lead_end[i]:e[i]]).decode("utf-8", "ignore")
        unsure[i] = first.isspace() or last.isspace()
    return unsure


def _depth_before(closing: np.ndarray, record: np.ndarray, n: int) -> np.ndarray:
    """Each tag's nesting depth before it, within its record, a closer at depth 0 leaving
    it at 0 (it closes nothing): the running sum less its running minimum (below 0), the
    minimum kept from running across records by offsets that fall record by record."""
    if not len(closing):
        return np.zeros(0, dtype=np.int64)
    delta = np.where(closing, -1, 1)
    total = np.cumsum(delta)
    count = np.bincount(record, minlength=n)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    base = np.concatenate([[0], total])[start]
    after = total - base[record]  # the plain depth after each tag
    before = after - delta
    step = 4 * (len(closing) + 1)
    shift = (n - record).astype(np.int64) * step
    lowest = np.minimum.accumulate(np.minimum(before, 0) + shift) - shift
    return before - np.minimum(lowest, 0)


def _continuation_before(data: pa.Buffer, points: np.ndarray, total: int) -> np.ndarray:
    """The UTF-8 continuation bytes in ``data[:p]`` for each point ``p`` (each at a
    character boundary): between neighbouring points, bytes less characters, the
    characters counted by Arrow's ``utf8_length`` over a zero-copy array of the pieces
    (or by the C kernel in one pass, any order of points)."""
    compiled = kernel()
    if compiled is not None:
        view = np.frombuffer(data, np.uint8)[:total]
        return np.frombuffer(compiled.continuation_before(
            view, np.ascontiguousarray(points, np.int64)), np.int64)
    cuts, inverse = np.unique(np.concatenate([[0], points, [total]]), return_inverse=True)
    pieces = pa.LargeStringArray.from_buffers(len(cuts) - 1, pa.py_buffer(cuts), data)
    chars = pc.utf8_length(pieces).to_numpy(zero_copy_only=False)
    before = np.concatenate([[0], np.cumsum(np.diff(cuts) - chars)])
    return before[inverse.ravel()][1:-1]


def _gather(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The strings ``data[starts[i]:ends[i]]`` (ascending, not overlapping ranges) as one
    large_string array: a zero-copy array whose strings alternate wanted ranges and the
    bytes between them, then one ``take`` of the wanted ones."""
    n = len(starts)
    if not n:
        return pa.array([], pa.large_string())
    compiled = kernel()
    if compiled is not None:  # the ranges copied in one pass (any order)
        out_offsets, out_data = compiled.gather(
            np.frombuffer(data, np.uint8), np.ascontiguousarray(starts, np.int64),
            np.ascontiguousarray(ends, np.int64))
        return pa.LargeStringArray.from_buffers(n, pa.py_buffer(out_offsets),
                                                pa.py_buffer(out_data))
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = ends
    every = pa.LargeStringArray.from_buffers(2 * n - 1, pa.py_buffer(bounds), data)
    return every.take(pa.array(np.arange(0, 2 * n, 2)))


def arrow_steps(texts: Sequence[str | None], registry: ToolRegistry) -> ArrowSteps:
    """The steps of ``texts`` (None: no response to read), chunk by chunk."""
    n = len(texts)
    parts: list[ArrowSteps] = []
    begin = size = 0
    for i, text in enumerate(texts):
        size += len(text) if isinstance(text, str) else 0
        if size >= _CHUNK_BYTES or i == n - 1:
            array, encoded = _encode(texts[begin:i + 1])
            parts.append(array_steps(array, encoded, registry))
            begin, size = i + 1, 0
    return _joined(parts, n)


def _joined(parts: list[ArrowSteps], n: int) -> ArrowSteps:
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return _nothing(n)
    return ArrowSteps(np.concatenate([p.ok for p in parts]),
                      pa.concat_arrays([p.steps for p in parts]),
                      [x for p in parts for x in p.notes],
                      [x for p in parts for x in p.unknown],
                      pa.concat_arrays([p.responses for p in parts]),
                      np.concatenate([p.encoded for p in parts]))


def _nothing(n: int, responses: pa.Array | None = None) -> ArrowSteps:
    """Every response left to Python."""
    return ArrowSteps(np.zeros(n, dtype=bool), pa.array([[]] * n, pa.list_(STEP_ARROW_TYPE)),
                      [[] for _ in range(n)], [[] for _ in range(n)],
                      pa.array([""] * n, pa.large_string()) if responses is None
                      else responses, np.zeros(n, dtype=bool))


def array_steps(array: pa.LargeStringArray, present: np.ndarray, registry: ToolRegistry
                ) -> ArrowSteps:
    """The steps of the responses in ``array`` (valid UTF-8, no nulls; ``present``: which
    entries are responses at all), in chunks of about ``_CHUNK_BYTES``."""
    names = _names(registry)
    n = len(array)
    if names is None or not n:
        return _nothing(n, array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[:n + 1]
    if array.offset or offsets[0]:
        array = pa.concat_arrays([array])  # a fresh array: offsets from 0 at 0
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[:n + 1]
    parts: list[ArrowSteps] = []
    begin = 0
    while begin < n:
        end = int(np.searchsorted(offsets, offsets[begin] + _CHUNK_BYTES, side="left"))
        end = min(max(end, begin + 1), n)
        chunk = array if (begin, end) == (0, n) else pa.concat_arrays([array[begin:end]])
        parts.append(_chunk_steps(chunk, present[begin:end], registry, names))
        begin = end
    return _joined(parts, n)


def _encode(texts: Sequence[str | None]) -> tuple[pa.LargeStringArray, np.ndarray]:
    """The texts as one large_string array ("" for a missing one or one that does not
    encode as UTF-8: a lone surrogate), and which of them are really there."""
    strs = [t if isinstance(t, str) else "" for t in texts]
    present = np.array([isinstance(t, str) for t in texts], dtype=bool)
    try:
        return pa.array(strs, pa.large_string()), present
    except UnicodeEncodeError:
        for i, s in enumerate(strs):
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:
                strs[i] = ""
                present[i] = False
        return pa.array(strs, pa.large_string()), present


@dataclass
class _Candidates:
    """Every ``<`` of a chunk that may open a tag (followed by a letter, ``_``, ``/`` or a
    non-ASCII byte), one entry each, in position order."""

    lt: np.ndarray
    """Its byte position."""
    rec: np.ndarray
    """Its record."""
    closing: np.ndarray
    """``</``."""
    taglike: np.ndarray
    """Followed by a letter, ``_`` or ``/`` (not a non-ASCII byte)."""
    run: np.ndarray
    """Name bytes (``[A-Za-z0-9_.-]``) after it, at most ``_WINDOW``."""
    term: np.ndarray
    """The byte after those (0 past the end)."""
    exact_id: np.ndarray
    """The known name it opens or closes spelt exactly (``<think>``), else -1."""
    loose: np.ndarray
    """A known name in another spelling, or a non-ASCII byte where a name starts or ends:
    Python's case-insensitive regex may read it as a tag."""
    name_hash: np.ndarray
    """Equal for equal lower-cased names (a sort key; equality is checked where it counts
    by a Python fallback, so a collision only sends a record to Python)."""
    self_closing: np.ndarray
    """``execute_tools />`` or ``execute_tools/>`` follows."""


def _candidates(buf: np.ndarray, total: int, offsets: np.ndarray, names: _Names
                ) -> _Candidates:
    """The chunk's candidate tags: by the C kernel in one pass over the buffer when it is
    built (:mod:`eval_pipeline.tagscan`), else with numpy (the same arrays)."""
    compiled = kernel()
    if compiled is not None:
        encoded_names = tuple(name.encode() for name in names.names)
        (lt, rec, closing, taglike, run, term, exact_id, loose, name_hash,
         self_closing) = compiled.xml_scan(buf, total, offsets, encoded_names)
        return _Candidates(
            np.frombuffer(lt, np.int64), np.frombuffer(rec, np.int64),
            np.frombuffer(closing, np.bool_), np.frombuffer(taglike, np.bool_),
            np.frombuffer(run, np.int64), np.frombuffer(term, np.uint8),
            np.frombuffer(exact_id, np.int64), np.frombuffer(loose, np.bool_),
            np.frombuffer(name_hash, np.uint64), np.frombuffer(self_closing, np.bool_))

    def byte_at(at: np.ndarray) -> np.ndarray:
        """The bytes at ``at``, 0 past the end (no padded copy of the buffer)."""
        got = buf.take(at, mode="clip")
        got[at >= total] = 0
        return got

    lt = np.flatnonzero(buf[:total] == 60)
    after = byte_at(lt + 1)
    lt = lt[_TAGLIKE_NEXT[after] | (after >= 0x80)]
    after = byte_at(lt + 1)
    closing = after == 47
    name_at = lt + 1 + closing
    first = byte_at(name_at)
    # One byte more than a name may have: the byte after a full window of name bytes.
    window = byte_at(name_at[:, None] + np.arange(_WINDOW + 1))
    is_name = _IS_NAME[window[:, :_WINDOW]]
    run = np.where(is_name.all(axis=1), _WINDOW, is_name.argmin(axis=1))
    term = window[np.arange(len(lt)), run]
    clipped = np.where(np.arange(_WINDOW) < run[:, None], window[:, :_WINDOW], 0)
    lowered = np.ascontiguousarray(_LOWER[clipped])
    lower_id = names.match(lowered)
    lower_hash = _hash(lowered.view(np.uint64))
    # The names are lower case: a name spelt exactly is one whose lowering changed nothing.
    exact_id = np.where((clipped == lowered).all(axis=1), lower_id, -1)
    exact_id[(term != 62) | (run == _WINDOW)] = -1
    loose = (((lower_id >= 0) & _IS_FIRST[first]) | (first >= 0x80)
             | ((term >= 0x80) & _IS_FIRST[first]))
    self_closing = np.zeros(len(lt), dtype=bool)
    for pattern in _SELF_CLOSING:
        width = len(pattern)
        self_closing |= (window[:, :width] == np.frombuffer(pattern, dtype=np.uint8)).all(axis=1)
    return _Candidates(lt, np.searchsorted(offsets, lt, side="right") - 1, closing,
                       _TAGLIKE_NEXT[after], run, term, exact_id, loose, lower_hash,
                       self_closing)


@dataclass
class _Pairs:
    """What the nesting checks leave of a chunk's candidates (see ``_pairs``)."""

    bad: np.ndarray
    """Per record: read it in Python (some rule of the module docstring broken)."""
    tok_pos: np.ndarray
    """The level-1 tags (the elements' openers and closers), in position order."""
    tok_name: np.ndarray
    tok_close: np.ndarray
    tok_rec: np.ndarray
    tok_end: np.ndarray
    lim_pos: np.ndarray
    """The ``<answer>`` openers followed right away by a known opener, between elements
    (an element each, to that tag: ``lim_limit``)."""
    lim_rec: np.ndarray
    lim_end: np.ndarray
    lim_limit: np.ndarray
    orphan_pos: np.ndarray
    """Openers with no later tag of their name, between elements (noted, kept as text)."""
    orphan_rec: np.ndarray
    orphan_name: np.ndarray
    verify_pos: np.ndarray
    """Openers of other names, between elements, with a closer of their name further on
    (``<execute_tools>`` ... ``</execute_tools>``): text, unless the closer the tag scan
    pairs them with is followed by a trigger (then an unregistered tool call): checked per
    record by :func:`_triggered` (``verify_rec``: their records)."""
    verify_rec: np.ndarray


def _pairs(cand: _Candidates, n: int, names: _Names) -> _Pairs:
    """The candidates' nesting checked record by record: by the C kernel in one pass when
    it is built, else with numpy (the same arrays; ``test_tagscan.py``)."""
    compiled = kernel()
    if compiled is not None:
        bad, arrays = compiled.xml_pair(
            cand.lt, cand.rec, cand.closing, cand.taglike, cand.run, cand.term,
            cand.exact_id, cand.loose, cand.name_hash, cand.self_closing, n, names.answer,
            names.tool_call)
        got = [np.frombuffer(a, np.uint8 if i == 2 else np.int64)
               for i, a in enumerate(arrays)]
        return _Pairs(np.frombuffer(bad, np.bool_).copy(), got[0], got[1],
                      got[2].view(np.bool_), *got[3:])
    return _pairs_numpy(cand, n, names)


def _pairs_numpy(cand: _Candidates, n: int, names: _Names) -> _Pairs:
    lt, record_of_lt, closing, taglike = cand.lt, cand.rec, cand.closing, cand.taglike
    run, term, exact_id, loose = cand.run, cand.term, cand.exact_id, cand.loose
    lower_hash = cand.name_hash
    name_at = lt + 1 + closing

    bad = np.zeros(n, dtype=bool)
    bad[record_of_lt[loose & (exact_id < 0)]] = True

    # The known tags must nest: each closer closes the latest open tag, of its name. The
    # elements are the outermost ones (level 1); tags inside a body are its text, but
    # not one of the body's own name (the element regex stops there) nor any inside an
    # <answer> (its body holds no tag). An <answer> may stay open if nothing follows it.
    is_tok = exact_id >= 0
    all_pos = lt[is_tok]
    all_name = exact_id[is_tok]
    all_close = closing[is_tok]
    all_rec = record_of_lt[is_tok]
    all_end = name_at[is_tok] + run[is_tok] + 1
    bad[all_rec[all_name == names.tool_call]] = True
    # A closer outside every known element (a stray </result> between elements) pairs
    # with nothing in the tag scan, which reads it as text: it is dropped from the tags.
    # An <answer> whose next tag-like text is an opening of a known name ends before it,
    # trailing whitespace left out (the scan's limit: generation stopped in the answer and
    # the agent went on). It is an element of its own, taken out of the tags; a closer of
    # it further on is then stray text, as the scan reads it.
    tok_lt = np.flatnonzero(is_tok)
    next_lt = np.minimum(tok_lt + 1, max(len(lt) - 1, 0))
    limited = (~all_close & (all_name == names.answer) & (tok_lt + 1 < len(lt))
               & (record_of_lt[next_lt] == all_rec) & (exact_id[next_lt] >= 0)
               & ~closing[next_lt])
    lim_pos, lim_rec, lim_end = all_pos[limited], all_rec[limited], all_end[limited]
    lim_limit = lt[next_lt[limited]]
    all_pos, all_name, all_close = all_pos[~limited], all_name[~limited], all_close[~limited]
    all_rec, all_end = all_rec[~limited], all_end[~limited]
    # An opener with no tag of its name after it (an unclosed <think>) is never paired:
    # the scan keeps it as text, noting it where it lies between elements, and skips it
    # unnoted inside an element read already. It is dropped from the tags too.
    by_name = np.lexsort((all_pos, all_name, all_rec))
    followed = np.zeros(len(by_name), dtype=bool)
    followed[:-1] = ((all_rec[by_name][1:] == all_rec[by_name][:-1])
                     & (all_name[by_name][1:] == all_name[by_name][:-1]))
    later_same = np.empty(len(by_name), dtype=bool)
    later_same[by_name] = followed
    orphan = ~all_close & ~later_same & (all_name != names.answer)
    orphan_pos, orphan_rec, orphan_name = all_pos[orphan], all_rec[orphan], all_name[orphan]
    all_pos, all_name, all_close = all_pos[~orphan], all_name[~orphan], all_close[~orphan]
    all_rec, all_end = all_rec[~orphan], all_end[~orphan]
    stray = all_close & (_depth_before(all_close, all_rec, n) == 0)
    keep_tok = ~stray
    all_pos, all_name, all_close = all_pos[keep_tok], all_name[keep_tok], all_close[keep_tok]
    all_rec, all_end = all_rec[keep_tok], all_end[keep_tok]
    depth = _depth_before(all_close, all_rec, n) + np.where(all_close, -1, 1)
    count_all = np.bincount(all_rec, minlength=n)
    start_all = np.concatenate([[0], np.cumsum(count_all)[:-1]])
    level = np.where(all_close, depth + 1, depth)
    bad[all_rec[level <= 0]] = True
    order = np.lexsort((np.arange(len(all_pos)), level, all_rec))
    o_rec, o_level = all_rec[order], level[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (o_rec[1:] != o_rec[:-1]) | (o_level[1:] != o_level[:-1])
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(len(order)), 0))
    in_group = np.arange(len(order)) - group_start
    o_close, o_name = all_close[order], all_name[order]
    odd_group = (in_group % 2) == 1
    wrong = np.where(odd_group, ~o_close, o_close)
    prev_o_name = np.concatenate([[-1], o_name[:-1]])
    wrong |= odd_group & (o_name != prev_o_name)
    bad[o_rec[wrong]] = True
    group_end = np.concatenate([new_group[1:], [True]])
    dangling = group_end & ~odd_group  # an open tag never closed
    last_of_record = np.zeros(len(all_pos), dtype=bool)
    if len(all_pos):
        last_of_record[start_all[count_all > 0] + count_all[count_all > 0] - 1] = True
    dangling_ok = ((o_level == 1) & (o_name == names.answer)
                   & last_of_record[order])
    bad[o_rec[dangling & ~dangling_ok]] = True

    top = level == 1
    tok_pos = all_pos[top]
    tok_name = all_name[top]
    tok_close = all_close[top]
    tok_rec = all_rec[top]
    tok_end = all_end[top]
    inner = np.flatnonzero(~top & (level > 0))
    if len(inner):
        outer = np.maximum(np.searchsorted(tok_pos, all_pos[inner], side="right") - 1, 0)
        clash = ((tok_rec[outer] != all_rec[inner]) | tok_close[outer]
                 | (tok_name[outer] == all_name[inner]) | (tok_name[outer] == names.answer))
        bad[all_rec[inner][clash]] = True
    lim_top = np.ones(len(lim_pos), dtype=bool)
    if len(lim_pos):
        outer = np.searchsorted(tok_pos, lim_pos, side="right") - 1
        safe_outer = np.maximum(outer, 0)
        opened_before = ((outer >= 0) & (tok_rec[safe_outer] == lim_rec)
                         & ~tok_close[safe_outer])
        bad[lim_rec[opened_before & (tok_name[safe_outer] == names.answer)]] = True
        lim_top = ~opened_before  # inside an element read already: text of its body
    lim_pos, lim_rec, lim_end, lim_limit = (lim_pos[lim_top], lim_rec[lim_top],
                                            lim_end[lim_top], lim_limit[lim_top])
    if len(orphan_pos):
        outer = np.searchsorted(tok_pos, orphan_pos, side="right") - 1
        safe_outer = np.maximum(outer, 0)
        opened_before = ((outer >= 0) & (tok_rec[safe_outer] == orphan_rec)
                         & ~tok_close[safe_outer])
        bad[orphan_rec[opened_before & (tok_name[safe_outer] == names.answer)]] = True
        orphan_pos, orphan_rec, orphan_name = (orphan_pos[~opened_before],
                                               orphan_rec[~opened_before],
                                               orphan_name[~opened_before])

    # Anything tag-like outside the elements' bodies, or inside an <answer>.
    loose_tag = taglike & (exact_id < 0)
    at = lt[loose_tag]
    before = np.searchsorted(tok_pos, at, side="right") - 1
    rec_at = record_of_lt[loose_tag]
    safe_before = np.maximum(before, 0)
    opened = (before >= 0) & (tok_rec[safe_before] == rec_at) & ~tok_close[safe_before]
    inside = opened & (tok_name[safe_before] != names.answer)
    in_answer = opened & (tok_name[safe_before] == names.answer)
    self_closing = cand.self_closing[loose_tag]
    # Between elements the tag scan reads a tag of another name as text: a closer pairs
    # with nothing there (no known element is open, and an opener of its name is either
    # inside an element read already or refused here), an opener stays unclosed, and so
    # is skipped, if no closer of its name (in any case) follows it anywhere.
    gap_close = closing[loose_tag]
    gap_open = ~gap_close & ~self_closing & ~inside & ~in_answer
    known_run = (run[loose_tag] > 0) & (run[loose_tag] < _WINDOW) & (term[loose_tag] < 0x80)
    later_close = np.zeros(len(at), dtype=bool)
    opener_at = np.flatnonzero(gap_open & known_run)
    if len(opener_at):
        closers = np.flatnonzero(closing)
        with np.errstate(over="ignore"):
            close_key = lower_hash[closers] ^ (record_of_lt[closers].astype(np.uint64)
                                              * np.uint64(0x9E3779B97F4A7C15))
            open_key = lower_hash[loose_tag][opener_at] ^ (
                rec_at[opener_at].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        order = np.lexsort((lt[closers], close_key))
        sorted_key = close_key[order]
        last_pos = lt[closers][order]
        group_last = np.concatenate([sorted_key[1:] != sorted_key[:-1], [True]])
        unique_key, latest = sorted_key[group_last], last_pos[group_last]
        where = np.minimum(np.searchsorted(unique_key, open_key), max(len(unique_key) - 1, 0))
        if len(unique_key):
            later_close[opener_at] = ((unique_key[where] == open_key)
                                      & (latest[where] > at[opener_at]))
    allowed_gap = self_closing | gap_close | (gap_open & known_run & ~later_close)
    verify = gap_open & known_run & later_close
    allowed_gap |= verify
    bad[rec_at[~inside & (in_answer | ~allowed_gap)]] = True
    return _Pairs(bad, tok_pos, tok_name, tok_close, tok_rec, tok_end, lim_pos, lim_rec,
                  lim_end, lim_limit, orphan_pos, orphan_rec, orphan_name, at[verify],
                  rec_at[verify])


def _triggered(array: pa.LargeStringArray, offsets: np.ndarray, buf: np.ndarray,
               positions: np.ndarray, records: np.ndarray, bad: np.ndarray) -> list[int]:
    """The records (of ``records``, not ``bad`` already) where an opener at byte
    ``positions`` is read by the tag scan as an unregistered tool call: paired with a
    closer followed by a trigger (``<execute_tools/>``, ``<result>``). Asked of the tag
    scan itself (:func:`xml_tags._scan`, one pass in C), on the few records that hold such
    a pair: most are not tool calls, and reading the whole record in Python cost ten
    times more."""
    found: list[int] = []
    by_record: dict[int, list[int]] = {}
    for position, record in zip(positions.tolist(), records.tolist(), strict=True):
        if not bad[record]:
            by_record.setdefault(record, []).append(position)
    for record, at in by_record.items():
        start = int(offsets[record])
        text = array[record].as_py()
        chars = [len(bytes(buf[start:p]).decode()) for p in at]
        starts, _ends, _tags, close_starts, close_ends, _same = _scan(text)
        index = {s: i for i, s in enumerate(starts)}
        for char in chars:
            i = index.get(char)
            if i is not None and close_starts[i] >= 0 and _TRIGGER.match(text, close_ends[i]):
                found.append(record)
                break
    return found


def _chunk_steps(array: pa.LargeStringArray, encoded: np.ndarray, registry: ToolRegistry,
                 names: _Names) -> ArrowSteps:
    ok = encoded.copy()
    n = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[:n + 1]
    data = array.buffers()[2]
    total = int(offsets[-1])
    if data is None or total == 0:
        data = pa.py_buffer(b"\0")
    buf = np.frombuffer(data, dtype=np.uint8)[:total]
    if not total:
        buf = np.zeros(1, dtype=np.uint8)

    pairs = _pairs(_candidates(buf, total, offsets, names), n, names)
    bad = pairs.bad
    tok_pos, tok_name, tok_close = pairs.tok_pos, pairs.tok_name, pairs.tok_close
    tok_rec, tok_end = pairs.tok_rec, pairs.tok_end
    lim_pos, lim_rec, lim_end, lim_limit = (pairs.lim_pos, pairs.lim_rec, pairs.lim_end,
                                            pairs.lim_limit)
    orphan_pos, orphan_rec, orphan_name = pairs.orphan_pos, pairs.orphan_rec, pairs.orphan_name
    lim_first, lim_body_end, lim_unsure = _trim(buf, lim_end, lim_limit)
    lim_body_end = np.where(lim_first < lim_body_end, lim_body_end, lim_end)  # all blank
    bad[lim_rec[lim_unsure]] = True
    bad[_triggered(array, offsets, buf, pairs.verify_pos, pairs.verify_rec, bad)] = True
    ok &= ~bad

    # The elements of the records read here: open tag and its closer (or the end).
    count = np.bincount(tok_rec, minlength=n)
    first_tok = np.concatenate([[0], np.cumsum(count)[:-1]])
    k = np.arange(len(tok_pos)) - first_tok[tok_rec]
    good_tok = ok[tok_rec]
    open_idx = np.flatnonzero(good_tok & ~tok_close)
    e_rec = tok_rec[open_idx]
    e_name = tok_name[open_idx]
    e_start = tok_pos[open_idx]
    e_open_end = tok_end[open_idx]
    closed = k[open_idx] + 1 < count[e_rec]
    close_idx = np.where(closed, open_idx + 1, open_idx)
    e_body_end = np.where(closed, tok_pos[close_idx], offsets[e_rec + 1])
    e_end = np.where(closed, tok_end[close_idx], offsets[e_rec + 1])
    keep_lim = ok[lim_rec]
    if keep_lim.any():
        e_rec = np.concatenate([e_rec, lim_rec[keep_lim]])
        e_name = np.concatenate([e_name, np.full(int(keep_lim.sum()), names.answer)])
        e_start = np.concatenate([e_start, lim_pos[keep_lim]])
        e_open_end = np.concatenate([e_open_end, lim_end[keep_lim]])
        closed = np.concatenate([closed, np.ones(int(keep_lim.sum()), dtype=bool)])
        e_body_end = np.concatenate([e_body_end, lim_body_end[keep_lim]])
        e_end = np.concatenate([e_end, lim_body_end[keep_lim]])
        by_start = np.argsort(e_start, kind="stable")
        e_rec, e_name, e_start, e_open_end = (e_rec[by_start], e_name[by_start],
                                              e_start[by_start], e_open_end[by_start])
        closed, e_body_end, e_end = closed[by_start], e_body_end[by_start], e_end[by_start]
    m = len(e_rec)
    e_first = np.concatenate([[0], np.cumsum(np.bincount(e_rec, minlength=n))[:-1]])
    e_k = np.arange(m) - e_first[e_rec]
    same_prev = np.concatenate([[False], e_rec[1:] == e_rec[:-1]]) if m else np.zeros(0, bool)
    prev_end = np.where(same_prev, np.concatenate([[0], e_end[:-1]]) if m else e_end,
                        offsets[e_rec])
    e_prev_name = np.where(same_prev, np.concatenate([[-1], e_name[:-1]]) if m else e_name,
                           -1)

    # Items in reading order: the gap before each element, the element, each record's tail.
    recs = np.flatnonzero(ok)
    n_elems = np.bincount(e_rec, minlength=n)
    last_end = offsets[:-1].copy()
    if m:
        is_last = np.concatenate([e_rec[1:] != e_rec[:-1], [True]])
        last_end[e_rec[is_last]] = e_end[is_last]
    g_rec = np.concatenate([e_rec, e_rec, recs])
    g_seq = np.concatenate([2 * e_k, 2 * e_k + 1, 2 * n_elems[recs]])
    g_elem = np.concatenate([np.full(m, -1), np.arange(m), np.full(len(recs), -1)])
    g_start = np.concatenate([prev_end, e_start, last_end[recs]])
    g_end = np.concatenate([e_start, e_end, offsets[recs + 1]])
    order = np.lexsort((g_seq, g_rec))
    g_rec, g_elem, g_start, g_end = g_rec[order], g_elem[order], g_start[order], g_end[order]
    is_elem = g_elem >= 0
    el = np.maximum(g_elem, 0)
    name = np.where(is_elem, e_name[el] if m else -1, -1)

    # Content ranges: trimmed gaps and bodies, whole elements for tool tags / tool_param.
    whole = is_elem & ((name == names.tool_param) | ((name != names.think)
                       & (name != names.result) & (name != names.answer)))
    body_start = np.where(is_elem & ~whole, e_open_end[el] if m else 0, g_start)
    body_end = np.where(is_elem & ~whole, e_body_end[el] if m else 0, g_end)
    c_start, c_end, unsure = _trim(buf, body_start, body_end)
    c_start = np.where(whole, g_start, c_start)
    c_end = np.where(whole, g_end, c_end)
    unsure &= ~whole
    bad_items = np.zeros(n, dtype=bool)
    bad_items[g_rec[unsure]] = True
    keep = is_elem | (c_start < c_end)
    keep &= ~bad_items[g_rec]
    ok &= ~bad_items
    g_rec, g_elem, g_start, g_end = g_rec[keep], g_elem[keep], g_start[keep], g_end[keep]
    is_elem, el, name = is_elem[keep], el[keep], name[keep]
    c_start, c_end, whole = c_start[keep], c_end[keep], whole[keep]

    kind = np.full(len(g_rec), _TEXT, dtype=np.int64)
    kind[name == names.think] = _THOUGHT
    kind[name == names.answer] = _ANSWER
    after_param = is_elem & (name == names.result) & (
        (e_prev_name[el] if m else name) == names.tool_param)
    kind[(name == names.result) & ~after_param] = _RESULT
    is_tool = is_elem & whole & (name != names.tool_param)
    kind[is_tool] = _CALL

    # Character offsets: bytes less the continuation bytes before them in the record.
    noted = ok[orphan_rec]
    noted_text = [f"unclosed <{names.names[nm]}> at char {{}} kept as text"
                  for nm in orphan_name[noted].tolist()]
    lim_noted = ok[lim_rec]
    noted_text += ["unclosed <answer> at char {} ended at the next tag"] * int(lim_noted.sum())
    noted_pos = np.concatenate([orphan_pos[noted], lim_pos[lim_noted]])
    noted_rec = np.concatenate([orphan_rec[noted], lim_rec[lim_noted]])
    by_pos = np.argsort(noted_pos, kind="stable")
    noted_pos, noted_rec = noted_pos[by_pos], noted_rec[by_pos]
    noted_text = [noted_text[i] for i in by_pos.tolist()]
    points = np.concatenate([offsets[:-1], g_start, g_end, noted_pos])
    cum = _continuation_before(data, points, total)
    noted_char = (noted_pos - offsets[noted_rec]
                  - (cum[len(points) - len(noted_pos):] - cum[noted_rec]))
    n_rec = len(offsets) - 1
    rec_cum = cum[:n_rec]
    start_cum = cum[n_rec:n_rec + len(g_start)]
    end_cum = cum[n_rec + len(g_start):n_rec + 2 * len(g_start)]
    base = offsets[g_rec]
    char_start = g_start - base - (start_cum - rec_cum[g_rec])
    char_end = g_end - base - (end_cum - rec_cum[g_rec])

    # Tool calls: the action tag inside, read by the Python function the reading uses.
    count_steps = len(g_rec)
    unknown: list[list[str]] = [[] for _ in range(n)]
    tags = names.names
    # Tool fields: a value per tool step (and "tool_param" for the lookups), spread over
    # the steps by one take with null indices elsewhere, not a Python list per step.
    param_rows = np.flatnonzero(after_param | (name == names.tool_param))
    tool_rows = np.flatnonzero(is_tool)
    call_names: list[str] = []
    call_types: list[str] = []
    call_inputs: list[str | None] = []
    inputs: pa.Array | None = None
    if len(tool_rows):
        body_start, body_end = e_open_end[el[tool_rows]], e_body_end[el[tool_rows]]
        actions, inputs = _split_actions(data, body_start, body_end)
        unknown_sets: dict[int, set[str]] = {}
        # (tag, action) -> (name, type): a batch's calls use a few dozen of them.
        typed: dict[tuple[int, str | None], tuple[str, str]] = {}
        for r, (action, value), nm in zip(g_rec[tool_rows].tolist(), actions,
                                          name[tool_rows].tolist(), strict=True):
            call = typed.get((nm, action))
            if call is None:
                call = typed[nm, action] = _call_type(tags[nm], action, registry)
            if call[1] == GENERIC_TOOL_TYPE:
                unknown_sets.setdefault(r, set()).add(call[0])
            call_names.append(call[0])
            call_types.append(call[1])
            call_inputs.append(value)
        for r, found in unknown_sets.items():
            unknown[r] = sorted(found)
    spread = np.full(count_steps, -1, dtype=np.int64)
    spread[tool_rows] = np.arange(len(tool_rows))
    spread_names = spread.copy()
    spread_names[param_rows] = len(tool_rows)
    at_call = pa.array(spread, mask=spread < 0)
    at_name = pa.array(spread_names, mask=spread_names < 0)
    tool_name = pa.array([*call_names, "tool_param"], pa.large_string()).take(at_name)
    tool_type = pa.array(call_types, pa.large_string()).take(at_call)
    tool_input = (inputs if inputs is not None
                  else pa.array(call_inputs, pa.large_string())).take(at_call)

    notes: list[list[str]] = [[] for _ in range(n)]
    for r, note, at_char in zip(noted_rec.tolist(), noted_text, noted_char.tolist(),
                                strict=True):
        notes[r].append(note.format(at_char))
    unclosed = np.zeros(n, dtype=bool)
    if m:
        unclosed[e_rec[~closed & (e_name == names.answer)]] = True
    non_text = np.bincount(g_rec[kind != _TEXT], minlength=n)
    for r in np.flatnonzero(ok & unclosed).tolist():
        notes[r].append(_NOTE_UNCLOSED_ANSWER)
    for r in np.flatnonzero(ok & (non_text == 0)).tolist():
        notes[r].append(_NOTE_NO_TAGS)

    none_str = pa.nulls(count_steps, pa.large_string())
    struct = pa.StructArray.from_arrays(
        [_KIND_ARRAY.take(pa.array(kind)), _gather(data, c_start, c_end),
         pa.array(char_start, pa.int64()), pa.array(char_end, pa.int64()),
         tool_name, tool_type, tool_input, none_str,
         pa.nulls(count_steps, pa.int64()), pa.nulls(count_steps, pa.float64())],
        fields=list(STEP_ARROW_TYPE))
    per_record = np.bincount(g_rec, minlength=n)
    list_offsets = np.concatenate([[0], np.cumsum(per_record)]).astype(np.int32)
    steps = pa.ListArray.from_arrays(pa.array(list_offsets), struct,
                                     type=pa.list_(STEP_ARROW_TYPE))
    return ArrowSteps(ok, steps, notes, unknown, array, encoded)


def _call_type(tag: str, action: str | None, registry: ToolRegistry) -> tuple[str, str]:
    """A call's name and tool type from its tag and action, as the tag scan types it: by
    the tag, else (a generic tag) by the action or the tag's name."""
    kind_of = registry.tool_type_for_tag(tag)
    if kind_of == GENERIC_TOOL_TYPE:
        kind_of = registry.tool_type_for_name(action or tag)
    return action or tag, kind_of


def _split_actions(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray
                   ) -> tuple[list[tuple[str | None, str | None]], pa.Array | None]:
    """:func:`split_action` of the tool bodies ``data[starts[i]:ends[i]]``: each body's
    (action name, value), and the values as one large_string array (None: the values are
    the pairs' second items). The C kernel reads the bodies whose edges are ASCII in one pass
    (their values taken from the buffer, not made Python strings: the pairs' values are
    None then); Python's ``split_action`` reads the rest, and every body without it."""
    compiled = kernel()
    if compiled is None:
        bodies = _gather(data, starts, ends).to_pylist()
        return [split_action(body) for body in bodies], None
    view = np.frombuffer(data, np.uint8)
    how_b, name_s, name_e, value_s, value_e = compiled.split_actions(
        view, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64))
    how = np.frombuffer(how_b, np.uint8)
    value_start = np.frombuffer(value_s, np.int64).copy()
    value_end = np.frombuffer(value_e, np.int64).copy()
    names = [bytes(view[a:b]).decode() if h == 1 else None
             for h, a, b in zip(how.tolist(), np.frombuffer(name_s, np.int64).tolist(),
                                np.frombuffer(name_e, np.int64).tolist(), strict=True)]
    pairs: list[tuple[str | None, str | None]] = [(nm, None) for nm in names]
    unsure = np.flatnonzero(how == 2)
    if not len(unsure):
        return pairs, _gather(data, value_start, value_end)
    read = [split_action(bytes(view[starts[i]:ends[i]]).decode()) for i in unsure.tolist()]
    for i, pair in zip(unsure.tolist(), read, strict=True):
        pairs[i] = pair
    value_end[unsure] = value_start[unsure]  # empty here, Python's values appended
    taken = np.arange(len(starts))
    taken[unsure] = len(starts) + np.arange(len(unsure))
    values = pa.concat_arrays([_gather(data, value_start, value_end),
                               pa.array([v for _, v in read], pa.large_string())])
    return pairs, values.take(pa.array(taken))


class ArrowParseResult(ParseResult):
    """:class:`ParseResult` with the rows' steps as one Arrow array (``steps``, one list
    per row, ``STEPS_ARROW_TYPE``) instead of in the rows (there they are None), and
    their ``raw_response`` as a large_string array when every one of them encoded
    (``responses``; else None: the rows' strings are converted as usual)."""

    steps: Any = None
    responses: Any = None


def _response(value: Any) -> str | None:
    """The text :meth:`XmlTagParser.fields` reads the steps from, if it is a string."""
    if not isinstance(value, dict):
        return None
    raw = value.get("raw_response")
    if raw is None and isinstance(value.get("full_response_with_evaluation"), str):
        raw = strip_clip_evaluations(value["full_response_with_evaluation"])[0]
    return raw if isinstance(raw, str) else None


def _build_read(parser: XmlTagParser, notes: list[str], value: dict[str, Any],
                rec: RawRecord, ctx: ParseContext, index: int) -> dict[str, Any]:
    """:meth:`XmlTagParser.build_row` of a record whose steps were read here."""
    return parser.build_row(value, rec, ctx, index, analysis=(None, notes))


def parse_arrow_rows(parser: XmlTagParser, path: Path, ctx: ParseContext
                     ) -> ArrowParseResult:
    """:meth:`XmlTagParser.parse_rows` with the steps built in Arrow where they can be
    (:func:`array_steps`) and read in Python where not: the same rows, quarantine and
    steps (``test_xml_arrow.py``). A batch of plain records (only the fields the format
    knows, each of one JSON type) is decoded by Arrow's JSON reader
    (:func:`json_table`) and handed on as columns (:class:`ArrowColumnsResult`); any other
    by ``json.loads`` per line, as the Python path."""
    data = path.read_bytes()
    table = json_table(data)
    if table is not None:
        try:
            return _table_rows(parser, ctx, table)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError,
                RecursionError):
            pass  # a record the row path would quarantine: read it as the Python path
    return _record_rows(parser, path, ctx)


_JSON_SCHEMA = pa.schema([
    ("timestamp", pa.string()), ("task_id", pa.string()), ("task_description", pa.string()),
    ("duration", pa.float64()), ("success", pa.bool_()), ("final_result", pa.string()),
    ("raw_response", pa.large_string()),
])
"""The fields of a plain XML-tag record, each of the one JSON type it has there."""


@dataclass
class JsonBatch:
    """A batch :func:`json_table` decoded: the table (a row per record) and, per record,
    its line number and the bounds of its stripped line in the file's bytes (``data``),
    what its trajectory id hashes."""

    table: pa.Table
    data: bytes
    lines: list[int]
    starts: list[int]
    ends: list[int]
    absent: set[int]
    """The records without a ``success`` key (the row notes it; a null one is not noted)."""


_STRIPPED = frozenset(b" \t\n\r\x0b\x0c")
"""The bytes ``bytes.strip()`` strips."""
_LBRACE, _RBRACE = ord("{"), ord("}")


def _stripped_lines(data: bytes) -> tuple[list[int], list[int], list[int]]:
    """The line numbers and bounds of the non-blank lines of ``data.split(b"\\n")``, each
    as ``bytes.strip()`` leaves it: found by ``bytes.find`` (splitting copied every byte
    and made a bytes object per line), a line with a stripped byte at an edge stripped on
    its own."""
    lines: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    find = data.find
    size = len(data)
    start = 0
    number = 1
    while start <= size:
        end = find(b"\n", start)
        if end < 0:
            end = size
        if end > start:
            first, last = start, end
            if data[first] in _STRIPPED or data[last - 1] in _STRIPPED:
                line = data[first:last]
                first += len(line) - len(line.lstrip())
                last -= len(line) - len(line.rstrip())
            if last > first:
                lines.append(number)
                starts.append(first)
                ends.append(last)
        start = end + 1
        number += 1
    return lines, starts, ends


def json_table(data: bytes) -> JsonBatch | None:
    """The batch's records as a table decoded by Arrow, and each record's line number and
    (stripped) bytes, the ids' input; None unless that gives exactly what ``json.loads``
    per line and :meth:`XmlTagParser.fields` would: every non-blank line one JSON object
    (``{`` ... ``}``, one table row each: Arrow would read two objects on one line) of
    valid UTF-8, no field outside the schema (they go to ``extra``) nor of another type,
    no duplicate key, ``raw_response`` never null, no ``-0`` duration (``json.loads``
    reads ``-0`` as the int 0). ``absent``: the records without a ``success`` key, found
    by ``json.loads`` of the lines whose ``success`` is null.
    Arrow's reader fails the whole block on one bad line; the caller then reads every
    line with ``json.loads``, so quarantine and line numbers are as before. With the C
    kernels on, the C reader does all of this in one pass (:func:`_c_json_table`)."""
    reader = json_reader()
    if reader is not None:
        return _c_json_table(reader, data)
    if data.startswith(b"\xef\xbb\xbf"):
        return None
    lines, starts, ends = _stripped_lines(data)
    if not lines or not all(data[s] == _LBRACE and data[e - 1] == _RBRACE
                            for s, e in zip(starts, ends, strict=True)):
        return None
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(len(data), 1 << 20)),
            parse_options=pj.ParseOptions(explicit_schema=_JSON_SCHEMA,
                                          unexpected_field_behavior="error"))
        table.validate(full=True)  # UTF-8 (the reader does not check it)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(lines) or table.column("raw_response").null_count:
        return None
    duration = table.column("duration").to_numpy(zero_copy_only=False)
    if np.any((duration == 0) & np.signbit(duration)):
        return None
    success = table.column("success")
    absent: set[int] = set()
    if success.null_count:
        nulls = np.flatnonzero(success.is_null().to_numpy(zero_copy_only=False))
        # No '"success"' in the line at all: no such key (most); else ask json.loads.
        for i in nulls.tolist():
            start, end = starts[i], ends[i]
            if (data.find(b'"success"', start, end) < 0
                    or "success" not in json.loads(data[start:end])):
                absent.add(i)
    return JsonBatch(table, data, lines, starts, ends, absent)


def _c_json_table(reader: Any, data: bytes) -> JsonBatch | None:
    """:func:`json_table` by the C reader (``_jsonlines.c``): the lines found, the JSON
    checked and decoded, and the columns' Arrow buffers built in one pass over ``data``
    (pyarrow's reader, its UTF-8 validation and the line finding were three, a sixth of
    parsing). None wherever the pyarrow reading is None, and also for what the C reader
    does not take on (NaN, Infinity, a number that overflows, an escaped key it does not
    know): then the records are read by ``json.loads`` per line, the same rows
    (``test_jsonlines.py``)."""
    # The responses' bytes go to memory from pyarrow's pool, as its reader's did: in the
    # process's malloc heap they slowed numpy's work in the later stages (~0.1 s a drop).
    raw = pa.allocate_buffer(len(data) + 16, resizable=True)
    got = reader.read_batch(data, raw)
    if got is None:
        return None
    n, lines, starts, ends, absent, columns = got
    arrays = []
    for field, (nulls, validity, offsets, values) in zip(_JSON_SCHEMA, columns,
                                                          strict=True):
        buffers = [None if validity is None else pa.py_buffer(validity)]
        if offsets is not None:
            buffers.append(pa.py_buffer(offsets))
        if isinstance(values, int):  # the bytes of ``raw`` used
            raw.resize(values)
            buffers.append(raw)
        else:
            buffers.append(pa.py_buffer(values))
        arrays.append(pa.Array.from_buffers(field.type, n, buffers, null_count=nulls))
    table = pa.Table.from_arrays(arrays, schema=_JSON_SCHEMA)
    return JsonBatch(table, data, lines, starts, ends, set(absent))


class ArrowColumnsResult(ArrowParseResult):
    """:class:`ArrowParseResult` of a batch :func:`json_table` decoded, its trajectories
    as ``columns`` (every ``raw_trajectories`` field: a list, a numpy array or an Arrow
    array of one value per trajectory) instead of a dict per row; ``rows`` stays empty.
    Building, finishing and reading back a dict per record was a fifth of the parse."""

    columns: dict[str, Any] = Field(default_factory=dict)
    count: int = 0

    @property
    def records_read(self) -> int:
        return self.count + len(self.quarantined)


def _strings(column: pa.ChunkedArray) -> pa.Array | list[None]:
    """A string column as the frame takes it: Arrow (a null is the value None), or a
    list of None when every value is (pandas makes an object column of that)."""
    if column.null_count == len(column):
        return [None] * len(column)
    return one_array(column)


def _table_rows(parser: XmlTagParser, ctx: ParseContext, batch: JsonBatch
                ) -> ArrowColumnsResult:
    """The trajectories of a batch :func:`json_table` decoded (every record is one), as
    columns: each field what :meth:`XmlTagParser.build_row` and :func:`finish_row` give
    the record's row (``test_xml_arrow.py`` holds the table to the Python path's)."""
    table = batch.table
    responses = one_array(table.column("raw_response"))
    n = len(responses)
    found = array_steps(responses, np.ones(n, dtype=bool), ctx.registry)
    notes, unknown = found.notes, found.unknown
    python_steps: list[list[StepRow]] = []
    slow = np.flatnonzero(~found.ok).tolist()
    for i in slow:
        # What the Arrow reading leaves is seldom well formed (none of the generated
        # drop's 9 %): straight to the tag scan, which reads a well-formed one the same.
        steps, notes[i] = analyze_xml_rows(responses[i].as_py(), ctx.registry,
                                           well_formed=False)
        python_steps.append(steps)
        unknown[i] = unregistered_row_tools(steps)
    numbers = batch.lines
    task_column = table.column("task_id")
    task_ids = task_column.to_pylist()
    if task_column.null_count:
        task_ids = [t if t is not None else f"line{line}"
                    for t, line in zip(task_ids, numbers, strict=True)]
    ids = line_ids(ctx.source_file, batch.data, batch.starts, batch.ends)
    first_by_task: dict[str, str] = {}
    extras: list[str] = []
    absent = batch.absent
    for i in range(n):
        # What fields() and finish_row() write to ``extra``, in their order.
        extra: dict[str, Any] = {}
        if notes[i]:
            extra["tag_notes"] = notes[i]
        if i in absent:
            extra["success_missing"] = True
        if unknown[i]:
            extra["unregistered_tools"] = unknown[i]
        first = first_by_task.get(task_ids[i])
        if first is None:
            first_by_task[task_ids[i]] = ids[i]
        else:
            extra["duplicate_of"] = first
        extras.append(extra_json(extra) if extra else "{}")
    duration = table.column("duration")
    columns: dict[str, Any] = parser.column_defaults(ctx)
    columns.update(
        trajectory_id=ids,
        source_line=numbers,
        task_id=one_array(task_column) if not task_column.null_count else task_ids,
        task_description=one_array(pc.fill_null(table.column("task_description"), "")),
        raw_response=responses,
        steps=_assembled(found.steps, _table_take(found.ok), python_steps),
        success=table.column("success").to_pylist(),
        final_result=_strings(table.column("final_result")),
        duration=([None] * n if duration.null_count == n
                  else duration.to_numpy(zero_copy_only=False)),
        timestamp=_strings(table.column("timestamp")),
        extra=extras,
    )
    result = ArrowColumnsResult(columns=columns, count=n)
    result.steps = columns["steps"]
    result.responses = pa.chunked_array([responses])
    return result


def _table_take(ok: np.ndarray) -> np.ndarray:
    """:func:`_assembled`'s ``take`` of a batch whose every record is a row: its own list
    where ``ok``, else the next of the lists read in Python."""
    take = np.arange(len(ok), dtype=np.int64)
    take[~ok] = -1 - np.arange(int((~ok).sum()), dtype=np.int64)
    return take


def _assembled(fast: pa.Array, take: Sequence[int] | np.ndarray,
               python_steps: list[list[StepRow]]) -> pa.ChunkedArray:
    """The rows' steps in order: ``take`` holds each row's list in ``fast`` or, as
    ``-1 - i``, its rows in ``python_steps[i]`` (converted here, together). Each run of
    rows that are neighbours in their source is cut as a slice, and the slices joined by
    one copy (a concatenation then a ``take`` copied every step twice)."""
    indices = np.asarray(take, dtype=np.int64)
    if not len(indices):
        return pa.chunked_array([fast.slice(0, 0)])
    slow = one_array(steps_array(python_steps)) if python_steps else fast
    from_fast = indices >= 0
    source = np.where(from_fast, indices, -1 - indices)
    new_run = np.ones(len(indices), dtype=bool)
    new_run[1:] = (from_fast[1:] != from_fast[:-1]) | (source[1:] != source[:-1] + 1)
    starts = np.flatnonzero(new_run).tolist()
    ends = [*starts[1:], len(indices)]
    pieces = [(fast if from_fast[start] else slow).slice(int(source[start]), end - start)
              for start, end in zip(starts, ends, strict=True)]
    if len(pieces) == 1 and len(pieces[0]) == len(fast) and from_fast[0]:
        return pa.chunked_array([fast])
    return pa.chunked_array([pa.concat_arrays(pieces)])


def _record_rows(parser: XmlTagParser, path: Path, ctx: ParseContext) -> ArrowParseResult:
    """The rows of a batch read by ``json.loads`` per line (the Python path's records)."""
    records = list(parser.records(path))
    texts = [_response(rec.value) if rec.error is None else None for rec in records]
    found = arrow_steps(texts, ctx.registry)
    ok = found.ok.tolist()
    result = ArrowParseResult()
    first_by_task: dict[str, str] = {}
    python_steps: list[list[StepRow]] = []
    take: list[int] = []  # per row: its list in found.steps, or -1 - its python_steps index
    row_records: list[int] = []  # per row: its record's index
    encoded = found.encoded.tolist()
    for index, rec in enumerate(records):
        if texts[index] is not None and not encoded[index]:
            # A lone surrogate (json.loads accepts its escape): no UTF-8 text, so no Arrow
            # column, holds it; the table would fail on it whole, so the record is put
            # aside, with its line, and the rest of the batch read.
            result.quarantined.append(ctx.quarantine(
                rec.line, "invalid_encoding", "raw_response holds a lone surrogate "
                "(an escape json.loads accepts): not UTF-8 text, which the table needs",
                rec.text, parser.name))
            continue
        if ok[index]:
            row = parser.attempt(partial(_build_read, parser, found.notes[index]), rec, ctx,
                                 index, result.quarantined)
            if row is None:
                continue
            finish_row(row, rec.repairs, first_by_task, unknown=found.unknown[index])
            take.append(index)
        else:
            row = parser.attempt(parser.build_row, rec, ctx, index, result.quarantined)
            if row is None:
                continue
            finish_row(row, rec.repairs, first_by_task)
            take.append(-1 - len(python_steps))
            python_steps.append(row["steps"])
        row["steps"] = None
        row_records.append(index)
        result.rows.append(row)
    result.steps = _assembled(found.steps, take, python_steps)
    if found.encoded[row_records].all():
        rows_at = pa.array(row_records, pa.int64())
        result.responses = pa.chunked_array([found.responses.take(rows_at)])
    return result
