"""The parser seam: one class per input format, all producing canonical trajectories.

A parser never raises for a bad record: it quarantines it with file, line, reason and a
bounded excerpt, so ``kept + removed + quarantined == records read`` holds for any input.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from eval_pipeline.models import ParseResult, QuarantinedRecord, Trajectory
from eval_pipeline.tool_registry import ToolRegistry, default_registry

EXCERPT_CHARS = 500


def excerpt(text: str | bytes, limit: int = EXCERPT_CHARS) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def trajectory_id(source_file: str, index: int, content: str) -> str:
    """Stable id: the same record in the same file always gets the same id."""
    digest = hashlib.sha256(content.encode("utf-8", errors="replace")).hexdigest()[:12]
    return f"{Path(source_file).stem}:{index}:{digest}"


@dataclass(frozen=True)
class RawRecord:
    """One JSON object read from a file, or the reason it could not be read."""

    line: int
    text: str
    value: Any = None
    error: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ParseContext:
    batch: str
    source_file: str
    registry: ToolRegistry

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


def iter_jsonl(path: Path) -> Iterator[RawRecord]:
    """Read JSONL defensively: bad bytes, BOMs, CRLF and blank lines never raise.

    Blank lines are not records and are skipped; every other line yields exactly one
    RawRecord, parsed or carrying the reason it was not.
    """
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            stripped = raw.strip()
            if not stripped:
                continue
            try:
                text = stripped.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield RawRecord(lineno, stripped.decode("utf-8", "replace"), None,
                                f"not valid UTF-8: {exc}", "invalid_encoding")
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                yield RawRecord(lineno, text, None, f"invalid JSON: {exc}", "invalid_json")
                continue
            if not isinstance(value, dict):
                yield RawRecord(lineno, text, None,
                                f"expected a JSON object, got {type(value).__name__}",
                                "not_an_object")
                continue
            yield RawRecord(lineno, text, value)


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
    )


__all__ = [
    "FormatParser",
    "ParseContext",
    "ParseResult",
    "RawRecord",
    "Trajectory",
    "excerpt",
    "iter_jsonl",
    "make_context",
    "trajectory_id",
]
