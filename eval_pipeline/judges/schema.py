"""The structured-output contract a judge is asked for, built from the rubric's metrics.

One pydantic model per metric list does double duty: its JSON schema is what the providers'
structured-output modes enforce on the wire, and the same model validates what comes back,
so a reply that passes here has exactly the rubric's metrics, each a number in [0, 1].
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from eval_pipeline.judges.errors import InvalidOutput

SCHEMA_NAME = "clip_evaluation"


@lru_cache(maxsize=64)
def _reply_model(metrics: tuple[str, ...], labels: tuple[str, ...] = ()) -> type[BaseModel]:
    score_fields: dict[str, Any] = {
        m: (float, Field(ge=0.0, le=1.0, description=f"Score for {m}, from 0.0 to 1.0"))
        for m in metrics
    }
    scores = create_model(  # type: ignore[call-overload]
        "Scores", __config__=ConfigDict(extra="forbid", strict=True), **score_fields
    )
    fields: dict[str, Any] = {
        "scores": (scores, Field(description="One score per rubric criterion")),
    }
    if labels:
        # A ReAct kind: the label is part of the answer, restricted to the kind's two words.
        fields["label"] = (Literal[labels],  # type: ignore[valid-type]
                           Field(description=f"Exactly one of: {', '.join(labels)}"))
    fields["summary"] = (str, Field(description="One sentence: what this clip did and the result"))
    fields["reasoning"] = (str, Field(description="Why these scores"))
    return create_model(  # type: ignore[call-overload]
        "ClipEvaluation", __config__=ConfigDict(extra="forbid", strict=True), **fields,
    )


def reply_model(metrics: Sequence[str], labels: Sequence[str] = ()) -> type[BaseModel]:
    """The reply model; ``labels`` (ReAct kinds) adds a required ``label`` enum."""
    return _reply_model(tuple(metrics), tuple(labels))


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline_refs(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _inline_refs(v, defs) for k, v in node.items() if k not in ("$defs", "title")}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def _drop_bounds(node: Any) -> Any:
    # Not every strict-mode or local grammar engine accepts numeric bounds; the range is
    # stated in the description and enforced by the validating model instead.
    if isinstance(node, dict):
        return {k: _drop_bounds(v) for k, v in node.items() if k not in ("minimum", "maximum")}
    if isinstance(node, list):
        return [_drop_bounds(v) for v in node]
    return node


@lru_cache(maxsize=64)
def _wire_schema(metrics: tuple[str, ...], labels: tuple[str, ...] = ()) -> str:
    full = _reply_model(metrics, labels).model_json_schema()
    return json.dumps(_drop_bounds(_inline_refs(full, full.get("$defs", {}))), sort_keys=True)


def wire_schema(metrics: Sequence[str], labels: Sequence[str] = ()) -> dict[str, Any]:
    """A self-contained JSON schema (no $ref, all fields required, no extra keys)."""
    return json.loads(_wire_schema(tuple(metrics), tuple(labels)))


def schema_version(metrics: Sequence[str], labels: Sequence[str] = ()) -> str:
    return hashlib.sha256(_wire_schema(tuple(metrics), tuple(labels)).encode()).hexdigest()[:12]


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


def parse_reply_text(text: str, metrics: Sequence[str], labels: Sequence[str] = ()
                     ) -> dict[str, Any]:
    """Parse and validate a provider's text answer; raise :class:`InvalidOutput` if it is off.

    Markdown fences are unwrapped (local models add them even in JSON mode); nothing else
    is repaired here, so a wrong answer goes back to the model, never gets patched up.
    """
    if text is None or not text.strip():
        raise InvalidOutput("empty response", raw_response=text or "")
    body = text
    fenced = _FENCE.match(text)
    if fenced:
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise InvalidOutput(f"response is not JSON: {exc}", raw_response=text) from None
    return validate_reply_data(data, metrics, raw_response=text, labels=labels)


def validate_reply_data(data: Any, metrics: Sequence[str], raw_response: str = "",
                        labels: Sequence[str] = ()) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidOutput("response JSON is not an object", raw_response=raw_response)
    try:
        reply_model(metrics, labels).model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            + (f" (got {repr(err['input'])[:80]})" if err["type"] != "missing" else "")
            for err in exc.errors()
        )
        raise InvalidOutput(f"response does not match the schema: {problems}",
                            raw_response=raw_response) from None
    return data
