"""What the official-SDK judges share: their identity, their secrets, their errors.

The openai and anthropic SDKs share the same exception family (APITimeoutError,
APIConnectionError, APIStatusError), so one function decides for both what is transient
(retried), fatal (opens the breaker at once) or a plain failure; every message is redacted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any, ClassVar, TypeVar

import httpx2

from eval_pipeline.judges._common import retry_after_seconds
from eval_pipeline.judges.base import JudgeError, JudgeReply, JudgeRequest
from eval_pipeline.judges.client_shards import ClientShards
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import (
    FatalProviderError,
    InvalidOutput,
    TransientJudgeError,
    redact,
)
from eval_pipeline.judges.presets import ResolvedEndpoint, call_identity, resolve_endpoint
from eval_pipeline.judges.reply import canonical_reply
from eval_pipeline.judges.schema import (
    parse_reply_text,
    reply_from_data,
    schema_instruction,
    snap_to_rail,
    wire_schema,
)

FATAL_STATUSES = frozenset({401, 402, 403, 404})

C = TypeVar("C")


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


class ModeGate:
    """Lets the first request of a judge find out whether its reply mode works before the
    others are sent, so a server that refuses the mode is asked once, not once per slot.

    Until ``settled``, requests pass one at a time; afterwards the gate costs nothing.
    """

    def __init__(self, settled: bool) -> None:
        self.settled = settled
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _current_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:  # a judge reused in a new loop
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        if self.settled:
            yield
            return
        lock = self._current_lock()
        await lock.acquire()
        if self.settled:  # decided while this request waited
            lock.release()
            yield
            return
        try:
            yield
        finally:
            lock.release()


class SdkJudge:
    """Base of the provider judges: resolves the endpoint, refuses a missing key, never
    shows the key (``__repr__``, ``secrets`` for redaction), maps SDK errors, and keeps the
    reply mode (``reply_mode`` now, ``reply_mode_note`` saying why, after a fallback)."""

    sdk: ClassVar[ModuleType]
    fallback_from: ClassVar[str]  # the one default mode a server may turn out not to do
    _clients: ClientShards[Any]  # the SDK clients, set by the subclass

    def __init__(self, config: JudgeConfig, api_key: str | None) -> None:
        endpoint: ResolvedEndpoint = resolve_endpoint(config)
        if endpoint.requires_key and not api_key:
            raise ValueError(
                f"judge {config.name!r}: no API key; set the environment variable "
                f"{endpoint.key_env or '<api_key_env>'}"
            )
        self.name = config.name
        self.provider: str = config.provider
        self.model = endpoint.model
        self.endpoint = endpoint
        self.config = config
        self._secrets: tuple[str, ...] = (api_key,) if api_key else ()
        self.reply_mode: str = endpoint.output_mode
        self.reply_mode_note: str | None = None
        # A mode set in the judges file is kept as it is; a preset's default may fall back.
        self._gate = ModeGate(settled=endpoint.output_mode_forced
                              or endpoint.output_mode != self.fallback_from)

    @property
    def _client(self) -> Any:
        """One SDK client of this judge, for calls besides the judge requests (batch files,
        the routing suite's model): any shard reaches the same endpoint with the same key."""
        return self._clients.first

    def __repr__(self) -> str:  # the client holds the key; never print it
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"

    @property
    def secrets(self) -> tuple[str | None, ...]:
        return self._secrets

    def _http_client(self, keepalive: int) -> Any:
        """The SDK's own HTTP client for one shard (judges/client_shards.py), keeping
        ``keepalive`` connections alive: as many as the shard has requests in flight at
        most. The SDKs keep 100 per client: past that, a request's connection would be
        closed when it finished and the next request open a new one (a TCP and TLS
        handshake, a DNS lookup in a thread) against a provider that answers slowly
        enough to keep that many in flight."""
        return self.sdk.DefaultAsyncHttpxClient(limits=httpx2.Limits(
            max_connections=max(1000, keepalive), max_keepalive_connections=keepalive))

    def _shards(self, make: Callable[[Any], C]) -> ClientShards[C]:
        """``make(http_client)`` once per shard of this judge's concurrency."""
        return ClientShards(lambda keepalive: make(self._http_client(keepalive)),
                            self.config.concurrency)

    def cache_identity(self) -> dict[str, Any]:
        """Everything besides the prompt and schema that shapes the answer."""
        return call_identity(self.config)

    def _fall_back(self, mode: str, reason: str) -> None:
        """Switch the reply mode for the rest of this judge's life (the run) and say why."""
        self.reply_mode = mode
        self.reply_mode_note = redact(f"{mode} instead of {self.endpoint.output_mode}: "
                                      f"{reason}", self._secrets)
        self._gate.settled = True

    def _schema(self, request: JudgeRequest) -> dict[str, Any]:
        """The schema a server enforces (tool input, json_schema), with the host's bounds."""
        return wire_schema(request.metrics, request.labels, bounds=self.endpoint.schema_bounds,
                           steps=self.endpoint.score_steps,
                           max_chars=self.endpoint.text_max_chars)

    @staticmethod
    def _prompt_with_schema(request: JudgeRequest) -> str:
        """The user prompt for modes where the server does not enforce the schema."""
        return request.user_prompt + schema_instruction(request.metrics, request.labels)

    @staticmethod
    def _reply(request: JudgeRequest, *, text: str | None = None, data: Any = None,
               raw: str = "", tokens_in: int = 0, tokens_out: int = 0) -> JudgeReply:
        """Parse (``text``) or take (``data``, a tool input) the reply and pass it through
        the one validator, so the reply returned is canonical and a bad one carries the
        tokens it cost."""
        try:
            reply = (parse_reply_text(text, request.labels) if data is None
                     else reply_from_data(data, raw, request.labels))
            reply = canonical_reply(reply, request.metrics, request.labels)
        except InvalidOutput as exc:
            exc.tokens_in, exc.tokens_out = tokens_in, tokens_out
            raise
        return reply.model_copy(update={"tokens_in": tokens_in, "tokens_out": tokens_out})

    def _cut_off(self, request: JudgeRequest, raw: str, *, prose: bool, tokens_in: int = 0,
                 tokens_out: int = 0) -> JudgeReply:
        """An answer cut off at ``max_tokens``: a failed reply, except a prose answer to a
        ReAct kind that names exactly one of its labels. That one is read as the seed's
        Phoenix ``llm_classify`` reads every answer (snap to rails, whatever the finish
        reason), and the reasoning says it was cut off. A cut-off JSON object or rubric is
        never completed: its scores or label may not have been written yet."""
        limit = f"response cut off at max_tokens={self.config.max_tokens}"
        readable = prose and request.labels and not raw.lstrip().startswith(("{", "[", "`"))
        label = snap_to_rail(raw, request.labels) if readable else None
        if label is None:
            raise InvalidOutput(limit, raw_response=raw, tokens_in=tokens_in,
                                tokens_out=tokens_out)
        reply = canonical_reply(
            JudgeReply(scores={}, label=label, raw_response=raw,
                       reasoning=f"[{limit}; the label is the one the text names] "
                                 f"{raw.strip()}"),
            request.metrics, request.labels)
        return reply.model_copy(update={"tokens_in": tokens_in, "tokens_out": tokens_out})

    def _translate(self, exc: Exception) -> JudgeError:
        return translate_sdk_error(exc, self.sdk, self.config.timeout_s, self._secrets)

    async def aclose(self) -> None:
        await self._clients.aclose(lambda client: client.close())
