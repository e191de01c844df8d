"""The C batch JSON reader (``_jsonlines.c``) gives json_table's pyarrow reading exactly.

``formats/xml_arrow.json_table`` decodes a batch of plain XML-tag records either with the
C reader (one pass: lines, JSON, UTF-8, Arrow buffers) or, when it is not built or the
kernels are switched off, with pyarrow's JSON reader and its checks. Both must give the
same ``JsonBatch`` (the table's columns, types, nulls and values; line numbers; stripped
bounds; the records without ``success``), and None for the same batches, except where the
C reader is stricter on purpose (NaN, Infinity or an overflowing ``duration``, which Arrow
reads as a float and ``json.loads`` maybe not): then it says None and the batch is read by
``json.loads`` per line. Every accepted table is also held to ``json.loads`` of each line.
Checked on every corpora JSONL file, a generated drop's batches, hand-written edge cases,
random numbers and strings, and thousands of random mutations of real lines.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bench.drops import write_corpus_drop
from eval_pipeline import tagscan
from eval_pipeline.formats.xml_arrow import _JSON_SCHEMA, JsonBatch, json_table
from eval_pipeline.splitting import split_drop

pytestmark = pytest.mark.skipif(tagscan.JSON_BUILT is None,
                                reason="the C JSON reader eval_pipeline/_jsonlines.c is not built")

FIELDS = _JSON_SCHEMA.names


def c_table(data: bytes) -> JsonBatch | None:
    with tagscan.use_kernel(True):
        return json_table(data)


def arrow_table(data: bytes) -> JsonBatch | None:
    with tagscan.use_kernel(False):
        return json_table(data)


def _beyond(batch: JsonBatch | None) -> bool:
    """A batch the C reader refuses on purpose while Arrow reads it: a ``duration`` that
    is NaN or infinite (``NaN``, ``Infinity``, or a number that overflows)."""
    if batch is None:
        return False
    return any(d is not None and not math.isfinite(d)
               for d in batch.table.column("duration").to_pylist())


def _exact(values: list[Any]) -> list[Any]:
    return [("float", repr(v)) if isinstance(v, float) else (type(v).__name__, v)
            for v in values]


def assert_same(data: bytes) -> JsonBatch | None:
    """The C reading of ``data`` is pyarrow's (or None where that is beyond it), and
    ``json.loads`` of each of its lines gives its row."""
    got, want = c_table(data), arrow_table(data)
    if got is None:
        assert want is None or _beyond(want), "C refused a batch pyarrow reads"
        return None
    assert want is not None, "C read a batch pyarrow refuses"
    assert got.table.schema.equals(want.table.schema, check_metadata=True)
    assert got.table.num_rows == want.table.num_rows
    for name in FIELDS:
        g, w = got.table.column(name), want.table.column(name)
        assert g.type == w.type and g.null_count == w.null_count, name
        assert _exact(g.to_pylist()) == _exact(w.to_pylist()), name
    assert got.table.equals(want.table)
    got.table.validate(full=True)
    assert (got.lines, got.starts, got.ends, got.absent) == (
        want.lines, want.starts, want.ends, want.absent)
    assert got.data is data
    lines = data.split(b"\n")
    rows = got.table.to_pylist()
    for i, row in enumerate(rows):
        text = data[got.starts[i]:got.ends[i]]
        assert lines[got.lines[i] - 1].strip() == text
        value = json.loads(text)
        assert set(value) <= set(FIELDS)
        for name in FIELDS:
            expected = value.get(name)
            if name == "duration" and expected is not None:
                expected = float(expected)
            assert _exact([row[name]]) == _exact([expected]), (i, name)
        assert (i in got.absent) == ("success" not in value)
    return got


def _jsonl_files(folder: Path) -> Iterator[Path]:
    yield from sorted(folder.rglob("*.jsonl"))


def test_corpora_files_read_the_same(corpora_dir: Path) -> None:
    read = refused = 0
    for path in _jsonl_files(corpora_dir):
        data = path.read_bytes()
        if assert_same(data) is None:
            assert arrow_table(data) is None, path  # nothing beyond the C reader here
            refused += 1
        else:
            read += 1
    assert read >= 5 and refused >= 3, (read, refused)


def test_generated_drop_batches_read_the_same(tmp_path: Path, corpora_dir: Path) -> None:
    """The bench's kind of drop (corpora records with new task ids), split as the
    pipeline splits it: every batch read by the C reader, none left to the fallback."""
    drop = tmp_path / "drop.jsonl"
    write_corpus_drop(drop, 3, corpora_dir)
    manifests = split_drop(drop, tmp_path / "batches", 40)
    assert len(manifests) > 3
    for path in sorted((tmp_path / "batches").rglob("*.jsonl")):
        assert assert_same(path.read_bytes()) is not None, path


R = b'"raw_response": "r"'

EDGE_CASES: dict[str, tuple[bytes, bool]] = {
    # name: (batch, whether the C reader reads it)
    "plain": (b'{"task_id": "t", "raw_response": "<think>x</think>"}\n', True),
    "every field": (b'{"timestamp": "2025", "task_id": "t", "task_description": "d", '
                    b'"duration": 1.5, "success": false, "final_result": "f", '
                    b'"raw_response": "r"}', True),
    "escapes": (b'{"raw_response": "q\\" b\\\\ s\\/ \\b\\f\\n\\r\\t \\u0041\\u00e9\\u4e2d"}',
                True),
    "nul escape": (b'{"raw_response": "a\\u0000b", "task_id": "\\u0000"}', True),
    "surrogate pair": (b'{"raw_response": "\\ud83d\\ude00 \\uD83D\\uDE00"}', True),
    "lone high surrogate": (b'{"raw_response": "a\\ud800b"}', False),
    "lone high surrogate at end": (b'{"raw_response": "a\\ud800"}', False),
    "high then high": (b'{"raw_response": "\\ud800\\ud800"}', False),
    "lone low surrogate": (b'{"raw_response": "a\\udc00b"}', False),
    "surrogate in a null field's neighbour": (
        b'{"task_id": "\\udfff", "raw_response": "r"}', False),
    "short unicode escape": (b'{"raw_response": "\\u12"}', False),
    "bad hex": (b'{"raw_response": "\\u12g4"}', False),
    "unknown escape": (b'{"raw_response": "\\x41"}', False),
    "raw utf-8": ('{"raw_response": "é中🙂", "task_id": "ü"}'.encode(), True),
    "invalid utf-8 in a string": (b'{"raw_response": "a\xffb"}', False),
    "overlong utf-8": (b'{"raw_response": "\xc0\x80"}', False),
    "encoded surrogate": (b'{"raw_response": "\xed\xa0\x80"}', False),
    "beyond U+10FFFF": (b'{"raw_response": "\xf4\x90\x80\x80"}', False),
    "truncated utf-8": (b'{"raw_response": "\xe4\xb8"}', False),
    "invalid utf-8 in another field": (b'{"task_id": "\xe4", "raw_response": "r"}', False),
    "invalid utf-8 outside strings": (b'{"raw_response": "r"}\xff\n', False),
    "control character": (b'{"raw_response": "a\tb"}', False),
    "del is fine": (b'{"raw_response": "a\x7fb"}', True),
    "bom": (b'\xef\xbb\xbf{"raw_response": "r"}\n', False),
    "blank lines": (b'\n\n{"raw_response": "a"}\n   \n\t\r\n{"raw_response": "b"}\n\n', True),
    "crlf": (b'{"raw_response": "a"}\r\n{"raw_response": "b"}\r\n', True),
    "cr alone": (b'{"raw_response": "a"}\r{"raw_response": "b"}\r', False),
    "no final newline": (b'{"raw_response": "a"}\n{"raw_response": "b"}', True),
    "whitespace around tokens": (b' \t{ "raw_response" :\t"a" ,\r"success"  : true } \t\r\n',
                                 True),
    "form feed": (b'\x0c{"raw_response": "a"}', False),
    "vertical tab inside": (b'{"raw_response":\x0b"a"}', False),
    "object across lines": (b'{"raw_response":\n"a"}', False),
    "nested object": (b'{"task_id": {"a": 1}, ' + R + b'}', False),
    "array": (b'{"task_id": ["a"], ' + R + b'}', False),
    "object for raw_response": (b'{"raw_response": {"a": "b"}}', False),
    "top-level array": (b'[{"raw_response": "a"}]', False),
    "int": (b'{"duration": 12, ' + R + b'}', True),
    "exponents": (b'{"duration": 1.5E+3, ' + R + b'}\n{"duration": 2e-3, ' + R + b'}', True),
    "0e0": (b'{"duration": 0e0, ' + R + b'}', True),
    "0.0": (b'{"duration": 0.0, ' + R + b'}', True),
    "-0": (b'{"duration": -0, ' + R + b'}', False),
    "-0.0": (b'{"duration": -0.0, ' + R + b'}', False),
    "-1e-400 (a negative zero)": (b'{"duration": -1e-400, ' + R + b'}', False),
    "1e-400 (zero)": (b'{"duration": 1e-400, ' + R + b'}', True),
    "subnormal": (b'{"duration": 4.9e-324, ' + R + b'}', True),
    "1e400": (b'{"duration": 1e400, ' + R + b'}', False),
    "huge int (Arrow: inf)": (b'{"duration": 1' + b'0' * 400 + b', ' + R + b'}', False),
    "big int": (b'{"duration": 123456789012345678901234567890, ' + R + b'}', True),
    "2**53 + 1": (b'{"duration": 9007199254740993, ' + R + b'}', True),
    "long mantissa": (b'{"duration": 0.' + b'1' * 200 + b', ' + R + b'}', True),
    "NaN (Arrow reads it)": (b'{"duration": NaN, ' + R + b'}', False),
    "Infinity (Arrow reads it)": (b'{"duration": Infinity, ' + R + b'}', False),
    "leading zero": (b'{"duration": 01, ' + R + b'}', False),
    "bare dot": (b'{"duration": 1., ' + R + b'}', False),
    "plus": (b'{"duration": +1, ' + R + b'}', False),
    "bare exponent": (b'{"duration": 1e, ' + R + b'}', False),
    "nulls everywhere": (b'{"timestamp": null, "task_id": null, "task_description": null, '
                         b'"duration": null, "success": null, "final_result": null, ' + R
                         + b'}', True),
    "null raw_response": (b'{"raw_response": null}', False),
    "no raw_response": (b'{"task_id": "t"}', False),
    "empty object": (b'{}', False),
    "duplicate key": (b'{"task_id": "a", "task_id": "b", ' + R + b'}', False),
    "duplicate null key": (b'{"task_id": null, "task_id": "b", ' + R + b'}', False),
    "escaped key": (b'{"raw_\\u0072esponse": "a", "t\\u0061sk_id": "t"}', True),
    "unknown key": (b'{"other": 1, ' + R + b'}', False),
    "key of another case": (b'{"Task_id": "t", ' + R + b'}', False),
    "number for a string": (b'{"task_id": 1, ' + R + b'}', False),
    "string for a number": (b'{"duration": "1", ' + R + b'}', False),
    "number for a bool": (b'{"success": 1, ' + R + b'}', False),
    "bool for a string": (b'{"task_id": true, ' + R + b'}', False),
    "truncated literal": (b'{"success": tru, ' + R + b'}', False),
    "literal run on": (b'{"success": truex, ' + R + b'}', False),
    "two objects on one line": (b'{"raw_response": "a"} {"raw_response": "b"}', False),
    "trailing text": (b'{"raw_response": "a"} x', False),
    "trailing comma": (b'{"raw_response": "a",}', False),
    "missing comma": (b'{"raw_response": "a" "task_id": "t"}', False),
    "truncated line": (b'{"raw_response": "a"}\n{"raw_response": "b', False),
    "truncated object": (b'{"raw_response": "a"', False),
    "empty batch": (b'', False),
    "blank batch": (b'\n \n\r\n', False),
    "success missing, null, false": (b'{"raw_response": "a"}\n{"success": null, ' + R
                                     + b'}\n{"success": false, ' + R + b'}', True),
}


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_cases_read_the_same(name: str) -> None:
    data, read = EDGE_CASES[name]
    got = assert_same(data)
    assert (got is not None) == read


def test_absent_is_the_records_without_a_success_key() -> None:
    got = assert_same(EDGE_CASES["success missing, null, false"][0])
    assert got is not None and got.absent == {0}
    assert got.table.column("success").to_pylist() == [None, None, False]


def test_the_table_outlives_the_reader_call() -> None:
    """The columns' buffers belong to the table (the C reader's memory is not freed under
    it): read, drop everything else, read the values back."""
    data = b"\n".join(json.dumps({"raw_response": f"r{i}" * 50, "task_id": f"t{i}"}).encode()
                      for i in range(300))
    got = c_table(bytes(data))
    assert got is not None
    table = got.table
    del got
    assert table.column("raw_response").to_pylist() == [f"r{i}" * 50 for i in range(300)]
    assert table.column("raw_response").type == pa.large_string()


def _random_number(rng: random.Random) -> str:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30)))
    digits = digits.lstrip("0") or "0"
    token = rng.choice(["", "-"]) + digits
    if rng.random() < 0.5:
        token += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
    if rng.random() < 0.5:
        token += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 330))
    return token


def test_random_numbers_read_the_same() -> None:
    """Ints and decimals of every length and exponent: Python's float() of the token
    (correctly rounded) is Arrow's reading, and json.loads + float."""
    rng = random.Random(7)
    tokens = [_random_number(rng) for _ in range(3000)]
    tokens += [repr(rng.uniform(-1e6, 1e6)) for _ in range(500)]
    tokens += [str(rng.randint(-10**25, 10**25)) for _ in range(500)]
    tokens += ["2.2250738585072011e-308", "2.2250738585072014e-308", "4.9406564584124654e-324",
               "1.7976931348623157e308", "1.7976931348623158e308", "9007199254740993",
               "0.1", "1e23", "8.98846567431158e307"]
    read = 0
    for start in range(0, len(tokens), 50):
        lines = [f'{{"duration": {t}, "raw_response": "r"}}' for t in tokens[start:start + 50]]
        if assert_same("\n".join(lines).encode()) is not None:
            read += 1
        else:  # a negative zero or an overflow among them: each line alone
            for line in lines:
                read += assert_same(line.encode()) is not None
    assert read > 50


def test_random_strings_read_the_same() -> None:
    """Random text (ASCII, controls, non-ASCII of every UTF-8 length, lone and paired
    surrogates) written by json.dumps with and without ensure_ascii."""
    rng = random.Random(11)
    alphabet = ['a', ' ', '"', '\\', '/', '\n', '\t', '\x00', '\x1f', '\x7f', 'é', '中',
                '🙂', '\u2028', '\ufeff', '<think>', '\\u', 'ÿ']
    lone = ['\ud800', '\udbff', '\udc00', '\udfff']
    read = refused = 0
    for _ in range(600):
        texts = ["".join(rng.choice(lone if rng.random() < 0.005 else alphabet)
                         for _ in range(rng.randint(0, 40))) for _ in range(4)]
        ascii_only = rng.random() < 0.5
        lines = [json.dumps({"raw_response": t, "task_id": texts[(i + 1) % 4]},
                            ensure_ascii=ascii_only) for i, t in enumerate(texts)]
        try:
            data = "\n".join(lines).encode("utf-8")
        except UnicodeEncodeError:  # a raw lone surrogate: no UTF-8 file holds it
            data = "\n".join(lines).encode("utf-8", "surrogatepass")
        if assert_same(data) is None:
            refused += 1
        else:
            read += 1
    assert read > 50 and refused > 50


SPECIALS = [b'"', b'\\', b'\x01', b'\x1f', b'\t', b'\x7f', b' ', b'\xc3\xa9', b'\xe4\xb8\xad',
            b'\xf0\x9f\x99\x82', b'\xff', b'\xe4\xb8', b'\xed\xa0\x80', b'\\n', b'\\"',
            b'\\u00e9', b'\\ud800', b'\\ud83d\\ude00', b'\xe0\x9f\xbf', b'\xe0\xa0\x80',
            b'\xed\x9f\xbf', b'\xef\xbf\xbf', b'\xf4\x8f\xbf\xbf', b'\xf4\x90\x80\x80']


def test_every_special_byte_at_every_position_reads_the_same() -> None:
    """A quote, backslash, control character, escape or (in)valid UTF-8 sequence at each
    position of strings of every length up to 24 (ASCII around it, or CJK: the C reader
    checks two three-byte characters at a time): the C reader tests 16, 8 and then single
    bytes at a time (8 only near the end of the batch), so each of its paths meets each
    kind of byte, at each offset, also within a file's last bytes (each line alone)."""
    read = refused = 0
    pads = [(b"a", b"b", 25), ("中".encode(), "文".encode(), 12), ("中".encode(), b"b", 12)]
    for special, (before, after, lengths) in itertools.product(SPECIALS, pads):
        batch = []
        for length in range(lengths):
            for at in range(length + 1):
                text = before * at + special + after * (length - at)
                batch.append(b'{"task_id": "t", "raw_response": "' + text + b'"}')
                batch.append(b'{"raw_response": "r", "task_id": "' + text + b'"}')
        assert_same(b"\n".join(batch))
        for line in batch:
            if assert_same(line) is None:
                refused += 1
            else:
                read += 1
    assert read > 2000 and refused > 2000, (read, refused)


def _real_lines(corpora: Path) -> list[bytes]:
    lines: list[bytes] = []
    for path in _jsonl_files(corpora):
        data = path.read_bytes()
        if arrow_table(data) is not None:
            lines += [line.strip() for line in data.split(b"\n") if line.strip()]
    return lines


INSERTS = [b'"', b'\\', b'\\u', b'\\ud800', b'\\udc00', b'\xc3', b'\xe4\xb8\xad', b'\xff',
           b'\xed\xa0\x80', b'\n', b'\r', b' ', b'{', b'}', b',', b':', b'0', b'-', b'e',
           b'null', b'\x00', b'\xf0\x9f\x99\x82']


def _mutate(line: bytes, rng: random.Random) -> bytes:
    data = bytearray(line)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        # Near the fields' values and keys half the time (mutations there matter most).
        if rng.random() < 0.5:
            marks = [i for i in range(len(data)) if data[i] in b'":,'][:400]
            if marks:
                at = rng.choice(marks) + rng.randint(-2, 2)
                at = max(0, min(at, len(data)))
        how = rng.randrange(3)
        if how == 0 and at < len(data):
            data[at] ^= 1 << rng.randrange(8)
        elif how == 1 and at < len(data):
            del data[at:at + rng.randint(1, 3)]
        else:
            data[at:at] = rng.choice(INSERTS)
    return bytes(data)


def test_random_mutations_of_real_lines_read_the_same(corpora_dir: Path) -> None:
    """Byte flips, deletions and insertions (quotes, backslashes, escapes, non-ASCII and
    invalid bytes, JSON punctuation) in real lines, two untouched lines around each: the
    C reader and pyarrow agree on None or give the same table."""
    rng = random.Random(5)
    lines = [line for line in _real_lines(corpora_dir) if len(line) < 20_000]
    assert len(lines) > 100
    read = refused = 0
    for _ in range(3000):
        a, b, c = rng.sample(lines, 3)
        data = b"\n".join([a, _mutate(b, rng), c]) + b"\n"
        if assert_same(data) is None:
            refused += 1
        else:
            read += 1
    assert read > 300 and refused > 300, (read, refused)


def test_the_responses_buffer_must_hold_the_batch() -> None:
    """raw_response's bytes go into the caller's buffer (pyarrow's pool); one too small
    for the batch is refused up front, never written past."""
    reader = tagscan.JSON_BUILT
    assert reader is not None
    data = b'{"raw_response": "' + b"x" * 100 + b'"}'
    with pytest.raises(ValueError, match="len\\(data\\) \\+ 16"):
        reader.read_batch(data, bytearray(len(data) + 15))
    got = reader.read_batch(data, bytearray(len(data) + 16))
    assert got is not None and got[5][6][3] == 100  # raw_response: the bytes used
