"""Clip segmentation of a whole batch in Arrow and numpy (#12.1, target 1).

``clips.segment_rows`` cuts one response at a time from its steps as Python dicts, and
builds every clip's text in Python. Here the same cut is made for a batch from the Arrow
``steps`` column: a clip per tool call (to the end of the ``tool_result`` that follows it
before the next call, or of the call itself), then the ``final`` clip; the clips of a
response tile it from its first character to its last, so their texts are the response
bytes with new offsets (character offsets mapped to UTF-8 bytes with numpy where a response
is not ASCII), and the thoughts, results and answers of a clip are joined by Arrow
(``binary_join``) from the steps between its bounds.

Responses this does not cut the way ``segment_rows`` does (offsets that do not increase or
fall outside the text, labelled steps, no steps at all) are left to ``segment_rows``
(``fast`` is False for them): the caller's fallback. The character offsets, lengths and
the joins run in the C kernel (``_tagscan.c``) when it is built (:mod:`eval_pipeline.tagscan`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eval_pipeline.models import FINAL_TOOL_TYPE, GENERIC_TOOL_TYPE
from eval_pipeline.preprocess_arrow import utf8_bytes
from eval_pipeline.tagscan import kernel

_NEWLINE = pa.scalar("\n", pa.large_string())


@dataclass
class BatchClips:
    """The clips of the ``fast`` responses, in response order, as columns."""

    fast: np.ndarray
    owner: np.ndarray
    """The response (batch row) of each clip."""
    clip_index: np.ndarray
    tool_type: pa.Array
    tool_name: list[str | None]
    start: np.ndarray
    end: np.ndarray
    content: pa.Array
    thought: pa.Array
    tool_call: pa.Array
    action_input: pa.Array
    result: pa.Array
    has_answer: np.ndarray
    answer: pa.Array
    step_start: np.ndarray
    step_end: np.ndarray


_HIGH = np.uint64(0x8080808080808080)


def _continuations(data: np.ndarray) -> np.ndarray:
    """UTF-8 continuation bytes (``10xxxxxx``) in each eight bytes of ``data`` (the last
    eight padded with zeros), counted a ``uint64`` at a time without copying ``data``."""
    whole = len(data) // 8 * 8
    tail = np.zeros(8, np.uint8)
    tail[:len(data) - whole] = data[whole:]
    counts = []
    for part in (data[:whole], tail):
        words = part.view(np.uint64) if part.ctypes.data % 8 == 0 else part.copy().view(
            np.uint64)
        shifted = np.left_shift(words, np.uint64(1))
        np.invert(shifted, out=shifted)
        np.bitwise_and(shifted, words, out=shifted)
        np.bitwise_and(shifted, _HIGH, out=shifted)
        counts.append(np.bitwise_count(shifted))
    return np.concatenate(counts)


def _char_to_byte(data: np.ndarray, offsets: np.ndarray, rows: np.ndarray,
                  chars: np.ndarray) -> np.ndarray:
    """Byte offsets (into ``data``) of character offsets ``chars`` of responses ``rows``.

    A character starts at every byte that is not a UTF-8 continuation byte (``10xxxxxx``).
    Those are counted eight bytes at a time (a ``uint64`` per eight bytes, a popcount), so
    the characters before every eighth byte are one cumulative sum; each offset is placed
    among those by binary search and then inside its eight bytes. The C kernel, when
    built, does the same in one pass (:mod:`eval_pipeline.tagscan`).
    """
    compiled = kernel()
    if compiled is not None and len(data):
        return np.frombuffer(compiled.char_to_byte(
            np.ascontiguousarray(data), np.ascontiguousarray(offsets, np.int64),
            np.ascontiguousarray(rows, np.int64), np.ascontiguousarray(chars, np.int64)),
            np.int64)
    if not len(data):
        return offsets[rows] + chars
    per_word = _continuations(data)
    before = np.zeros(len(per_word) + 1, np.int64)  # continuation bytes before each word
    np.cumsum(per_word, out=before[1:])
    word_chars = np.arange(len(per_word) + 1, dtype=np.int64) * 8 - before
    last = max(len(data) - 1, 0)
    row_start = offsets[rows]
    word = row_start >> 3
    head = data[np.minimum((word * 8)[:, None] + np.arange(8), last)]
    head_cont = ((head & 0xC0) == 0x80) & (np.arange(8) < (row_start & 7)[:, None])
    partial = head_cont.sum(axis=1)
    target = row_start - before[word] - partial + chars  # characters before the offset
    at = np.searchsorted(word_chars, target, side="right") - 1
    window = data[np.minimum((at * 8)[:, None] + np.arange(8), last)]
    inside = (at * 8)[:, None] + np.arange(8) < len(data)
    starts = np.cumsum(((window & 0xC0) != 0x80) | ~inside, axis=1)
    within = np.argmax(starts > (target - word_chars[at])[:, None], axis=1)
    return at * 8 + within


def char_lengths(responses: pa.Array) -> np.ndarray:
    """Each response's length in characters: by the C kernel in one pass when it is built,
    else Arrow's ``utf8_length``."""
    compiled = kernel()
    if compiled is None or responses.null_count:
        return np.asarray(pc.utf8_length(responses).to_numpy(zero_copy_only=False))
    data, offsets = utf8_bytes(responses)
    return np.frombuffer(compiled.char_lengths(np.ascontiguousarray(data), offsets), np.int64)


def clip_batch(responses: pa.Array, steps: pa.ListArray) -> BatchClips:
    """The clips of every response ``segment_rows`` would cut the same way (``fast``)."""
    n = len(responses)
    list_offsets = steps.offsets.to_numpy().astype(np.int64)
    list_offsets = list_offsets - list_offsets[0]
    counts = np.diff(list_offsets)
    flat = steps.flatten()
    kind = flat.field("kind")
    start_char = flat.field("start").to_numpy(zero_copy_only=False)
    end_char = flat.field("end").to_numpy(zero_copy_only=False)
    parents = np.repeat(np.arange(n), counts)
    is_call = np.asarray(pc.equal(kind, "tool_call"))
    is_result = np.asarray(pc.equal(kind, "tool_result"))
    lengths = char_lengths(responses)
    fast = counts > 0
    labelled = np.asarray(pc.is_valid(flat.field("label")))
    fast[parents[labelled]] = False
    del start_char
    # Each call's clip ends at the next step that is a call or a result, if a result.
    marks = np.flatnonzero(is_call | is_result)
    calls = np.flatnonzero(is_call)
    position = np.searchsorted(marks, calls, side="right")
    following = np.where(position < len(marks), marks[np.minimum(position, len(marks) - 1)],
                         -1)
    closes = ((following >= 0) & is_result[np.maximum(following, 0)]
              & (parents[np.maximum(following, 0)] == parents[calls]))
    end_step = np.where(closes, following, calls)
    call_rows = parents[calls]
    call_end = end_char[end_step]
    # The final clip of every response, after its calls' clips.
    per_row = np.bincount(call_rows, minlength=n)
    clip_counts = per_row + 1
    clip_starts = np.concatenate([[0], np.cumsum(clip_counts)])
    total = int(clip_starts[-1])
    owner = np.repeat(np.arange(n), clip_counts)
    slot = np.arange(total) - clip_starts[owner]
    is_final = slot == per_row[owner]
    call_slot = np.flatnonzero(~is_final)
    ends = np.empty(total, np.int64)
    ends[call_slot] = call_end
    ends[is_final] = lengths
    starts = np.empty(total, np.int64)
    starts[1:] = ends[:-1]
    starts[clip_starts[:-1]] = 0
    # Step ranges, relative to the response's steps.
    last = np.empty(total, np.int64)  # one past the clip's last step, global
    last[call_slot] = end_step + 1
    last[is_final] = list_offsets[1:]
    first = np.empty(total, np.int64)
    first[1:] = last[:-1]
    first[clip_starts[:-1]] = list_offsets[:-1]
    # Offsets that do not increase or leave the text: Python's slicing decides.
    bad = (ends < starts) | (ends > lengths[owner])
    fast[owner[bad]] = False
    keep_rows = np.flatnonzero(fast)
    keep = fast[owner]
    owner, slot = owner[keep], slot[keep]
    starts, ends, first, last = starts[keep], ends[keep], first[keep], last[keep]
    is_final = is_final[keep]
    call_keep = fast[call_rows]
    calls = calls[call_keep]
    # Texts: the kept responses' bytes, cut at each clip's start.
    kept_responses = (responses if len(keep_rows) == n  # all of them, in order: no copy
                      else responses.take(pa.array(keep_rows)))
    kept_data, kept_offsets = utf8_bytes(kept_responses)
    remap = np.full(n, -1)
    remap[keep_rows] = np.arange(len(keep_rows))
    local = remap[owner]
    byte_starts = _char_to_byte(kept_data, kept_offsets, local, starts)
    bounds = np.append(byte_starts, kept_offsets[-1]).astype(np.int64)
    content = pa.LargeStringArray.from_buffers(len(owner), pa.py_buffer(bounds),
                                               pa.py_buffer(kept_data))
    # Steps grouped by clip: clip ids of every step of a kept response.
    step_kept = fast[parents]
    clip_of_step = np.searchsorted(first, np.flatnonzero(step_kept), side="right") - 1
    text = flat.field("content")
    # The kernel joins large strings without nulls (the steps' type); else Arrow does.
    compiled = (kernel() if not text.null_count and text.type == pa.large_string()
                else None)
    text_data, text_offsets = utf8_bytes(text) if compiled is not None else (None, None)

    def joined(kind_name: str) -> tuple[pa.Array, np.ndarray]:
        chosen = np.asarray(pc.equal(kind, kind_name)) & step_kept
        clip_ids = clip_of_step[np.asarray(pc.equal(kind, kind_name))[step_kept]]
        if compiled is not None:  # one pass, no list array (the same strings)
            out_offsets, out_data = compiled.join_groups(
                np.ascontiguousarray(text_data), text_offsets,
                np.flatnonzero(chosen).astype(np.int64), clip_ids.astype(np.int64),
                len(owner), b"\n")
            return (pa.LargeStringArray.from_buffers(len(owner), pa.py_buffer(out_offsets),
                                                     pa.py_buffer(out_data)),
                    np.bincount(clip_ids, minlength=len(owner)))
        lists = pa.ListArray.from_arrays(
            pa.array(np.searchsorted(clip_ids, np.arange(len(owner) + 1)), pa.int32()),
            text.filter(pa.array(chosen)))
        return pc.binary_join(lists, _NEWLINE), np.bincount(clip_ids, minlength=len(owner))

    thought, _ = joined("thought")
    result, _ = joined("tool_result")
    answer, answers = joined("answer")
    call_index = np.full(len(owner), -1)
    call_index[~is_final] = calls
    index = pa.array(call_index, mask=is_final)
    tool_type = pc.if_else(pa.array(is_final), pa.scalar(FINAL_TOOL_TYPE, pa.large_string()),
                           _or_generic(flat.field("tool_type").take(index)))
    return BatchClips(
        fast=fast, owner=owner, clip_index=slot, tool_type=tool_type,
        tool_name=flat.field("tool_name").take(index).to_pylist(),
        start=starts, end=ends, content=content, thought=thought,
        tool_call=pc.fill_null(text.take(index), ""),
        action_input=pc.fill_null(flat.field("tool_input").take(index), ""),
        result=result, has_answer=answers > 0, answer=answer,
        step_start=first - list_offsets[owner], step_end=last - list_offsets[owner])


def _or_generic(values: pa.Array) -> pa.Array:
    """``value or "generic"``: a missing or empty tool type is the generic one."""
    empty = pc.fill_null(pc.equal(values, ""), True)
    return pc.if_else(empty, pa.scalar(GENERIC_TOOL_TYPE, pa.large_string()), values)
