"""What the official-SDK judges share: their identity, their secrets, their errors.

The openai and anthropic SDKs share the same exception family (APITimeoutError,
APIConnectionError, APIStatusError), so one function decides for both what is transient
(retried), fatal (opens the breaker at once) or a plain failure; every message is redacted.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, ClassVar

from eval_pipeline.judges._common import retry_after_seconds
from eval_pipeline.judges.base import JudgeError
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import FatalProviderError, TransientJudgeError, redact
from eval_pipeline.judges.presets import ResolvedEndpoint, call_identity, resolve_endpoint

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


class SdkJudge:
    """Base of the provider judges: resolves the endpoint, refuses a missing key, never
    shows the key (``__repr__``, ``secrets`` for redaction), maps SDK errors."""

    sdk: ClassVar[ModuleType]

    def __init__(self, config: JudgeConfig, api_key: str | None) -> None:
        endpoint: ResolvedEndpoint = resolve_endpoint(config)
        if endpoint.requires_key and not api_key:
            raise ValueError(
                f"judge {config.name!r}: no API key; set the environment variable "
                f"{endpoint.key_env or '<api_key_env>'}"
            )
        self.name = config.name
        self.provider = config.provider
        self.model = endpoint.model
        self.endpoint = endpoint
        self.config = config
        self._secrets = (api_key,)

    def __repr__(self) -> str:  # the client holds the key; never print it
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"

    @property
    def secrets(self) -> tuple[str | None, ...]:
        return self._secrets

    def cache_identity(self) -> dict[str, Any]:
        """Everything besides the prompt and schema that shapes the answer."""
        return call_identity(self.config)

    def _translate(self, exc: Exception) -> JudgeError:
        return translate_sdk_error(exc, self.sdk, self.config.timeout_s, self._secrets)

    async def aclose(self) -> None:
        await self._client.close()  # type: ignore[attr-defined]
