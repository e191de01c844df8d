"""The three preprocessing rules on a whole batch in Arrow and numpy (#12.1, target 1).

``screen`` (``preprocess.py``) reads one response at a time in Python: its tag repair walks
every tag, the duplicate check reads every call, the tag count builds a dict per response,
and all of it needs the steps as Python dicts. Most responses need none of that: their tags
are well formed, no two consecutive calls could be the same, and their tags are plain ASCII.
This module decides those facts for a whole batch at once, on the UTF-8 bytes of the
responses and the Arrow ``steps`` column, and says for every response whether it is such a
common case; every other response goes to ``screen`` unchanged (the caller's fallback), so
the results are ``screen``'s by construction, not by imitation of its every branch:

- the tags ``repair_tags`` knows are found with numpy (every ``<``, its name read from a
  fixed window of bytes), and their sequence is checked against the only shapes that need
  no repair (each flat tag closed by the next tag, each opaque tag by its own closer), or
  the one repair that only closes an ``<answer>`` at the end; anything else, or any byte
  that is not ASCII where a tag name could be (Python's case folding maps ``ſ`` to ``s``),
  is left to ``repair_tags``;
- consecutive calls can only be identical (``call_identity``) when their text without tags
  and whitespace is equal (``_stripped``); only such pairs are compared in Python;
- ``_tag_counts`` from the same tokens, grouped with numpy.

The token scan, the repair walk, the tag counts and the stripped-text comparison run in
the C kernel (``_tagscan.c``) when it is built, in numpy and Arrow when not: the same
results (:mod:`eval_pipeline.tagscan`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eval_pipeline.preprocess import _FLAT_TAGS, PreprocessConfig, _identity, _opaque_names
from eval_pipeline.tagscan import kernel
from eval_pipeline.tool_registry import ToolRegistry

_WINDOW = 32
"""Bytes read after ``<`` for a tag name: a longer name sends its response to Python."""

_PYTHON_SPACE = np.zeros(256, bool)
_PYTHON_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
"""The ASCII bytes Python's ``\\s`` and ``str.isspace`` take for whitespace."""

_NAME_CHAR = np.zeros(256, bool)
for _c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-":
    _NAME_CHAR[_c] = True
_NAME_START = np.zeros(256, bool)
for _c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_":
    _NAME_START[_c] = True
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[65:91] += 32

_NAME_RE = re.compile(r"[a-z_][a-z0-9_-]*")
ANSWER_CLOSED_AT_END = "closed <answer> at end of response"
"""The fix ``repair_tags`` records for an ``<answer>`` left open at the end."""


@dataclass
class BatchScreen:
    """What the batch kernels decided, per response (arrays of the batch's length)."""

    fast: np.ndarray
    """True where the response is a common case; False: ``screen`` must read it."""
    answer_closed: np.ndarray
    """True where the repair only closes an ``<answer>`` at the end (``fast`` ones)."""
    tool_calls: np.ndarray
    """Tool-call steps per response."""
    duplicates: list[list[str]]
    """``screen``'s ``duplicate_calls`` per response (empty for responses not ``fast``)."""
    tag_counts: list[dict[str, int]]
    """``screen``'s ``tag_analysis`` per response (empty for responses not ``fast``)."""


def utf8_bytes(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string array's UTF-8 bytes (a view) and its ``len + 1`` offsets into them."""
    if strings.type != pa.large_string():
        strings = strings.cast(pa.large_string())
    first = strings.offset
    offsets = np.frombuffer(strings.buffers()[1], np.int64)[first:first + len(strings) + 1]
    data_buffer = strings.buffers()[2]
    data = (np.frombuffer(data_buffer, np.uint8) if data_buffer is not None
            else np.zeros(0, np.uint8))
    return data[offsets[0]:offsets[-1]], offsets - offsets[0]


@dataclass
class _Tags:
    """Every ``<`` that opens a tag as ``_tag_token_pattern`` or ``_ANY_TAG`` reads one."""

    row: np.ndarray
    closing: np.ndarray
    name: np.ndarray
    """The lower-cased name as fixed-width bytes (``S40``)."""
    attrs: np.ndarray
    """Bytes between the name and ``>`` (0: none)."""
    attr_start: np.ndarray
    end: np.ndarray
    self_closing: np.ndarray
    unsure: np.ndarray
    """Rows (batch length) with a ``<`` Python might read differently (non-ASCII)."""


def _windows(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes of ``data`` from each of ``starts`` (one row each), read through
    a strided view (no index per byte); past the end of ``data``, its last byte."""
    out = np.empty((len(starts), width), np.uint8)
    if not len(starts):
        return out
    near_end = starts > len(data) - width
    if len(data) >= width:
        view = np.lib.stride_tricks.sliding_window_view(data, width)
        out[~near_end] = view[starts[~near_end]]
    late = np.flatnonzero(near_end)
    out[late] = data[np.minimum(starts[late, None] + np.arange(width), len(data) - 1)]
    return out


def _scan(data: np.ndarray, offsets: np.ndarray) -> _Tags:
    """Every tag token: ``<`` ``/``? name (``[A-Za-z0-9_-]``) then ``>``, ``/>`` or
    whitespace and anything but ``<``/``>`` up to ``>``, inside one response.

    Only a ``<`` followed by a letter or ``_`` (after an optional ``/``), or by a byte that
    is not ASCII, can start a tag; the others (``a < b``) are dropped before any window is
    read. Reads past the end of ``data`` are clamped to its last byte: a token whose name or
    end would lie there is outside its response anyway (``inside``). The C kernel, when
    built, reads the same tokens in one pass (:mod:`eval_pipeline.tagscan`)."""
    n = len(offsets) - 1
    compiled = kernel()
    if compiled is not None:
        (t_row, t_closing, t_name, t_attrs, t_attr_start, t_end, t_self), t_unsure = (
            compiled.prep_scan(np.ascontiguousarray(data), np.ascontiguousarray(offsets,
                                                                                np.int64)))
        return _Tags(row=np.frombuffer(t_row, np.int64),
                     closing=np.frombuffer(t_closing, np.bool_),
                     name=np.frombuffer(t_name, f"S{_WINDOW}"),
                     attrs=np.frombuffer(t_attrs, np.int64),
                     attr_start=np.frombuffer(t_attr_start, np.int64),
                     end=np.frombuffer(t_end, np.int64),
                     self_closing=np.frombuffer(t_self, np.bool_),
                     unsure=np.frombuffer(t_unsure, np.bool_))
    unsure = np.zeros(n, bool)
    size = len(data)
    lt = np.flatnonzero(data == 60)
    if size:
        following = data[np.minimum(lt + 1, size - 1)]
        second = data[np.minimum(lt + 2, size - 1)]
        maybe = (_NAME_START[following] | (following >= 128)
                 | ((following == 47) & (_NAME_START[second] | (second >= 128))))
        maybe &= lt + 1 < size
        candidates = lt[maybe]
    else:
        candidates = lt
    row = np.searchsorted(offsets, candidates, side="right") - 1
    row_end = offsets[row + 1]
    closing = data[np.minimum(candidates + 1, max(size - 1, 0))] == 47
    name_start = candidates + 1 + closing
    window = _windows(data, name_start, _WINDOW + 2)
    is_name = _NAME_CHAR[window]
    run = np.argmin(is_name, axis=1)  # the first byte that is not a name byte
    full = is_name.all(axis=1)
    term_at = name_start + run
    term = np.where(full, 0, window[np.arange(len(candidates)), run])
    inside = term_at < row_end
    # A byte that is not ASCII where the name or its end is: Python's \w, \s and case
    # folding may read it as part of a tag.
    odd = inside & ((term >= 128) | full)
    np.logical_or.at(unsure, row[odd], True)
    first_ok = _NAME_START[window[:, 0]] & (run > 0)
    after = data[np.minimum(term_at + 1, max(size - 1, 0))]
    spaced = _PYTHON_SPACE[term]
    direct = term == 62
    self_closing = (term == 47) & (after == 62) & (term_at + 1 < size)
    # A spaced name runs to the next ">", with no "<" before it.
    g = np.full(len(candidates), size)
    if spaced.any():
        gt = np.flatnonzero(data == 62)
        where = np.flatnonzero(spaced)
        found = np.searchsorted(gt, term_at[where])
        g[where] = np.append(gt, size)[found]
    next_lt = np.append(lt, size)[np.searchsorted(lt, candidates, side="right")]
    end = np.where(direct, term_at + 1, np.where(self_closing, term_at + 2, g + 1))
    ok = (first_ok & inside & ~odd & (direct | self_closing | (spaced & (g < next_lt)))
          & (end <= row_end))
    keep = np.flatnonzero(ok)
    names = _LOWER[window[keep, :_WINDOW]]
    names[np.arange(_WINDOW) >= run[keep, None]] = 0
    return _Tags(row=row[keep], closing=closing[keep],
                 name=names.view(f"S{_WINDOW}").ravel(),
                 attrs=np.where(spaced[keep], g[keep] - term_at[keep], 0),
                 attr_start=term_at[keep], end=end[keep],
                 self_closing=self_closing[keep], unsure=unsure)


def _repair_status(tags: _Tags, data: np.ndarray, n: int, tool_tags: list[str]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(needs Python, only closes ``<answer>`` at the end) per row: ``repair_tags``'s walk
    decided on the known tags' sequence, for the shapes that need no repair or that one."""
    names = ("think", "result", "answer", "tool_param", *tool_tags)
    known = np.array(sorted({m.lower() for m in names}), dtype=f"S{_WINDOW}")
    compiled = kernel()
    if compiled is not None:  # the same walk, row by row in one pass
        opaque_names = _opaque_names(tuple(tool_tags))
        decoded = [s.decode() for s in known]
        python_c, closed_c = compiled.repair_status(
            np.ascontiguousarray(data), np.ascontiguousarray(tags.row, np.int64),
            np.ascontiguousarray(tags.closing), np.ascontiguousarray(tags.name),
            np.ascontiguousarray(tags.attrs, np.int64),
            np.ascontiguousarray(tags.attr_start, np.int64),
            np.ascontiguousarray(tags.self_closing), n, tuple(known.tolist()),
            bytes(name in _FLAT_TAGS for name in decoded),
            bytes(name in opaque_names for name in decoded),
            decoded.index("answer"))
        needs = np.frombuffer(python_c, np.bool_)
        closed = np.frombuffer(closed_c, np.bool_)
        return needs | tags.unsure, closed & ~needs & ~tags.unsure
    position = np.searchsorted(known, tags.name)
    position[position >= len(known)] = 0
    is_known = known[position] == tags.name
    k = np.flatnonzero(is_known)
    row = tags.row[k]
    closing = tags.closing[k]
    name = position[k]
    sc = tags.self_closing[k]
    attrs = tags.attrs[k]
    opaque_set = _opaque_names(tuple(tool_tags))
    flat_of = np.array([s.decode() in _FLAT_TAGS for s in known])
    opaque_of = np.array([s.decode() in opaque_set for s in known])
    answer_id = int(np.searchsorted(known, b"answer"))
    python = np.zeros(n, bool)
    # A closer's attributes decide whether it closes an opaque tag (only whitespace does):
    # read them in Python, where there are any (rare).
    blank = attrs == 0
    for i in np.flatnonzero(closing & (attrs > 0)):
        raw = bytes(data[tags.attr_start[k[i]]:tags.attr_start[k[i]] + attrs[i]])
        blank[i] = raw.decode("ascii", "replace").isspace()
        if max(raw) >= 128:
            python[row[i]] = True
    m = len(k)
    idx = np.arange(m)
    opening = ~closing & ~sc
    # The next token of the same row and name that ends an opaque tag opened before it:
    # its closer (whitespace attributes at most, not ``</x/>``) or another opening of it.
    event = (closing & ~sc & blank) | (~closing & ((attrs > 0) | ~sc))
    order = np.lexsort((idx, name, row))
    group = row[order] * (len(known) + 1) + name[order]
    ev_sorted = np.flatnonzero(event[order])
    nxt = np.searchsorted(ev_sorted, np.arange(m), side="right")
    has = nxt < len(ev_sorted)
    nxt_sorted = np.where(has, ev_sorted[np.minimum(nxt, len(ev_sorted) - 1)], -1)
    same = has & (group[np.maximum(nxt_sorted, 0)] == group)
    own_next = np.full(m, -1)
    own_next[order] = np.where(same, order[np.maximum(nxt_sorted, 0)], -1)
    # The next token of the row that is not self-closing (the flat tags' closer).
    real = np.flatnonzero(~sc)
    after = np.searchsorted(real, idx, side="right")
    following = np.where(after < len(real), real[np.minimum(after, len(real) - 1)], -1)
    following = np.where((following >= 0) & (row[np.maximum(following, 0)] == row),
                         following, -1)
    flat = flat_of[name]
    opaque = opaque_of[name]
    end = np.full(m, -1)
    opaque_open = opening & opaque
    o_end = own_next[opaque_open]
    o_ok = (o_end >= 0) & closing[np.maximum(o_end, 0)]
    end[np.flatnonzero(opaque_open)[o_ok]] = o_end[o_ok]
    flat_open = opening & flat & ~opaque
    f_end = following[flat_open]
    f_ok = ((f_end >= 0) & closing[np.maximum(f_end, 0)]
            & (name[np.maximum(f_end, 0)] == name[flat_open]))
    end[np.flatnonzero(flat_open)[f_ok]] = f_end[f_ok]
    # Tokens inside a tag's span are skipped by the walk; check the rest form the chain
    # open, its end, the next real token opens, ... from each row's first real token.
    cover = np.zeros(m + 1, np.int64)
    spans = np.flatnonzero(end >= 0)
    np.add.at(cover, spans + 1, 1)
    np.add.at(cover, end[spans], -1)
    top = np.flatnonzero((np.cumsum(cover)[:m] == 0) & ~sc)
    answer_closed = np.zeros(n, bool)
    if len(top):
        top_row = row[top]
        starts = np.flatnonzero(np.r_[True, top_row[1:] != top_row[:-1]])
        rank = np.arange(len(top)) - np.repeat(starts, np.diff(np.r_[starts, len(top)]))
        last_of_row = np.r_[top_row[1:] != top_row[:-1], True]
        even = rank % 2 == 0
        t_end = end[top]
        nxt_top = np.r_[top[1:], -1]
        nxt2_top = np.r_[top[2:], -1, -1]
        same1 = np.r_[top_row[1:] == top_row[:-1], False]
        same2 = np.r_[top_row[2:] == top_row[:-2], False, False]
        want_after = np.where(same2, nxt2_top, -1)
        after_end = following[np.maximum(t_end, 0)]
        pair_ok = (opening[top] & (t_end >= 0) & same1 & (nxt_top == t_end)
                   & (after_end == want_after))
        # The last opening of a row may be an <answer> nothing follows: closed at the end.
        answer_end = (opening[top] & (name[top] == answer_id) & last_of_row
                      & (following[top] == -1) & (t_end < 0))
        bad = even & ~pair_ok & ~answer_end
        np.logical_or.at(python, top_row[bad], True)
        answer_closed[top_row[even & answer_end]] = True
    # A stray closer, an unclosed tag, a flat tag holding another: somewhere the chain
    # broke, and every such token is a ``top`` token at an even rank or an odd one that is
    # not its pair's end; odd ranks were checked through their pairs (``after_end``).
    return python | tags.unsure, answer_closed & ~python & ~tags.unsure


def _tag_counts(tags: _Tags, n: int) -> list[dict[str, int]]:
    """``_tag_counts`` per row: openings and self-closing tags (not closers) by name."""
    compiled = kernel()
    if compiled is not None:
        by_row: list[dict[str, int]] = compiled.tag_counts(
            np.ascontiguousarray(tags.row, np.int64), np.ascontiguousarray(tags.closing),
            np.ascontiguousarray(tags.name), n)
        return by_row
    counted = ~tags.closing
    rows = tags.row[counted]
    names = tags.name[counted]
    result: list[dict[str, int]] = [{} for _ in range(n)]
    if not len(rows):
        return result
    distinct, code = np.unique(names, return_inverse=True)
    key = rows * len(distinct) + code
    keys, counts = np.unique(key, return_counts=True)
    labels = [d.decode() for d in distinct]
    for k, c in zip(keys.tolist(), counts.tolist(), strict=True):
        result[k // len(distinct)][labels[k % len(distinct)]] = c
    return result  # np.unique sorts by name within a row, as ``dict(sorted(...))`` does


_STRIP = (r"(?:<[^<>]*>|[\t-\r\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}"
          r"\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}])+")
"""Tags and characters ``str.split()`` splits on: what cannot tell two calls apart (runs
of them replaced at once: a third faster than one at a time)."""


def _stripped(values: pa.Array) -> pa.Array:
    return pc.replace_substring_regex(values, _STRIP, "")


def _stripped_keys(values: pa.Array) -> pa.Array | np.ndarray:
    """Keys equal where ``_stripped`` is equal: a hash of it per value by the C kernel (no
    stripped copy; a collision only sends a pair to the Python comparison), else the
    stripped strings themselves."""
    compiled = kernel()
    if compiled is None or values.null_count:
        return _stripped(values)
    data, offsets = utf8_bytes(values)
    return np.frombuffer(compiled.strip_hash(np.ascontiguousarray(data), offsets), np.uint64)


def screen_batch(responses: pa.Array, steps: pa.ListArray, reparse: np.ndarray,
                 config: PreprocessConfig, registry: ToolRegistry) -> BatchScreen:
    """The common cases of a batch (``responses``: large strings without nulls; ``steps``
    of ``STEPS_ARROW_TYPE``; ``reparse``: whether the row's format has a tag repair)."""
    n = len(responses)
    data, offsets = utf8_bytes(responses)
    tags = _scan(data, offsets)
    python = tags.unsure.copy()
    answer_closed = np.zeros(n, bool)
    tool_tags = list(registry.tool_tags)
    if config.repair_tags and reparse.any():
        if all(_NAME_RE.fullmatch(t) and len(t) < _WINDOW for t in tool_tags):
            status, closed = _repair_status(tags, data, n, tool_tags)
            python |= status & reparse
            answer_closed = closed & reparse
        else:
            python |= reparse
    # A response without any tag counts its steps' kinds instead (rare): Python.
    tagged = np.zeros(n, bool)
    tagged[tags.row[~tags.closing]] = True
    python |= ~tagged
    counts = _tag_counts(tags, n)
    flat = steps.flatten()
    parents = pc.list_parent_indices(steps).to_numpy()
    kind = flat.field("kind")
    is_call = pc.equal(kind, "tool_call").to_numpy(zero_copy_only=False)
    call_rows = parents[is_call]
    tool_calls = np.bincount(call_rows, minlength=n)
    duplicates: list[list[str]] = [[] for _ in range(n)]
    if len(call_rows) > 1:
        calls = flat.filter(pa.array(is_call))
        content = calls.field("content")
        tool_input = calls.field("tool_input")
        tool_type = calls.field("tool_type")
        tool_name = calls.field("tool_name")
        by_content = _stripped_keys(content)
        by_input = _stripped_keys(pc.coalesce(tool_input, content))
        colon = pc.or_(pc.fill_null(pc.match_substring(tool_type, ":"), False),
                       pc.fill_null(pc.match_substring(tool_name, ":"), False))
        if any(":" in t for t in registry.tool_types):
            colon = pa.array(np.ones(len(calls), bool))
        m = len(calls) - 1
        same_row = call_rows[1:] == call_rows[:-1]

        def equal(a: pa.Array | np.ndarray, b: pa.Array | np.ndarray) -> np.ndarray:
            if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
                return a[1:] == b[:-1]
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):  # not both hashed
                return np.ones(m, bool)
            return np.asarray(pc.equal(a.slice(1, m), b.slice(0, m)))

        colon_np = np.asarray(colon)
        # Equal identities mean equal text once tags and whitespace are gone, whichever
        # reading (the call's element or the parser's input) each side took; a name or
        # type holding ":" could shift the identity's parts, so it is always compared.
        maybe = same_row & (equal(by_content, by_content) | equal(by_content, by_input)
                            | equal(by_input, by_content) | equal(by_input, by_input)
                            | colon_np[1:] | colon_np[:-1])
        pairs = np.flatnonzero(maybe)
        if len(pairs):
            needed = np.unique(np.r_[pairs, pairs + 1])
            take = pa.array(needed)
            fields = zip(content.take(take).to_pylist(), tool_input.take(take).to_pylist(),
                         tool_type.take(take).to_pylist(), tool_name.take(take).to_pylist(),
                         strict=True)
            # A repeated call (what the rule looks for) has the same fields as the one
            # before it: each distinct call's identity made once (3 in 5 of the drop's).
            made: dict[tuple[str | None, ...], str] = {}
            identity = {int(i): made.get(f) or made.setdefault(f, _identity(*f, registry))
                        for i, f in zip(needed.tolist(), fields, strict=True)}
            for p in pairs.tolist():
                if identity[p] == identity[p + 1]:
                    duplicates[int(call_rows[p])].append(identity[p + 1][:200])
    return BatchScreen(fast=~python, answer_closed=answer_closed & ~python,
                       tool_calls=tool_calls, duplicates=duplicates, tag_counts=counts)
