"""The tag repair as it was before #12.4(a), kept verbatim as the reference the linear
version must reproduce exactly (text and fixes). Quadratic: use on small inputs only."""

from __future__ import annotations

from collections.abc import Sequence

from eval_pipeline.preprocess import (
    _FLAT_TAGS,
    TagRepair,
    _closer_and_opener,
    _line_start_pattern,
    _tag_token_pattern,
)


def reference_repair_tags(text: str, tool_tags: Sequence[str]) -> TagRepair:
    """Balance the known tags with a stack; stray closers go, missing closers are added.

    Only tag names the pipeline relies on are touched (think, result, answer, tool_param
    and the registry's tool tags). A tool call's body and a ``<result>`` are opaque: tool
    output often quotes tags (``Use <tool_param>...``), so inside them only their own
    closer counts; an unclosed one ends before the next tag that starts a line.
    """
    names = ("think", "result", "answer", "tool_param", *tool_tags)
    pattern = _tag_token_pattern(names)
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
            found = closer.search(text, pos)
            reopen = opener.search(text, pos)
            if found and not (reopen and reopen.start() < found.start()):
                out.append(text[match.start():found.end()])
                pos = found.end()
                continue
            boundary = _line_start_pattern(names).search(text, pos)
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
