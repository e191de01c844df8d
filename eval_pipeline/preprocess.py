"""Preprocessing as the original tool documents it, with every decision recorded.

Three rules: the beta threshold on tool-call count (runaway loops), consecutive identical
tool calls (stuck repeats), and tag validation with auto-repair. Each filter can remove a
record or only flag it, so a user can look before they throw anything away.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Literal

from pydantic import BaseModel, Field

from eval_pipeline.models import Step, Trajectory
from eval_pipeline.tool_registry import ToolRegistry, default_registry

FilterMode = Literal["remove", "flag"]

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
    return (re.compile(rf"</{re.escape(name)}\s*>", re.IGNORECASE),
            re.compile(rf"<{re.escape(name)}(\s[^<>]*)?>", re.IGNORECASE))


class _ForwardSearch:
    """``pattern.search(text, pos)`` for a position that only moves forward, in linear time.

    Looking for each opaque tag's closer from every unclosed opening rescanned the rest of
    the text each time: quadratic when every ``<result>`` is left open (11.7 s for 20k tool
    calls in one record). The first match at or after ``pos`` is also the first one at or
    after any later position up to its start (no match lies between), and "none" stays none,
    so each pattern's last answer is reused until the position passes it. Valid for these
    patterns because none looks behind its start position.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._last: dict[re.Pattern[str], re.Match[str] | None] = {}

    def search(self, pattern: re.Pattern[str], pos: int) -> re.Match[str] | None:
        if pattern in self._last:
            last = self._last[pattern]
            if last is None or last.start() >= pos:
                return last
        found = pattern.search(self._text, pos)
        self._last[pattern] = found
        return found


def repair_tags(text: str, tool_tags: Sequence[str]) -> TagRepair:
    """Balance the known tags with a stack; stray closers go, missing closers are added.

    Only tag names the pipeline relies on are touched (think, result, answer, tool_param
    and the registry's tool tags). A tool call's body and a ``<result>`` are opaque: tool
    output often quotes tags (``Use <tool_param>...``), so inside them only their own
    closer counts; an unclosed one ends before the next tag that starts a line.
    """
    names = ("think", "result", "answer", "tool_param", *tool_tags)
    pattern = _tag_token_pattern(names)
    line_start = _line_start_pattern(names)
    ahead = _ForwardSearch(text)
    opaque = {"result", *(t.lower() for t in tool_tags)}
    out: list[str] = []
    fixes: list[str] = []
    stack: list[str] = []
    pos = 0
    while True:
        match = pattern.search(text, pos)
        if match is None:
            break
        closing, name, _attrs, self_closing = match.groups()
        name = name.lower()
        out.append(text[pos:match.start()])
        token = match.group(0)
        pos = match.end()
        if self_closing:
            out.append(token)
            continue
        if not closing and stack and stack[-1] in _FLAT_TAGS:
            # A flat tag holds prose only: any known tag opening means it was left open.
            out.append(f"</{stack[-1]}>")
            fixes.append(f"closed <{stack[-1]}> before <{name}> at char {match.start()}")
            stack.pop()
        if not closing and name in opaque:
            closer, opener = _closer_and_opener(name)
            found = ahead.search(closer, pos)
            reopen = ahead.search(opener, pos)
            if found and not (reopen and reopen.start() < found.start()):
                out.append(text[match.start():found.end()])
                pos = found.end()
                continue
            boundary = ahead.search(line_start, pos)
            stop = boundary.start() if boundary else len(text)
            out.append(token + text[pos:stop] + f"</{name}>")
            fixes.append(f"closed <{name}> at char {stop}")
            pos = stop
            continue
        if not closing:
            stack.append(name)
            out.append(token)
            continue
        if name in stack:
            while stack[-1] != name:
                inner = stack.pop()
                out.append(f"</{inner}>")
                fixes.append(f"closed <{inner}> before </{name}> at char {match.start()}")
            stack.pop()
            out.append(token)
        else:
            fixes.append(f"removed stray </{name}> at char {match.start()}")
    out.append(text[pos:])
    while stack:
        name = stack.pop()
        out.append(f"</{name}>")
        fixes.append(f"closed <{name}> at end of response")
    # Built without validation: the text is ours, and validating copied ~25 kB per record.
    return TagRepair.model_construct(text="".join(out), fixes=fixes)


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
    if re.search(rf"</?{re.escape(tag)}(?:[\s/>])", body, re.IGNORECASE):
        return None
    return tag.lower(), body


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
    tags = set(registry.tool_tags)
    text = step.content
    element = _single_element(text)
    while element is not None and element[0] not in tags:
        text = element[1]
        element = _single_element(text)
    if element is not None:
        tag, body = element
        action = _single_element(body)
        name, tool_input = action if action is not None else (tag, body)
        # Typed by the tool tag: the parser typed a wrapped call by its wrapper's first
        # inner tag, which for two wrappers is the inner wrapper (generic).
        tool_type = registry.tool_type_for_tag(tag)
        return f"{tool_type}:{name}:{' '.join(tool_input.split())}"
    body = step.tool_input if step.tool_input is not None else step.content
    return f"{step.tool_type}:{step.tool_name}:{' '.join(body.split())}"


def find_consecutive_duplicates(steps: Sequence[Step],
                                registry: ToolRegistry | None = None) -> list[str]:
    """Consecutive tool calls doing the same thing (same tool, action and parameters).

    Compared by :func:`call_identity`, so a wrapper tag that is not a tool does not hide
    a repeat. ``registry`` (which tags are tools) defaults to the built-in one.
    """
    reg = default_registry() if registry is None else registry
    identities = [call_identity(s, reg) for s in steps if s.kind == "tool_call"]
    return [b[:200] for a, b in pairwise(identities) if a == b]


def tag_analysis(text: str, steps: Sequence[Step]) -> dict[str, int]:
    """Count of each tag in the response (the original tool's ``tag_analysis``)."""
    counts: Counter[str] = Counter()
    for match in re.finditer(r"<([A-Za-z_][\w-]*)(?:\s[^<>]*)?/?>", text):
        counts[match.group(1).lower()] += 1
    if not counts:
        counts.update(s.kind for s in steps)
    return dict(sorted(counts.items()))


Reparser = Callable[[str], list[Step]]


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
    fixes: list[str] = []
    if config.repair_tags and reparse is not None:
        repair = repair_tags(trajectory.raw_response, registry.tool_tags)
        if repair.corrected:
            fixes = repair.fixes
            trajectory = trajectory.model_copy(
                update={"raw_response": repair.text, "steps": reparse(repair.text)}
            )
    steps = trajectory.steps
    count = sum(1 for s in steps if s.kind == "tool_call")
    duplicates = find_consecutive_duplicates(steps, registry)
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
    return PreprocessOutcome(
        trajectory=trajectory,
        kept=reason is None,
        removal_reason=reason,
        flags=flags,
        tool_call_count=count,
        has_duplicates=bool(duplicates),
        duplicate_calls=duplicates,
        format_corrected=bool(fixes),
        format_fixes=fixes,
        tag_analysis=tag_analysis(trajectory.raw_response, steps),
    )


def summarize(outcomes: Sequence[PreprocessOutcome]) -> PreprocessStats:
    stats = PreprocessStats(total=len(outcomes))
    for o in outcomes:
        stats.valid += o.kept
        stats.removed_frequency += o.removal_reason == "frequency"
        stats.removed_duplicates += o.removal_reason == "duplicates"
        stats.flagged_frequency += o.kept and any(f.startswith("frequency") for f in o.flags)
        stats.flagged_duplicates += o.kept and o.has_duplicates
        stats.format_issues_fixed += o.format_corrected
    return stats
