"""Input formats: detection per file (with an override) and the parser registry.

To add a format, write a class with ``name``, ``sniff`` and ``parse`` (see
:class:`eval_pipeline.formats.base.FormatParser`) and add it to ``PARSERS``.

Detection asks every parser for a confidence on the file's first 64 kB and takes the
highest; nothing confident means :class:`UnrecognizedParser`, which quarantines every record
with the reason. A caller overrides detection per file with ``format_name`` or with
``overrides`` (glob pattern on the file name or path -> format name, first match wins).
``parse_file`` never raises for bad content: an empty file and a parser crash both become
one quarantined record at line 1. A gzip-compressed or UTF-16 file is decoded first (streamed
into a temporary UTF-8 copy), so every parser reads UTF-8; damaged gzip data is one
quarantined record ``corrupt_gzip``.
"""

from __future__ import annotations

import fnmatch
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from eval_pipeline.formats.base import (
    CorruptInputError,
    FormatParser,
    copy_decoded,
    decoded_name,
    looks_binary,
    make_context,
    read_text_head,
    source_encoding,
)
from eval_pipeline.formats.chat_records import ChatParser
from eval_pipeline.formats.dataeva_cleaned import DataEvaCleanedParser
from eval_pipeline.formats.fallback import NotTrajectoriesParser, UnrecognizedParser
from eval_pipeline.formats.fireact import FireActParser
from eval_pipeline.formats.react import ReactTextParser
from eval_pipeline.formats.records import JsonRecordsParser
from eval_pipeline.formats.routing import (
    BfclAnswersParser,
    BfclParser,
    DevAiJudgmentParser,
    RoutingCaseParser,
)
from eval_pipeline.formats.spans import OpenInferenceSpanParser
from eval_pipeline.formats.swe_agent import SweAgentParser, SweAgentPredsParser
from eval_pipeline.formats.tau_bench import TauBenchParser
from eval_pipeline.formats.toolbench import ToolBenchParser
from eval_pipeline.formats.xml_arrow import (
    ArrowColumnsResult,
    ArrowParseResult,
    parse_arrow_rows,
)
from eval_pipeline.formats.xml_tags import (
    XmlTagParser,
    parse_xml_response,
    reanalyze_repaired,
)
from eval_pipeline.models import ParseResult, QuarantinedRecord, ReparseRule, Step
from eval_pipeline.preprocess import RowReparser
from eval_pipeline.tool_registry import ToolRegistry

PARSERS: dict[str, FormatParser] = {
    p.name: p
    for p in (
        XmlTagParser(), DataEvaCleanedParser(), ReactTextParser(), ChatParser(),
        TauBenchParser(), FireActParser(), ToolBenchParser(), SweAgentParser(),
        SweAgentPredsParser(), OpenInferenceSpanParser(), RoutingCaseParser(), BfclParser(),
        BfclAnswersParser(), DevAiJudgmentParser(), NotTrajectoriesParser(),
        UnrecognizedParser(),
    )
}

SNIFF_BYTES = 65536
#: Documentation and config that sits next to data; ``discover_files`` skips it.
NON_DATA_SUFFIXES = frozenset({".md", ".rst", ".yaml", ".yml", ".toml", ".py", ".cfg", ".ini"})


class UnknownFormatError(ValueError):
    pass


def _override(path: Path, overrides: Mapping[str, str] | None) -> str | None:
    for pattern, name in (overrides or {}).items():
        if fnmatch.fnmatch(path.name, pattern) or fnmatch.fnmatch(path.as_posix(), pattern):
            return name
    return None


def detect_format(path: Path, overrides: Mapping[str, str] | None = None) -> str:
    """The format of the file's decoded text (a ``.jsonl.gz`` is sniffed as its ``.jsonl``)."""
    forced = _override(path, overrides)
    if forced is not None:
        return forced
    head = read_text_head(path, SNIFF_BYTES).decode("utf-8", errors="replace").lstrip("\ufeff")
    named = path.with_name(decoded_name(path)) if source_encoding(path).gzip else path
    best_name, best_score = UnrecognizedParser.name, 0.0
    for name, parser in PARSERS.items():
        score = parser.sniff(named, head)
        if score > best_score:
            best_name, best_score = name, score
    return best_name


_BLANK = b"\xef\xbb\xbf \t\r\n"


def _is_blank(path: Path) -> bool:
    """No content but whitespace and BOMs; read in chunks, stopping at the first content."""
    with path.open("rb") as fh:
        while chunk := fh.read(SNIFF_BYTES):
            if chunk.lstrip(_BLANK):
                return False
    return True


def _binary_file(path: Path) -> bool:
    """Not text at all (an image, an archive, random bytes): the file is one record.

    A JSON file with one binary line starts with ``{`` or ``[`` and is read line by line,
    its bad line quarantined alone."""
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
    return not head.lstrip(_BLANK).startswith((b"{", b"[")) and looks_binary(head)


def parse_file(
    path: Path,
    batch: str,
    *,
    format_name: str | None = None,
    registry: ToolRegistry | None = None,
    source_file: str | None = None,
    overrides: Mapping[str, str] | None = None,
    as_rows: bool = False,
    arrow_steps: bool = False,
) -> ParseResult:
    """Parse one file; every record ends up a trajectory or a quarantined record.

    ``as_rows``: the trajectories come as ``raw_trajectories`` rows in ``rows`` (what
    ``Trajectory.to_row`` gives), built directly by formats that can (the XML-tag format),
    else dumped from the models. ``arrow_steps`` (with ``as_rows``): the XML-tag format
    builds its steps in Arrow and returns an :class:`ArrowParseResult` holding them (the
    rows' ``steps`` are then None); other formats return their rows as before.
    """
    path = Path(path)
    if format_name is not None and format_name not in PARSERS:
        raise UnknownFormatError(f"unknown format {format_name!r}; known: {sorted(PARSERS)}")
    if not source_encoding(path).plain:
        result = _parse_decoded(path, batch, format_name=format_name, registry=registry,
                                source_file=source_file, overrides=overrides,
                                as_rows=as_rows, arrow_steps=arrow_steps)
    else:
        result = _parse_plain(path, batch,
                              format_name=format_name or _override(path, overrides),
                              registry=registry, source_file=source_file, as_rows=as_rows,
                              arrow_steps=arrow_steps)
    if as_rows and result.trajectories:
        result.rows = [t.to_row() for t in result.trajectories]
        result.trajectories = []
    return result


def _parse_decoded(path: Path, batch: str, *, format_name: str | None,
                   registry: ToolRegistry | None, source_file: str | None,
                   overrides: Mapping[str, str] | None, as_rows: bool,
                   arrow_steps: bool = False) -> ParseResult:
    """Parse a gzip or UTF-16 file through a streamed UTF-8 copy named without ``.gz``.

    The copy lives in a temporary folder; the context still points at the original's
    folder (under the decoded name), where formats look for sibling files.
    """
    forced = format_name or _override(path, overrides)
    with tempfile.TemporaryDirectory(prefix="eval_pipeline_decoded_") as folder:
        plain = Path(folder) / decoded_name(path)
        try:
            copy_decoded(path, plain)
        except CorruptInputError as exc:
            return ParseResult(quarantined=[make_context(
                path, batch, registry, source_file).quarantine(
                1, "corrupt_gzip", f"{exc}; the whole file is one record, none of it is read",
                f"whole file {path.name} ({path.stat().st_size} bytes, gzip) not read",
                forced)])
        return _parse_plain(plain, batch, format_name=forced, registry=registry,
                            source_file=source_file or path.name,
                            context_path=path.with_name(plain.name), as_rows=as_rows,
                            arrow_steps=arrow_steps)


def _parse_plain(path: Path, batch: str, *, format_name: str | None,
                 registry: ToolRegistry | None, source_file: str | None,
                 context_path: Path | None = None, as_rows: bool = False,
                 arrow_steps: bool = False) -> ParseResult:
    name = format_name or detect_format(path)
    if name not in PARSERS:
        raise UnknownFormatError(f"unknown format {name!r}; known: {sorted(PARSERS)}")
    ctx = make_context(context_path or path, batch, registry, source_file or path.name)
    if _is_blank(path):
        return ParseResult(quarantined=[ctx.quarantine(
            1, "empty_file", "the file is empty (or only whitespace)", b"", name)])
    if format_name is None and name == UnrecognizedParser.name and _binary_file(path):
        with path.open("rb") as fh:
            head = fh.read(2000)
        return ParseResult(quarantined=[ctx.quarantine(
            1, "binary_data", "a binary file (NUL or control bytes), not text: the whole "
            "file is one record", head, name)])
    parser = PARSERS[name]
    try:
        if as_rows and arrow_steps and isinstance(parser, XmlTagParser):
            return parse_arrow_rows(parser, path, ctx)
        if as_rows and isinstance(parser, JsonRecordsParser):
            return parser.parse_rows(path, ctx)
        return parser.parse(path, ctx)
    except Exception as exc:
        return ParseResult(quarantined=[QuarantinedRecord(
            batch=batch, source_file=ctx.source_file, source_line=1, source_format=name,
            reason="parser_error", error=f"{type(exc).__name__}: {exc}"[:2000],
            excerpt=f"whole file {path.name} ({path.stat().st_size} bytes) not parsed",
        )])


#: Formats whose records depend on each other or on sibling files: a drop in one of them is
#: one batch, never cut by lines (a trace's spans, BFCL's ``possible_answer/`` sibling).
WHOLE_FILE_FORMATS = frozenset({"openinference_spans", "bfcl", "bfcl_answers"})


def reparser(rule: ReparseRule | None, registry: ToolRegistry
             ) -> Callable[[str], list[Step]] | None:
    """The step cutter a trajectory's ``reparse`` rule names, for a tag-repaired response.

    ``None`` for trajectories whose response the parser rendered itself (chat, spans):
    there is nothing of the user's to repair.
    """
    if rule == "xml_tags":
        return lambda text: parse_xml_response(text, registry)
    return None


def row_reparser(rule: ReparseRule | None, registry: ToolRegistry) -> RowReparser | None:
    """:func:`reparser` for step rows: (text, its step rows, repaired text, fixes) -> the
    repaired text's step rows, predicted from the text's own where the rule can."""
    if rule == "xml_tags":
        return partial(reanalyze_repaired, registry=registry)
    return None


def splittable_by_line(path: Path, format_name: str | None = None) -> bool:
    """Whether a JSONL drop may be cut into batches between lines."""
    return (format_name or detect_format(path)) not in WHOLE_FILE_FORMATS


def discover_files(root: Path) -> list[Path]:
    """Data files under ``root`` (or ``root`` itself), skipping docs, configs and dot-files."""
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.suffix.lower() not in NON_DATA_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def unregistered_tool_counts(results: Iterable[ParseResult]) -> Counter[str]:
    """How often each tool the registry does not know was called (scored as ``generic``)."""
    counts: Counter[str] = Counter()
    for result in results:
        for traj in result.trajectories:
            for step in traj.steps:
                if step.kind == "tool_call" and step.tool_type == "generic":
                    counts[step.tool_name or "?"] += 1
    return counts


__all__ = [
    "PARSERS",
    "ArrowColumnsResult",
    "ArrowParseResult",
    "UnknownFormatError",
    "detect_format",
    "discover_files",
    "parse_file",
    "reparser",
    "row_reparser",
    "splittable_by_line",
    "unregistered_tool_counts",
]
