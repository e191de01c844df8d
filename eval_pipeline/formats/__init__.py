"""Input formats: detection per file (with an override) and the parser registry.

To add a format, write a class with ``name``, ``sniff`` and ``parse`` (see
:class:`eval_pipeline.formats.base.FormatParser`) and add it to ``PARSERS``.
"""

from __future__ import annotations

from pathlib import Path

from eval_pipeline.formats.base import FormatParser, make_context
from eval_pipeline.formats.xml_tags import XmlTagParser
from eval_pipeline.models import ParseResult
from eval_pipeline.tool_registry import ToolRegistry

PARSERS: dict[str, FormatParser] = {p.name: p for p in (XmlTagParser(),)}

SNIFF_BYTES = 65536


class UnknownFormatError(ValueError):
    pass


def detect_format(path: Path) -> str:
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES).decode("utf-8", errors="replace")
    best_name, best_score = None, 0.0
    for name, parser in PARSERS.items():
        score = parser.sniff(path, head)
        if score > best_score:
            best_name, best_score = name, score
    if best_name is None:
        # An unrecognisable file still flows: the default parser quarantines every record.
        return XmlTagParser.name
    return best_name


def parse_file(
    path: Path,
    batch: str,
    *,
    format_name: str | None = None,
    registry: ToolRegistry | None = None,
    source_file: str | None = None,
) -> ParseResult:
    name = format_name or detect_format(path)
    if name not in PARSERS:
        raise UnknownFormatError(f"unknown format {name!r}; known: {sorted(PARSERS)}")
    return PARSERS[name].parse(path, make_context(path, batch, registry, source_file))
