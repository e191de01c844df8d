"""Preprocessing as the original tool documents it, with every decision recorded.

Three rules: the beta threshold on tool-call count (runaway loops), consecutive identical
tool calls (stuck repeats), and tag validation with auto-repair. Each filter can remove a
record or only flag it, so a user can look before they throw anything away.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Any, Literal

from pydantic import BaseModel, Field

from eval_pipeline.models import Step, Trajectory, steps_from_rows, steps_to_rows
from eval_pipeline.tagscan import kernel
from eval_pipeline.tool_registry import ToolRegistry, default_registry

FilterMode = Literal["remove", "flag"]

StepRow = dict[str, Any]
"""A step as the ``steps`` column holds it (``Step`` fields, dumped)."""

# Tags whose content is never another tag of the same kind: a second opening closes the first.
_FLAT_TAGS = {"think", "result", "answer", "tool_param"}


class PreprocessConfig(BaseModel):
    beta_threshold: int = Field(default=15, ge=0, description="Max tool calls per trajectory.")
    frequency_filter: FilterMode = "remove"
    duplicate_filter: FilterMode = "remove"
    repair_tags: bool = True


class TagRepair(BaseModel):
    """Result of tag validation: the repaired text and what was done to it."""

    text: str
    fixes: list[str]

    @property
    def corrected(self) -> bool:
        return bool(self.fixes)


class PreprocessOutcome(BaseModel):
    trajectory: Trajectory
    kept: bool
    removal_reason: str | None = None
    flags: list[str] = Field(default_factory=list)
    tool_call_count: int
    has_duplicates: bool
    duplicate_calls: list[str] = Field(default_factory=list)
    format_corrected: bool
    format_fixes: list[str] = Field(default_factory=list)
    tag_analysis: dict[str, int]


class PreprocessStats(BaseModel):
    total: int = 0
    valid: int = 0
    removed_frequency: int = 0
    removed_duplicates: int = 0
    flagged_frequency: int = 0
    flagged_duplicates: int = 0
    format_issues_fixed: int = 0

    @property
    def success_rate(self) -> float:
        return self.valid / self.total if self.total else 0.0

    def render(self) -> str:
        """The original tool's statistics block."""
        bar = "=" * 50
        return "\n".join([
            bar, "PREPROCESSING STATISTICS", bar,
            f"Total samples: {self.total}",
            f"Valid samples: {self.valid}",
            f"Removed (frequency): {self.removed_frequency}",
            f"Removed (duplicates): {self.removed_duplicates}",
            f"Format issues fixed: {self.format_issues_fixed}",
            f"Success rate: {self.success_rate:.1%}",
            bar,
        ])


@lru_cache(maxsize=32)
def _tag_token_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """Compiled once per tag set: building the alternation per record cost a third of repair."""
    alternation = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    return re.compile(rf"<(/?)({alternation})(\s[^<>]*)?(/?)>", re.IGNORECASE)


@lru_cache(maxsize=32)
def _line_start_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"\n[ \t]*<({'|'.join(re.escape(n) for n in names)})\b", re.IGNORECASE)


@lru_cache(maxsize=256)
def _closer_and_opener(name: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A tag's closer and opener as searched for by the earlier repair (the tests'
    reference, ``repair_reference.py``)."""
    return (re.compile(rf"</{re.escape(name)}\s*>", re.IGNORECASE),
            re.compile(rf"<{re.escape(name)}(\s[^<>]*)?>", re.IGNORECASE))


def repair_tags(text: str, tool_tags: Sequence[str]) -> TagRepair:
    """Balance the known tags with a stack; stray closers go, missing closers are added.

    The walk (:func:`_repair_tags_python`) is done by the C kernel when it is on
    (``_tagscan.repair_tags``: the same walk on the str's code points, a tenth of the time
    on the drops' responses, #12.1 target 1); where the kernel is not sure of Python's
    matching (a non-ASCII character that re.IGNORECASE folds onto a tag name's letter) or
    the tag names are not plain ASCII, it returns None and the Python walk decides.
    """
    scan = kernel()
    if scan is not None:
        spec = _kernel_names(tuple(tool_tags))
        if spec is not None:
            done = scan.repair_tags(text, *spec)
            if done is not None:
                return TagRepair.model_construct(text=done[0], fixes=done[1])
    return _repair_tags_python(text, tool_tags)


_KERNEL_NAME = re.compile(r"[a-z0-9_.:-]+")


@lru_cache(maxsize=32)
def _kernel_names(tool_tags: tuple[str, ...]) -> tuple[tuple[str, ...], bytes, bytes] | None:
    """The C walk's names (lowercased, deduplicated: the walk compares matched names
    lowercased) and a flat and an opaque flag byte each; None when a name is not plain
    ASCII (the kernel matches names by ASCII case folding only) or there are too many."""
    names = tuple(dict.fromkeys(n.lower() for n in ("think", "result", "answer", "tool_param",
                                                     *tool_tags)))
    if len(names) > 64 or not all(n.isascii() and _KERNEL_NAME.fullmatch(n) for n in names):
        return None
    opaque = _opaque_names(tool_tags)
    return (names, bytes(n in _FLAT_TAGS for n in names), bytes(n in opaque for n in names))


def _repair_tags_python(text: str, tool_tags: Sequence[str]) -> TagRepair:
    """:func:`repair_tags`'s walk in Python: the reference the C kernel is held to.

    Only tag names the pipeline relies on are touched (think, result, answer, tool_param
    and the registry's tool tags). A tool call's body and a ``<result>`` are opaque: tool
    output often quotes tags (``Use <tool_param>...``), so inside them only their own
    closer counts; an unclosed one ends before the next tag that starts a line.

    An opaque tag's closer is the first of the known tags after it that is its closer or
    another opening of it (:func:`_own_tag`), found by the same token pattern instead of
    a case-insensitive search each for the closer and the opener (most of the repair's
    time, #12.1). The lookups of one name stop at its next tag, so they never cover the
    same text twice: linear (#12.4a). Edits are recorded by position and applied once: a
    response needing none is not copied.
    """
    names = ("think", "result", "answer", "tool_param", *tool_tags)
    pattern = _tag_token_pattern(names)
    opaque = _opaque_names(tuple(tool_tags))
    line_start = _line_start_pattern(names)
    boundary: re.Match[str] | None = None
    searched = False
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), in text order
    fixes: list[str] = []
    stack: list[str] = []
    pos = 0
    while (match := pattern.search(text, pos)) is not None:
        closing, name, _attrs, self_closing = match.groups()
        name = name.lower()
        start = match.start()
        pos = match.end()
        if self_closing:
            continue
        if not closing and stack and stack[-1] in _FLAT_TAGS:
            # A flat tag holds prose only: any known tag opening means it was left open.
            edits.append((start, start, f"</{stack[-1]}>"))
            fixes.append(f"closed <{stack[-1]}> before <{name}> at char {start}")
            stack.pop()
        if not closing and name in opaque:
            closer = _own_tag(pattern, text, pos, name)
            if closer is not None:
                pos = closer
                continue
            if not searched or (boundary is not None and boundary.start() < pos):
                boundary = line_start.search(text, pos)
                searched = True
            stop = boundary.start() if boundary else len(text)
            edits.append((stop, stop, f"</{name}>"))
            fixes.append(f"closed <{name}> at char {stop}")
            pos = stop
            continue
        if not closing:
            stack.append(name)
            continue
        if name in stack:
            while stack[-1] != name:
                inner = stack.pop()
                edits.append((start, start, f"</{inner}>"))
                fixes.append(f"closed <{inner}> before </{name}> at char {start}")
            stack.pop()
        else:
            edits.append((start, pos, ""))
            fixes.append(f"removed stray </{name}> at char {start}")
    while stack:
        name = stack.pop()
        edits.append((len(text), len(text), f"</{name}>"))
        fixes.append(f"closed <{name}> at end of response")
    # Built without validation: the text is ours, and validating copied ~25 kB per record.
    return TagRepair.model_construct(text=_apply(text, edits), fixes=fixes)


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    """``text`` with each (start, end, replacement) made, the edits in text order."""
    if not edits:
        return text
    if len(edits) == 1 and edits[0][0] == len(text):
        return text + edits[0][2]
    pieces: list[str] = []
    last = 0
    for start, end, replacement in edits:
        pieces.append(text[last:start])
        pieces.append(replacement)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _own_tag(pattern: re.Pattern[str], text: str, pos: int, name: str) -> int | None:
    """Where an opaque tag opened before ``pos`` ends: the end of its closer (``</name>``,
    ``</name >``), or None when another opening of it (``<name ...>``) or nothing comes
    first. Both forms are the token pattern's own tags, told apart by their groups: a
    closer has only whitespace for attributes and no ``/`` before ``>``; an opening is
    any but ``<name/>``."""
    for other in pattern.finditer(text, pos):
        if other[2].lower() == name:
            attrs = other[3]
            if other[1]:
                if not other[4] and (attrs is None or attrs.isspace()):
                    return other.end()
            elif attrs is not None or not other[4]:
                return None
    return None


@lru_cache(maxsize=32)
def _opaque_names(tool_tags: tuple[str, ...]) -> frozenset[str]:
    return frozenset({"result", *(t.lower() for t in tool_tags)})


_ONE_ELEMENT = re.compile(r"\s*<([A-Za-z_][\w.-]*)(?:\s[^<>]*)?>(.*)</\1\s*>\s*", re.DOTALL)


def _single_element(text: str) -> tuple[str, str] | None:
    """``<tag ...>body</tag>`` and nothing else around it -> (tag, body); else ``None``.

    The body must not open or close another ``<tag>`` of the same name: a wrapper holding
    two calls (``<x><a>1</a><a>2</a></x>`` peeled to ``<a>1</a><a>2</a>``) is not one call,
    and a greedy match would read it as ``<a>`` with body ``1</a><a>2``.
    """
    match = _ONE_ELEMENT.fullmatch(text)
    if match is None:
        return None
    tag, body = match.group(1), match.group(2)
    if _same_tag(tag).search(body):
        return None
    return tag.lower(), body


@lru_cache(maxsize=1024)
def _same_tag(tag: str) -> re.Pattern[str]:
    """An opening or closing of ``tag``; compiled once per tag (escaping and looking the
    pattern up per call was half of the duplicate check, #12.1)."""
    return re.compile(rf"</?{re.escape(tag)}(?:[\s/>])", re.IGNORECASE)


def call_identity(step: Step, registry: ToolRegistry) -> str:
    """What the call *does*: its tool type, action and whitespace-normalized input.

    The parser keeps a call's text as the agent wrote it, wrappers included: a stray
    ``<tool_code>`` around ``<browser_use>`` makes the parser read ``browser_use`` as the
    action and the inner action tag as the input, so a retry written once with and once
    without the wrapper looked like two different calls (a real agent-data-platform log
    does exactly this). Tags that are not tools are peeled off until a tool tag is reached;
    a call whose text is not a single tool element (chat formats, ``<tool_call>`` JSON, a
    wrapper holding text or several calls) keeps the parser's own name and input.
    """
    return _identity(step.content, step.tool_input, step.tool_type, step.tool_name, registry)


def _identity(content: str, tool_input: str | None, tool_type: str | None,
              tool_name: str | None, registry: ToolRegistry) -> str:
    """:func:`call_identity` of a call given by its fields (a Step or a ``steps`` row)."""
    tags = registry.tool_tag_set
    text = content
    element = _single_element(text)
    while element is not None and element[0] not in tags:
        text = element[1]
        element = _single_element(text)
    if element is not None:
        tag, body = element
        action = _single_element(body)
        name, call_input = action if action is not None else (tag, body)
        # Typed by the tool tag: the parser typed a wrapped call by its wrapper's first
        # inner tag, which for two wrappers is the inner wrapper (generic).
        return f"{registry.tool_type_for_tag(tag)}:{name}:{' '.join(call_input.split())}"
    body = tool_input if tool_input is not None else content
    return f"{tool_type}:{tool_name}:{' '.join(body.split())}"


def find_consecutive_duplicates(steps: Sequence[Step],
                                registry: ToolRegistry | None = None) -> list[str]:
    """Consecutive tool calls doing the same thing (same tool, action and parameters).

    Compared by :func:`call_identity`, so a wrapper tag that is not a tool does not hide
    a repeat. ``registry`` (which tags are tools) defaults to the built-in one.
    """
    reg = default_registry() if registry is None else registry
    return _duplicates([_call_fields(s) for s in steps], reg)


_CallFields = tuple[str, str, str | None, str | None, str | None]
"""A step's kind, content, tool_input, tool_type and tool_name: all the rules read."""


def _call_fields(step: Step) -> _CallFields:
    return step.kind, step.content, step.tool_input, step.tool_type, step.tool_name


def _duplicates(steps: Sequence[_CallFields], registry: ToolRegistry) -> list[str]:
    identities = [_identity(content, tool_input, tool_type, tool_name, registry)
                  for kind, content, tool_input, tool_type, tool_name in steps
                  if kind == "tool_call"]
    return [b[:200] for a, b in pairwise(identities) if a == b]


def _row_duplicates(calls: Sequence[StepRow], registry: ToolRegistry) -> list[str]:
    """:func:`_duplicates` of the tool-call rows of a ``steps`` cell."""
    identities = [_identity(c["content"], c["tool_input"], c["tool_type"], c["tool_name"],
                            registry) for c in calls]
    return [b[:200] for a, b in pairwise(identities) if a == b]


_ANY_TAG = re.compile(r"<([A-Za-z_][\w-]*)(?:\s[^<>]*)?/?>")


def tag_analysis(text: str, steps: Sequence[Step]) -> dict[str, int]:
    """Count of each tag in the response (the original tool's ``tag_analysis``)."""
    return _tag_counts(text, [s.kind for s in steps])


def _tag_counts(text: str, kinds: Iterable[str]) -> dict[str, int]:
    found = _ANY_TAG.findall(text)
    if not found:
        return dict(sorted(Counter(kinds).items()))
    # Counted as written (in C), then case folded over the few distinct names: lowering
    # every tag in Python was most of this count (#12.1).
    counts: dict[str, int] = {}
    for name, count in Counter(found).items():
        key = name.lower()
        counts[key] = counts.get(key, 0) + count
    return dict(sorted(counts.items()))


Reparser = Callable[[str], list[Step]]

RowReparser = Callable[[str, Sequence[StepRow], str, list[str]], list[StepRow]]
"""Re-cuts a repaired response into step rows: (text, its steps, repaired text, fixes).
The text's own steps let a reparser skip re-reading a repair whose effect it can predict."""


@dataclass
class Screening:
    """What the three rules decided for one response (the fields of an outcome)."""

    text: str
    steps: list[StepRow] | None
    """The re-cut steps of a repaired response; None when the response was not changed."""
    kept: bool
    removal_reason: str | None
    flags: list[str]
    tool_call_count: int
    duplicate_calls: list[str]
    format_fixes: list[str]
    tag_analysis: dict[str, int]


def screen(text: str, steps: Sequence[StepRow], config: PreprocessConfig,
           registry: ToolRegistry, reparse: RowReparser | None = None) -> Screening:
    """Apply the three rules to one response and its step rows.

    ``reparse`` re-cuts steps from a repaired response; formats whose response is rendered
    by the parser (chat, spans) need no repair and pass ``None``.
    """
    fixes: list[str] = []
    new_steps: list[StepRow] | None = None
    original = text
    if config.repair_tags and reparse is not None:
        repair = repair_tags(text, registry.tool_tags)
        if repair.corrected:
            fixes = repair.fixes
            text = repair.text
            new_steps = reparse(original, steps, text, fixes)
            steps = new_steps
    calls = [s for s in steps if s["kind"] == "tool_call"]
    count = len(calls)
    duplicates = _row_duplicates(calls, registry)
    reason, flags = decide(count, duplicates, config)
    return Screening(text=text, steps=new_steps, kept=reason is None, removal_reason=reason,
                     flags=flags, tool_call_count=count, duplicate_calls=duplicates,
                     format_fixes=fixes,
                     tag_analysis=_tag_counts(text, (s["kind"] for s in steps)))


def decide(count: int, duplicates: Sequence[str], config: PreprocessConfig
           ) -> tuple[str | None, list[str]]:
    """The removal reason (None: kept) and flags of a response with ``count`` tool calls
    and these consecutive duplicates: one place for ``screen`` and the batch kernels."""
    flags: list[str] = []
    reason: str | None = None
    if count > config.beta_threshold:
        if config.frequency_filter == "remove":
            reason = "frequency"
        flags.append(f"frequency: {count} tool calls > beta_threshold {config.beta_threshold}")
    if duplicates and reason is None:
        if config.duplicate_filter == "remove":
            reason = "duplicates"
        flags.append(f"duplicates: {len(duplicates)} consecutive identical call(s)")
    return reason, flags


def preprocess_one(
    trajectory: Trajectory,
    config: PreprocessConfig,
    registry: ToolRegistry,
    reparse: Reparser | None = None,
) -> PreprocessOutcome:
    """Apply the three rules to one trajectory.

    ``reparse`` re-cuts steps from a repaired response; formats whose response is rendered
    by the parser (chat, spans) need no repair and pass ``None``.
    """
    rows_reparse: RowReparser | None = None
    if reparse is not None:
        def rows_reparse(_text: str, _steps: Sequence[StepRow], repaired: str,
                         _fixes: list[str]) -> list[StepRow]:
            return steps_to_rows(reparse(repaired))
    found = screen(trajectory.raw_response, steps_to_rows(trajectory.steps), config,
                   registry, rows_reparse)
    if found.steps is not None:
        trajectory = trajectory.model_copy(
            update={"raw_response": found.text, "steps": steps_from_rows(found.steps)})
    return PreprocessOutcome(
        trajectory=trajectory,
        kept=found.kept,
        removal_reason=found.removal_reason,
        flags=found.flags,
        tool_call_count=found.tool_call_count,
        has_duplicates=bool(found.duplicate_calls),
        duplicate_calls=found.duplicate_calls,
        format_corrected=bool(found.format_fixes),
        format_fixes=found.format_fixes,
        tag_analysis=found.tag_analysis,
    )


def summarize(outcomes: Sequence[PreprocessOutcome | Screening]) -> PreprocessStats:
    """The statistics block's counts of these outcomes."""
    return summarize_findings([o.removal_reason for o in outcomes],
                              [o.flags for o in outcomes],
                              [o.duplicate_calls for o in outcomes],
                              [o.format_fixes for o in outcomes])


def summarize_findings(reasons: Sequence[str | None], flags: Sequence[Sequence[str]],
                       duplicates: Sequence[Sequence[str]], fixes: Sequence[Sequence[str]]
                       ) -> PreprocessStats:
    """The statistics block's counts from each outcome's removal reason (None: kept),
    flags, duplicate calls and format fixes (one list per finding, as ``preprocess_batch``
    keeps them), added up in locals and validated once (a pydantic attribute assignment
    per count and outcome was a twentieth of the stage)."""
    valid = removed_frequency = removed_duplicates = 0
    flagged_frequency = flagged_duplicates = format_issues_fixed = 0
    for reason, flagged, duplicated, fixed in zip(reasons, flags, duplicates, fixes,
                                                  strict=True):
        kept = reason is None
        valid += kept
        removed_frequency += reason == "frequency"
        removed_duplicates += reason == "duplicates"
        flagged_frequency += kept and any(f.startswith("frequency") for f in flagged)
        flagged_duplicates += kept and bool(duplicated)
        format_issues_fixed += bool(fixed)
    return PreprocessStats(
        total=len(reasons), valid=valid, removed_frequency=removed_frequency,
        removed_duplicates=removed_duplicates, flagged_frequency=flagged_frequency,
        flagged_duplicates=flagged_duplicates, format_issues_fixed=format_issues_fixed)
