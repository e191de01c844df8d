"""``iter_records`` decides JSONL, list or document by position now, without copying the
file (#12.1); it must decide exactly as the previous version, kept here as the reference."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from eval_pipeline.formats.base import (
    RawRecord,
    _document_records,
    _load_document,
    iter_jsonl_bytes,
    iter_records,
    looks_like_json_line,
)


def reference_iter_records(data: bytes) -> Iterator[RawRecord]:
    """The version before #12.1, verbatim."""
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    stripped = body.strip()
    first, _, rest = stripped.partition(b"\n")
    if stripped[:1] not in (b"[", b"{") or (rest.strip() and looks_like_json_line(first)):
        yield from iter_jsonl_bytes(body)
        return
    doc, failure, repairs = _load_document(body)
    if failure is None:
        yield from _document_records(doc, repairs)
    elif rest.strip() and any(looks_like_json_line(line) for line in rest.split(b"\n")
                              if line[:1] in (b"{", b"[")):
        yield from iter_jsonl_bytes(body)
    else:
        yield failure


PIECES = [
    b'{"a": 1}', b'{"a": [1,', b"2]}", b"[", b"]", b'[{"b": 2}, {"c": 3}]', b'"x"', b"42",
    b"{", b"}", b'"k": "v"', b",", b"\n", b"\r\n", b" ", b"\t", b"\x0b", b"\x0c", b"\xef\xbb\xbf",
    b"\x00\x01", b"\xff", b'{"cut": "', b"null", b"[1, 2", b'{"nested": {"d": [1, {"e": 2}]}}',
]


def test_iter_records_decides_as_before() -> None:
    rng = random.Random(12)
    cases = [b"", b"\n", b"  \n\t", b'{"a": 1}', b'{"a": 1}\n{"b": 2}\n', b'[\n{"a": 1}\n]\n',
             b'\xef\xbb\xbf{\n "a": 1\n}\n', b'{"bad": \n{"a": 1}\n', b"[1, 2]\n[3]\n"]
    cases += [b"".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
              for _ in range(20_000)]
    for data in cases:
        got = list(iter_records(data))
        want = list(reference_iter_records(data))
        assert got == want, data
    assert len({len(list(iter_records(c))) for c in itertools.islice(cases, 200)}) > 3
