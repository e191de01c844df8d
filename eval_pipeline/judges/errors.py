"""Failure kinds a provider can raise, sorted by what the runner must do about them.

The runner's policy hangs on the kind, not on the SDK: a transient failure is retried with
backoff, invalid output earns one repair attempt, a fatal one opens the circuit breaker at
once. Keeping the kinds here lets both SDK adapters speak the same language.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypedDict

from eval_pipeline.judges.base import JudgeError


class TransientJudgeError(JudgeError):
    """Worth retrying: 429 (``rate_limited``: back-pressure, not a failure), 5xx, timeouts,
    connection resets."""

    def __init__(self, message: str, *, retry_after: float | None = None,
                 rate_limited: bool = False, raw_response: str = ""):
        super().__init__(message, raw_response=raw_response)
        self.retry_after = retry_after
        self.rate_limited = rate_limited


class FatalProviderError(JudgeError):
    """Retrying cannot help and every later call will fail the same way (bad key, no model)."""


class Tokens(TypedDict):
    """What a reply cost, passed as keyword arguments to a reply or an InvalidOutput."""

    tokens_in: int
    tokens_out: int


class InvalidOutput(JudgeError):
    """The call succeeded and was billed, but the answer is not the JSON we asked for."""

    def __init__(self, message: str, *, raw_response: str = "", tokens_in: int = 0,
                 tokens_out: int = 0):
        super().__init__(message, raw_response=raw_response)
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out


# Provider error bodies echo keys in masked forms ("sk-abc...wxyz"); scrub anything key-shaped.
_KEYLIKE = re.compile(r"\b(?:sk|key|api)[-_][A-Za-z0-9_\-*.]{6,}", re.IGNORECASE)
REDACTED = "[REDACTED]"


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Remove secrets (and key-shaped tokens) from text bound for rows, logs or exceptions."""
    if not text:
        return text
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return _KEYLIKE.sub(REDACTED, text)
