"""The bad-input corpus: every kind of damage, each record kept (with its repair) or
quarantined (with file, line, reason and a bounded excerpt), never lost and never raised.

The corpus is generated here, in tmp_path, so nothing large is committed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval_pipeline.formats import PARSERS, parse_file
from eval_pipeline.formats.base import EXCERPT_CHARS
from eval_pipeline_tests.formats.helpers import assert_result_ok


def _rec(task_id: str, raw: str, **more: object) -> bytes:
    return json.dumps({"task_id": task_id, "raw_response": raw, **more},
                      ensure_ascii=False).encode()


def bad_jsonl() -> bytes:
    lines = [
        b"\xef\xbb\xbf" + _rec("t1", "<think>a</think><answer>b</answer>") + b"\r\n",  # 1 BOM+CRLF
        b"\r\n",                                                                     # 2 blank
        b'{"task_id": "t2", "raw_response": \n',                                   # 3 bad JSON
        b"[1, 2, 3]\n",                                                              # 4 not object
        b'{"task_id": "t3", "raw_response": 42}\n',                                # 5 wrong type
        b'{"task_id": "t4"}\n',                                                      # 6 missing
        b'{"task_id": "t5", "raw_response": "caf\xe9 au lait"}\n',                  # 7 latin-1
        b"\x00\x01\x02\x03garbage\xff\xfe\x00\n",                                    # 8 binary
        _rec("t1", "<think>again</think>") + b"\n",                                  # 9 dup id
        _rec("t6", "<think>" * 500 + "x" + "</think>" * 500) + b"\n",                # 10 nested
        _rec("t7", "<think>open <result>r</think> </answer> <answer>end") + b"\n",  # 11 unbal.
        b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",                          # 12 too deep
        b"   \n",                                                                    # 13 blank
        b'{"task_id": "t9", "raw_resp',                                             # 14 truncated
    ]
    return b"".join(lines)


def test_every_bad_record_is_kept_or_quarantined_with_a_reason(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(bad_jsonl())
    result = parse_file(path, "b7", format_name="xml_tags")
    assert_result_ok(result)
    reasons = {q.source_line: q.reason for q in result.quarantined}
    assert reasons == {3: "invalid_json", 4: "not_an_object", 5: "wrong_type",
                       6: "missing_field", 8: "binary_data", 12: "too_deep",
                       14: "truncated_record"}
    kept = {t.source_line: t for t in result.trajectories}
    assert sorted(kept) == [1, 7, 9, 10, 11]
    # 12 non-blank lines read: every one accounted for, nothing twice
    assert len(result.trajectories) + len(result.quarantined) == 12
    for q in result.quarantined:
        assert q.source_file == "bad.jsonl" and q.batch == "b7" and q.error
        assert len(q.excerpt) <= EXCERPT_CHARS + 40
    # BOM and CRLF are invisible in the kept record
    assert kept[1].task_id == "t1" and kept[1].raw_response.startswith("<think>")
    # non-UTF-8 bytes are replaced and the repair is recorded
    assert "\ufffd" in kept[7].raw_response
    assert kept[7].extra["repairs"][0].startswith("invalid_utf8_replaced")
    # duplicate task ids: both kept, ids unique, the second points at the first
    assert kept[9].task_id == "t1" and kept[9].extra["duplicate_of"] == kept[1].trajectory_id
    assert kept[9].trajectory_id != kept[1].trajectory_id
    # unbalanced tags: kept, and the repair is noted
    assert kept[11].extra["tag_notes"]
    # 500 nested <think>s: one thought, the nesting noted
    assert [s.kind for s in kept[10].steps] == ["thought"]
    assert kept[10].steps[0].content.strip("<think/>") == "x"
    assert any(n.startswith("nested <think>") for n in kept[10].extra["tag_notes"])


def test_empty_and_blank_files_are_one_quarantined_record(tmp_path: Path):
    for name, data in (("empty.jsonl", b""), ("blank.jsonl", b"\xef\xbb\xbf\n\r\n  \n"),
                       ("empty.json", b"")):
        path = tmp_path / name
        path.write_bytes(data)
        result = parse_file(path, "b")
        assert not result.trajectories
        assert [(q.source_line, q.reason) for q in result.quarantined] == [(1, "empty_file")]


@pytest.mark.parametrize("fmt,data", [
    ("tau_bench", b'[{"task_id": 1, "traj": [{"role": "user", "content": "hi"}'),
    ("fireact", b'{"1": {"traj": [], "reward": tru'),
    ("toolbench", b"not json at all"),
    ("swe_agent", b"\x00\x00\x00binary"),
    ("devai_judgment", b'"a bare string"'),
])
def test_whole_file_formats_that_do_not_parse_give_one_record(tmp_path: Path, fmt, data):
    path = tmp_path / "whole.json"
    path.write_bytes(data)
    result = parse_file(path, "b", format_name=fmt)
    assert not result.trajectories
    assert len(result.quarantined) == 1 and result.quarantined[0].source_line == 1
    assert result.quarantined[0].reason in {
        "invalid_json", "truncated_record", "binary_data", "not_an_object"}


def test_whole_file_list_with_bad_elements(tmp_path: Path):
    path = tmp_path / "tau.json"
    good = {"task_id": 1, "reward": 1.0, "traj": [{"role": "user", "content": "hi"}]}
    path.write_text(json.dumps([good, 5, {"task_id": 2, "traj": "not a list"}, good]))
    result = parse_file(path, "b", format_name="tau_bench")
    assert [(q.source_line, q.reason) for q in result.quarantined] == [
        (2, "not_an_object"), (3, "wrong_type")]
    assert len(result.trajectories) == 2
    assert result.trajectories[1].extra["duplicate_of"] == result.trajectories[0].trajectory_id


def test_text_log_with_binary_and_with_bad_bytes(tmp_path: Path):
    path = tmp_path / "log.txt"
    path.write_bytes(b"Thought: hi\x00\nAction: Search[x]\n")
    result = parse_file(path, "b", format_name="react_text")
    assert [(q.source_line, q.reason) for q in result.quarantined] == [(1, "binary_data")]
    path.write_bytes(b"Thought: caf\xe9\r\nAction: Search[x]\r\nObservation: y\r\n")
    (traj,) = parse_file(path, "b", format_name="react_text").trajectories
    assert traj.extra["repairs"] and "\r" not in traj.raw_response


def test_unrecognised_files_are_quarantined_not_dropped(tmp_path: Path):
    garbage = tmp_path / "noise.bin"
    garbage.write_bytes(bytes(range(256)) * 10)
    result = parse_file(garbage, "b")
    # Not text at all: one record for the file, named for what it is.
    assert [(q.source_line, q.reason, q.source_format) for q in result.quarantined] == [
        (1, "binary_data", "unrecognized")]
    objects = tmp_path / "other.jsonl"
    objects.write_text('{"foo": 1}\n{"bar": 2}\nnot json\n')
    result = parse_file(objects, "b")
    assert [q.reason for q in result.quarantined] == [
        "unrecognized_format", "unrecognized_format", "invalid_json"]


def test_a_parser_crash_becomes_one_quarantined_record(tmp_path: Path, monkeypatch):
    path = tmp_path / "x.jsonl"
    path.write_bytes(_rec("t", "<think>x</think>") + b"\n")

    def boom(*_: object) -> None:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(PARSERS["xml_tags"], "parse", boom)
    result = parse_file(path, "b", format_name="xml_tags")
    assert [(q.reason, q.source_line) for q in result.quarantined] == [("parser_error", 1)]
    assert "parser bug" in result.quarantined[0].error


def test_one_50_mb_record(tmp_path: Path):
    path = tmp_path / "huge.jsonl"
    chunk = "<think>" + "y" * 1000 + "</think>\n<result>" + "z" * 1000 + "</result>\n"
    body = chunk * (50_000_000 // len(chunk))
    with path.open("wb") as fh:
        fh.write(_rec("small", "<answer>1</answer>") + b"\n")
        fh.write(_rec("huge", body) + b"\n")
    assert path.stat().st_size > 50_000_000
    # Speed is shown by bench/bench_pipeline.py, not asserted here (no timed tests).
    result = parse_file(path, "b")
    assert not result.quarantined and len(result.trajectories) == 2
    huge = result.trajectories[1]
    assert len(huge.raw_response) == len(body)
    assert len(huge.steps) == 2 * (50_000_000 // len(chunk))
