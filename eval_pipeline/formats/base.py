"""The parser seam: one class per input format, all producing canonical trajectories.

A parser never raises for a bad record: it quarantines it with file, line, reason and a
bounded excerpt, so ``kept + removed + quarantined == records read`` holds for any input.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import json
import re
import shutil
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO, Any, ClassVar, Protocol

import pyarrow as pa

from eval_pipeline.models import ParseResult, QuarantinedRecord, Trajectory
from eval_pipeline.tool_registry import ToolRegistry, default_registry

EXCERPT_CHARS = 500


def excerpt(text: str | bytes, limit: int = EXCERPT_CHARS) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def trajectory_id(source_file: str, index: int, content: str | bytes) -> str:
    """Stable id: the same record in the same file always gets the same id.

    ``content`` is the record's text, or the UTF-8 bytes it was strictly decoded from
    (the same digest without encoding the text again: a tenth of parsing, #12.1).
    """
    data = content if isinstance(content, bytes) else content.encode("utf-8",
                                                                     errors="replace")
    digest = hashlib.sha256(data).hexdigest()[:12]
    return f"{file_stem(source_file)}:{index}:{digest}"


def one_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``values`` as one array: its only chunk as it is, more chunks joined.
    (``ChunkedArray.combine_chunks`` copies even a single chunk: a copy of every response
    or step of a batch each time a stage took its column, #12.1.)"""
    if isinstance(values, pa.Array):
        return values
    return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()


def line_ids(source_file: str, data: bytes, starts: list[int], ends: list[int]
             ) -> list[str]:
    """:func:`trajectory_id` of each record ``i`` whose line is ``data[starts[i]:ends[i]]``
    (its index ``i``): the same digests, each over a view of the buffer instead of a
    bytes object cut from it."""
    stem = file_stem(source_file)
    view = memoryview(data)
    sha256 = hashlib.sha256
    return [f"{stem}:{i}:{sha256(view[start:end]).hexdigest()[:12]}"
            for i, (start, end) in enumerate(zip(starts, ends, strict=True))]


@lru_cache(maxsize=64)
def file_stem(source_file: str) -> str:
    """A ``Path`` per record cost a fifth of building the trajectory."""
    return Path(source_file).stem


@dataclass(frozen=True)
class RawRecord:
    """One JSON object read from a file, or the reason it could not be read.

    ``repairs`` names what was fixed to read it (e.g. invalid UTF-8 replaced), so a kept
    record carries its repair into ``Trajectory.extra`` instead of hiding it.
    """

    line: int
    text: str
    value: Any = None
    error: str | None = None
    reason: str | None = None
    repairs: tuple[str, ...] = ()
    key: str | None = None
    utf8: bytes | None = None
    """The bytes ``text`` was strictly decoded from (``text.encode()`` without the work),
    when it was read from one JSONL line; None otherwise."""

    @property
    def content(self) -> str | bytes:
        """What the trajectory id hashes: the line's bytes, else the text."""
        return self.text if self.utf8 is None else self.utf8


@dataclass(frozen=True)
class ParseContext:
    batch: str
    source_file: str
    registry: ToolRegistry
    #: The file being read, for formats that consult siblings (BFCL answers) or the folder
    #: layout (DevAI judge kind); ``source_file`` is only its display name.
    path: Path | None = None

    def quarantine(
        self, line: int, reason: str, error: str, raw: str | bytes, source_format: str | None
    ) -> QuarantinedRecord:
        return QuarantinedRecord(
            batch=self.batch,
            source_file=self.source_file,
            source_line=line,
            source_format=source_format,
            reason=reason,
            error=error,
            excerpt=excerpt(raw),
        )


_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 13))


def looks_binary(raw: bytes) -> bool:
    """NUL bytes or mostly control bytes: not text that any JSON writer produced."""
    if b"\x00" in raw:
        return True
    sample = raw[:4096]
    # Counted in C (translate deletes them): a Python loop over bytes cost a third of parsing.
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return controls > len(sample) * 0.1



# Reading any input as UTF-8 bytes. Drops arrive gzip-compressed (``.jsonl.gz``) or written
# by Windows tools in UTF-16; every reader (detection, the splitter, the parsers) sees the
# same UTF-8 text, decoded on the fly in chunks so a compressed drop is never held whole.

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 16
_UNDECODABLE = "eval_pipeline.undecodable"


def _mark_undecodable(exc: UnicodeError) -> tuple[str, int]:
    """A UTF-16 unit that does not decode becomes byte 0xFF in the UTF-8 stream (through
    ``surrogateescape``): invalid UTF-8 that the line reader replaces and records as a
    repair, as it does for any bad byte, instead of it vanishing here."""
    end = exc.end if isinstance(exc, UnicodeDecodeError) else 0
    return "\udcff", end


codecs.register_error(_UNDECODABLE, _mark_undecodable)


class CorruptInputError(ValueError):
    """The file's compression is damaged or cut off: nothing read from it can be trusted."""


@dataclass(frozen=True)
class SourceEncoding:
    """How a file's bytes become UTF-8 text: gunzipped or not, and its text encoding."""

    gzip: bool = False
    text: str = "utf-8"
    """``utf-8``, ``utf-16-le`` or ``utf-16-be``."""
    bom: bool = False
    """A UTF-16 byte-order mark to skip (a UTF-8 BOM is left to the line readers)."""

    @property
    def plain(self) -> bool:
        return not self.gzip and self.text == "utf-8"


def _utf16(head: bytes) -> tuple[str, bool] | None:
    """UTF-16 by its BOM, or without one when JSON starts with ASCII every other byte."""
    if head.startswith(codecs.BOM_UTF16_LE):
        return "utf-16-le", True
    if head.startswith(codecs.BOM_UTF16_BE):
        return "utf-16-be", True
    sample = head[:64]
    if len(sample) < 4 or len(sample) % 2:
        sample = sample[: len(sample) - len(sample) % 2]
    if len(sample) < 4:
        return None
    evens, odds = sample[0::2], sample[1::2]
    # Mostly NUL high bytes and a JSON opener first: the shape of ASCII JSON in UTF-16.
    if evens[:1] in (b"{", b"[") and odds.count(0) >= len(odds) * 0.9:
        return "utf-16-le", False
    if odds[:1] in (b"{", b"[") and evens.count(0) >= len(evens) * 0.9:
        return "utf-16-be", False
    return None


def source_encoding(path: Path) -> SourceEncoding:
    """Gzip by its magic bytes (whatever the name says), UTF-16 by its BOM or shape."""
    with path.open("rb") as fh:
        compressed = fh.read(2) == GZIP_MAGIC
    head = b""
    if compressed:
        try:
            with gzip.open(path, "rb") as gz:
                head = gz.read(64)
        except (OSError, EOFError, zlib.error):
            head = b""  # corrupt from the start: reading it will say so
    else:
        with path.open("rb") as fh:
            head = fh.read(64)
    utf16 = _utf16(head)
    if utf16 is None:
        return SourceEncoding(gzip=compressed)
    return SourceEncoding(gzip=compressed, text=utf16[0], bom=utf16[1])


def _error_name(exc: BaseException) -> str:
    return "zlib.error" if isinstance(exc, zlib.error) else type(exc).__name__


class _Guarded(io.RawIOBase):
    """A gzip stream whose damage surfaces as one error type, :class:`CorruptInputError`."""

    def __init__(self, source: gzip.GzipFile, name: str) -> None:
        self._source = source
        self._name = name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self._source.read(len(buffer))
        except (OSError, EOFError, zlib.error) as exc:
            raise CorruptInputError(
                f"gzip data in {self._name} is corrupt or cut off: {_error_name(exc)}: {exc}"
            ) from exc
        buffer[: len(data)] = data
        return len(data)


class _Utf16ToUtf8(io.RawIOBase):
    """UTF-16 in, UTF-8 out, one chunk at a time (an incremental decoder keeps the units
    split across chunks)."""

    def __init__(self, source: IO[bytes], codec: str) -> None:
        self._source = source
        self._decoder = codecs.getincrementaldecoder(codec)(errors=_UNDECODABLE)
        self._pending = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending and not self._eof:
            chunk = self._source.read(_CHUNK)
            self._eof = not chunk
            text = self._decoder.decode(chunk, final=self._eof)
            self._pending = text.encode("utf-8", "surrogateescape")
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


@contextmanager
def open_text(path: Path) -> Iterator[IO[bytes]]:
    """The file's content as a stream of UTF-8 bytes: gunzipped and transcoded on the fly,
    so memory holds a chunk, never the file. Iterating it yields lines, as a plain file.

    Reading a damaged gzip file raises :class:`CorruptInputError` (possibly after some
    lines were read: a cut-off download is only found at its end).
    """
    encoding = source_encoding(path)
    with ExitStack() as stack:
        stream: IO[bytes] = stack.enter_context(path.open("rb"))
        if encoding.gzip:
            gz = stack.enter_context(gzip.GzipFile(fileobj=stream, mode="rb"))
            stream = stack.enter_context(io.BufferedReader(_Guarded(gz, path.name), _CHUNK))
        if encoding.text != "utf-8":
            if encoding.bom:
                stream.read(2)
            stream = stack.enter_context(
                io.BufferedReader(_Utf16ToUtf8(stream, encoding.text), _CHUNK))
        yield stream


def read_text_head(path: Path, size: int) -> bytes:
    """Up to ``size`` bytes of the file's UTF-8 text; what decoded before any damage."""
    parts: list[bytes] = []
    got = 0
    try:
        with open_text(path) as fh:
            while got < size:
                part = fh.read(min(8192, size - got))
                if not part:
                    break
                parts.append(part)
                got += len(part)
    except CorruptInputError:
        pass
    return b"".join(parts)


def decoded_name(path: Path) -> str:
    """The name of the file's decoded text: ``x.jsonl.gz`` -> ``x.jsonl``."""
    name = path.name
    return name[:-3] if name.lower().endswith(".gz") and len(name) > 3 else name


def copy_decoded(path: Path, target: Path) -> None:
    """Write the file's UTF-8 text to ``target``, streamed; raises CorruptInputError."""
    with open_text(path) as src, target.open("wb") as dst:
        shutil.copyfileobj(src, dst, _CHUNK)


def _cut_off(exc: json.JSONDecodeError, text: str) -> bool:
    """The parser ran out of text mid-value: the record was cut off, not malformed."""
    return exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated string")


def _decode_line(raw: bytes, lineno: int, is_last: bool) -> RawRecord:
    repairs: tuple[str, ...] = ()
    if looks_binary(raw):
        return RawRecord(lineno, raw.decode("utf-8", "replace"), None,
                         "binary data (NUL or control bytes), not a JSON text line",
                         "binary_data")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", "replace")
        repairs = (f"invalid_utf8_replaced: {exc.reason} at byte {exc.start}",)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if repairs:
            return RawRecord(lineno, text, None, f"not valid UTF-8 and not JSON: {exc}",
                             "invalid_encoding")
        if is_last and (_cut_off(exc, text) or text.lstrip()[:1] in ("{", "[")):
            return RawRecord(lineno, text, None, f"record ends mid-value: {exc}",
                             "truncated_record")
        return RawRecord(lineno, text, None, f"invalid JSON: {exc}", "invalid_json")
    except RecursionError:
        return RawRecord(lineno, text, None, "JSON nested too deeply to read", "too_deep")
    if not isinstance(value, dict):
        return RawRecord(lineno, text, None,
                         f"expected a JSON object, got {type(value).__name__}",
                         "not_an_object")
    return RawRecord(lineno, text, value, repairs=repairs, utf8=None if repairs else raw)


def iter_jsonl_bytes(data: bytes) -> Iterator[RawRecord]:
    """Split JSONL bytes into records; see :func:`iter_jsonl`."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    last_content = max((i for i, raw in enumerate(lines) if raw.strip()), default=-1)
    truncated_tail = not data.endswith(b"\n")
    for index, raw in enumerate(lines):
        stripped = raw.strip()
        if not stripped:
            continue
        yield _decode_line(stripped, index + 1, truncated_tail and index == last_content)


def iter_jsonl(path: Path) -> Iterator[RawRecord]:
    """Read JSONL defensively: bad bytes, BOMs, CRLF and blank lines never raise.

    Blank lines are not records and are skipped; every other line yields exactly one
    RawRecord, parsed or carrying the reason it was not. A last line that is cut off
    mid-value (no final newline) is reported as ``truncated_record``, not just bad JSON.
    """
    yield from iter_jsonl_bytes(path.read_bytes())


def iter_json_document(
    data: bytes, *, keyed: bool = False, list_key: str | None = None
) -> Iterator[RawRecord]:
    """Records of a whole-file JSON document: each element of a list, each value of an
    object keyed by id (``keyed``), or the single object itself.

    A document that does not parse yields one quarantinable record at line 1, so the
    file still shows up in the accounting. ``line`` is the 1-based record index.
    """
    doc, failure, repairs = _load_document(data)
    if failure is not None:
        yield failure
        return
    yield from _document_records(doc, repairs, keyed=keyed, list_key=list_key)


_UNPARSED = object()


def _load_document(data: bytes) -> tuple[Any, RawRecord | None, tuple[str, ...]]:
    """The parsed document, or the one record saying why it does not parse."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if looks_binary(data[:65536]):
        return _UNPARSED, RawRecord(1, data[:2000].decode("utf-8", "replace"), None,
                                    "binary data, not a JSON document", "binary_data"), ()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", "replace")
        repairs: tuple[str, ...] = (f"invalid_utf8_replaced: {exc.reason} at byte {exc.start}",)
    else:
        repairs = ()
    try:
        return json.loads(text), None, repairs
    except json.JSONDecodeError as exc:
        reason = "truncated_record" if _cut_off(exc, text) else "invalid_json"
        return _UNPARSED, RawRecord(1, text, None, f"whole-file JSON does not parse: {exc}",
                                    reason), repairs
    except RecursionError:
        return _UNPARSED, RawRecord(1, text, None, "JSON nested too deeply to read",
                                    "too_deep"), repairs


def _document_records(doc: Any, repairs: tuple[str, ...], *, keyed: bool = False,
                      list_key: str | None = None) -> Iterator[RawRecord]:
    if list_key and isinstance(doc, dict) and isinstance(doc.get(list_key), list):
        doc = doc[list_key]
    if isinstance(doc, list):
        items: list[tuple[str | None, Any]] = [(None, v) for v in doc]
    elif isinstance(doc, dict) and keyed:
        items = [(str(k), v) for k, v in doc.items()]
    elif isinstance(doc, dict):
        items = [(None, doc)]
    else:
        yield RawRecord(1, _dump(doc), None,
                        f"expected a JSON list or object, got {type(doc).__name__}",
                        "not_an_object")
        return
    for index, (key, value) in enumerate(items):
        raw = _dump(value)
        if not isinstance(value, dict):
            yield RawRecord(index + 1, raw, None,
                            f"expected a JSON object, got {type(value).__name__}",
                            "not_an_object", key=key)
            continue
        yield RawRecord(index + 1, raw, value, repairs=repairs, key=key)


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(value)[:10000]


def _parses(data: bytes) -> bool:
    try:
        json.loads(data.decode("utf-8", "replace"))
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def looks_like_json_line(line: bytes) -> bool:
    """A line that is a whole JSONL record, valid or not: it opens and closes on one line
    (``{…}`` or ``[…]``), or it parses. The first line of a pretty-printed document (``[``,
    ``{"a": [``) never does, so this tells JSON lines from a document without parsing a
    record that is 50 MB long or 10,000 levels deep."""
    # The ends only: stripping a 50 MB line would copy it.
    opener, closer = line[:256].lstrip()[:1], line[-256:].rstrip()[-1:]
    if (opener, closer) in ((b"{", b"}"), (b"[", b"]")):
        return True
    return opener in (b"{", b"[") and _parses(line)


def iter_records(data: bytes) -> Iterator[RawRecord]:
    """JSON list, single (pretty-printed) object, or JSONL, decided from the first line.

    Many files named ``.json`` are JSONL (BFCL) and many ``.jsonl`` consumers also get
    lists; a first line that is a whole JSON line means JSONL. A first line that is not,
    in a file that does not parse as one document either, is still JSONL when a later
    line is a JSON line: a bad first record (cut off, binary, nested too deep) is then
    quarantined alone instead of taking every good record after it along.
    """
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    # Found by position, not by stripping and partitioning the body: each of those copied
    # the whole file (a tenth of parsing a batch, #12.1).
    content = _CONTENT.search(body)
    if content is None or body[content.start():content.start() + 1] not in (b"[", b"{"):
        yield from iter_jsonl_bytes(body)
        return
    start = content.start()
    newline = body.find(b"\n", start)
    more = newline != -1 and _CONTENT.search(body, newline + 1) is not None
    first = body[start:newline] if more else body[start:].rstrip()
    if more and looks_like_json_line(first):
        yield from iter_jsonl_bytes(body)
        return
    doc, failure, repairs = _load_document(body)
    if failure is None:
        yield from _document_records(doc, repairs)
    elif more and any(looks_like_json_line(line) for line in body[newline + 1:].split(b"\n")
                      if line[:1] in (b"{", b"[")):
        yield from iter_jsonl_bytes(body)
    else:
        yield failure


_CONTENT = re.compile(rb"[^ \t\n\r\x0b\x0c]")
"""A byte ``bytes.strip()`` keeps."""


class FormatParser(Protocol):
    """A format: how to recognise it and how to turn a file of it into trajectories."""

    name: ClassVar[str]

    def sniff(self, path: Path, head: str) -> float:
        """Confidence in 0..1 that ``path`` (whose first chars are ``head``) is this format."""
        ...

    def parse(self, path: Path, ctx: ParseContext) -> ParseResult: ...


def make_context(
    path: Path, batch: str, registry: ToolRegistry | None = None, source_file: str | None = None
) -> ParseContext:
    return ParseContext(
        batch=batch,
        source_file=source_file or path.name,
        registry=registry or default_registry(),
        path=path,
    )


__all__ = [
    "CorruptInputError",
    "FormatParser",
    "ParseContext",
    "ParseResult",
    "RawRecord",
    "SourceEncoding",
    "Trajectory",
    "copy_decoded",
    "decoded_name",
    "excerpt",
    "iter_json_document",
    "iter_jsonl",
    "iter_jsonl_bytes",
    "iter_records",
    "looks_binary",
    "looks_like_json_line",
    "make_context",
    "open_text",
    "read_text_head",
    "source_encoding",
    "trajectory_id",
]
