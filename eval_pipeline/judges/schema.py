"""The reply contract on the wire, and reading a reply out of whatever a server sent back.

The wire schema is what structured-output modes enforce (``json_schema``, a forced tool
call): the rubric's metrics as numbers in [0, 1] for a clip rubric, an explanation and a
label for a ReAct kind (its score follows from the label, so the schema does not ask for
one). Servers without structured output answer in text, so :func:`parse_reply_text` finds
the JSON object in prose or a fenced block, or reads the seed's ``LABEL: correct`` form.
Nothing here decides whether the reply is good enough: that is :mod:`.reply`'s one check.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

from eval_pipeline.judges.base import JudgeReply
from eval_pipeline.judges.errors import InvalidOutput

SCHEMA_NAME = "clip_evaluation"

_TEXT_FIELDS = {
    "summary": "One sentence: what this clip did and the result",
    "reasoning": "Why these scores",
}


def _score_schema(metric: str, bounds: bool, steps: int | None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number",
                              "description": f"Score for {metric}, from 0.0 to 1.0"}
    if steps:
        schema["enum"] = [round(i / steps, 6) for i in range(steps + 1)]
    if bounds:
        schema["minimum"], schema["maximum"] = 0.0, 1.0
    return schema


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    # Strict modes want every property required and no others allowed.
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def _text(description: str, max_chars: int | None) -> dict[str, Any]:
    field: dict[str, Any] = {"type": "string", "description": description}
    if max_chars:
        field["maxLength"] = max_chars
    return field


@lru_cache(maxsize=128)
def _wire_schema(metrics: tuple[str, ...], labels: tuple[str, ...], bounds: bool,
                 steps: int | None, max_chars: int | None = None) -> str:
    if labels:
        # The seed's ReAct evaluations: an EXPLANATION first, then the LABEL.
        schema = _object({
            "explanation": _text("EXPLANATION: your step-by-step analysis", max_chars),
            "label": {"type": "string", "enum": list(labels),
                      "description": f"Exactly one of: {', '.join(labels)}"},
        })
    else:
        scores = _object({m: _score_schema(m, bounds, steps) for m in metrics})
        scores["description"] = "One score per rubric criterion"
        schema = _object({"scores": scores,
                          **{k: _text(d, max_chars) for k, d in _TEXT_FIELDS.items()}})
    return json.dumps(schema, sort_keys=True)


def wire_schema(metrics: Sequence[str], labels: Sequence[str] = (), *, bounds: bool = True,
                steps: int | None = None, max_chars: int | None = None) -> dict[str, Any]:
    """A self-contained JSON schema (no $ref, all fields required, no extra keys).

    ``bounds`` adds minimum/maximum to the scores, ``steps`` makes each score an enum of
    evenly spaced values (for grammar engines that ignore bounds on numbers), ``max_chars``
    a maxLength on the free-text fields (for grammar engines, against runaway prose).
    """
    return json.loads(_wire_schema(tuple(metrics), tuple(labels), bounds, steps, max_chars))


def schema_version(metrics: Sequence[str], labels: Sequence[str] = ()) -> str:
    """The reply shape's version for the cache key (independent of per-host bounds)."""
    return hashlib.sha256(_wire_schema(tuple(metrics), tuple(labels), False, None)
                          .encode()).hexdigest()[:12]


def schema_instruction(metrics: Sequence[str], labels: Sequence[str] = ()) -> str:
    """The schema stated in the prompt, for modes where the server does not enforce it."""
    schema = json.dumps(wire_schema(metrics, labels), indent=1)
    alternative = (f'\nIf you cannot write JSON, write your EXPLANATION and end with a line '
                   f'"LABEL: {labels[0]}" or "LABEL: {labels[1]}".' if len(labels) == 2 else "")
    return ("\n\nReply with one JSON object and nothing else. It must follow this JSON "
            f"schema:\n{schema}{alternative}")


# -- reading a reply ----------------------------------------------------------------------

_FENCED = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_LABEL_LINE = re.compile(r"""label\W{0,3}[:=]\s*[*_`"'\[(\s]*([A-Za-z][A-Za-z_-]*)""",
                         re.IGNORECASE)
_EXPLANATION = re.compile(r"^\W*explanation\W*[:=]\s*", re.IGNORECASE)
_REPLY_KEYS = frozenset({"scores", "label", "explanation", "reasoning", "summary"})


def _dicts_in(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``text``: the whole text, fenced blocks, then objects found
    in prose (the first ``{`` that decodes, then on after it)."""
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCED.finditer(text)]
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            yield data
    decoder = json.JSONDecoder()
    position = text.find("{")
    while position != -1:
        try:
            data, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            position = text.find("{", position + 1)
            continue
        if isinstance(data, dict):
            yield data
        position = text.find("{", end)


def _unwrap(data: dict[str, Any]) -> dict[str, Any]:
    # {"clip_evaluation": {...}}: some models name the object after the tool or schema.
    if len(data) == 1:
        (inner,) = data.values()
        if isinstance(inner, dict) and _REPLY_KEYS & {str(k).lower() for k in inner}:
            return inner
    return data


def reply_from_data(data: Any, raw_response: str, labels: Sequence[str] = ()) -> JudgeReply:
    """A :class:`JudgeReply` from a decoded JSON object, reading keys in any case.

    Scores may sit under ``scores`` or at the top level (JSON-mode models flatten them);
    which of them count is for the validator to decide.
    """
    if not isinstance(data, Mapping):
        raise InvalidOutput("response JSON is not an object", raw_response=raw_response)
    data = _unwrap(dict(data))
    fields = {str(k).strip().lower(): v for k, v in data.items()}
    scores = fields.get("scores")
    if scores is not None and not isinstance(scores, Mapping):
        raise InvalidOutput(f'"scores" is not an object of metric: score: {scores!r:.80}',
                            raw_response=raw_response)
    if scores is None:
        scores = {k: v for k, v in data.items() if str(k).strip().lower() not in _REPLY_KEYS}
    label = fields.get("label")
    reasoning = fields.get("explanation") if labels else None
    reasoning = reasoning or fields.get("reasoning") or fields.get("explanation") or ""
    return JudgeReply(scores=dict(scores),
                      label=label if isinstance(label, str) else None,
                      summary=str(fields.get("summary") or ""),
                      reasoning=str(reasoning), raw_response=raw_response)


def snap_to_rail(text: str, labels: Sequence[str]) -> str | None:
    """The one label ``text`` names, as the seed's Phoenix ``llm_classify`` reads an answer
    ("snap to rails"): labels are looked for longest first, each found one removed from the
    text (so "incorrect" does not also count as "correct"); exactly one found is the answer,
    none or several is no answer."""
    rest = text.lower()
    found = []
    for label in sorted({label.lower() for label in labels}, key=len, reverse=True):
        if label in rest:
            found.append(label)
            rest = rest.replace(label, " ")
    return found[0] if len(found) == 1 else None


def _label_form(text: str, labels: Sequence[str]) -> JudgeReply | None:
    """The seed's answer: an EXPLANATION, then ``LABEL: x`` (or just the label word); else,
    as Phoenix reads it, the one label the text names (prose cut off by ``max_tokens``
    often still says it)."""
    bare = text.strip().strip("\"'`*.[]() \n").lower()
    if bare in {label.lower() for label in labels}:
        return JudgeReply(scores={}, label=bare, raw_response=text)
    matches = list(_LABEL_LINE.finditer(text))
    if matches:
        last = matches[-1]
        explanation = _EXPLANATION.sub("", text[:last.start()].strip()).strip()
        label = last.group(1)
        if label.lower() not in {allowed.lower() for allowed in labels}:
            label = snap_to_rail(text[last.start():], labels) or label
        return JudgeReply(scores={}, label=label, reasoning=explanation, raw_response=text)
    snapped = snap_to_rail(text, labels)
    if snapped is None:
        return None
    return JudgeReply(scores={}, label=snapped, reasoning=text.strip(), raw_response=text)


def parse_reply_text(text: str | None, labels: Sequence[str] = ()) -> JudgeReply:
    """Read a reply from a text answer: a JSON object (alone, fenced, or in prose), or for
    a ReAct kind the seed's ``LABEL:`` form. Raises :class:`InvalidOutput` if neither is
    there; whether the reply is complete is :func:`.reply.validate_reply`'s call."""
    if text is None or not text.strip():
        raise InvalidOutput("empty response", raw_response=text or "")
    found = list(_dicts_in(text))
    # Prefer an object that looks like a reply over, say, an echoed tool input.
    for data in sorted(found, key=lambda d: not (_REPLY_KEYS & {str(k).lower()
                                                                for k in _unwrap(d)})):
        reply = reply_from_data(data, text, labels)
        if not labels or reply.label is not None:
            return reply
    if labels:
        labelled = _label_form(text, labels)
        if labelled is not None:
            return labelled
        if found:
            return reply_from_data(found[0], text, labels)
        raise InvalidOutput(f"response has neither a JSON object nor a 'LABEL: "
                            f"{labels[0]}' line", raw_response=text)
    if found:
        return reply_from_data(found[0], text, labels)
    raise InvalidOutput("response is not JSON (no JSON object found in the text)",
                        raw_response=text)
