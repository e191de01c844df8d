"""One mapping from the official SDKs' exceptions to the runner's error kinds.

The openai and anthropic SDKs share the same exception family (APITimeoutError,
APIConnectionError, APIStatusError), so one function decides for both what is transient
(retried), fatal (opens the breaker at once) or a plain failure; every message is redacted.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from eval_pipeline.judges._common import retry_after_seconds
from eval_pipeline.judges.base import JudgeError
from eval_pipeline.judges.errors import FatalProviderError, TransientJudgeError, redact

FATAL_STATUSES = frozenset({401, 402, 403, 404})


def translate_sdk_error(exc: Exception, sdk: ModuleType, timeout_s: float,
                        secrets: Sequence[str]) -> JudgeError:
    message = redact(str(exc), secrets)
    if isinstance(exc, sdk.APITimeoutError):
        return TransientJudgeError(f"timeout after {timeout_s}s")
    if isinstance(exc, sdk.APIConnectionError):
        cause = redact(str(exc.__cause__ or exc), secrets)
        return TransientJudgeError(f"connection error: {cause}")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        headers = dict(exc.response.headers) if exc.response is not None else {}
        text = f"HTTP {status}: {message}"
        if status == 429:
            return TransientJudgeError(text, retry_after=retry_after_seconds(headers),
                                       rate_limited=True)
        if status >= 500 or status in (408, 409):
            return TransientJudgeError(text, retry_after=retry_after_seconds(headers))
        if status in FATAL_STATUSES:
            return FatalProviderError(text)
        return JudgeError(text)
    return JudgeError(f"{type(exc).__name__}: {message}")
