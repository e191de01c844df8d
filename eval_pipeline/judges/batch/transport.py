"""Provider batch APIs through the official SDKs: submit, poll, read results.

Only the transport changes in batch mode. Each line carries exactly the body the live judge
would send (``OpenAIJudge.request_body``, ``AnthropicJudge.request_params``), and each
result is read by the live judge's own reader (``read_completion``, ``read_message``), so
reply modes, lenient parsing and the checks on a reply are the live ones.

- OpenAI (and OpenAI-compatible servers with ``/v1/files`` and ``/v1/batches``):
  ``files.create(purpose="batch")`` with one JSONL line per request, ``batches.create``
  against ``/v1/chat/completions``, ``batches.retrieve``, ``files.content`` of the output
  and error files.
- Anthropic: ``messages.batches.create(requests=[...])``, ``messages.batches.retrieve``,
  ``messages.batches.results`` (JSONL, streamed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import anthropic
import openai
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

from eval_pipeline.judges.anthropic_judge import AnthropicJudge
from eval_pipeline.judges.base import Judge, JudgeRequest
from eval_pipeline.judges.errors import InvalidOutput, redact
from eval_pipeline.judges.openai_judge import OpenAIJudge

__all__ = ["BatchStatus", "BatchTransport", "LineResult", "transport_for"]

# Statuses of a line's own HTTP answer worth sending again in a later batch: the provider
# failed, not the request.
_RETRYABLE_HTTP = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_RETRYABLE_ANTHROPIC = frozenset({"api_error", "overloaded_error", "rate_limit_error",
                                  "timeout_error"})


class BatchStatus(BaseModel):
    """A provider batch as last seen: ``ended`` once no line will change any more."""

    batch_id: str
    status: str
    ended: bool
    done: int
    total: int


class LineResult(BaseModel):
    """One line's outcome: ``reply`` (read, not yet validated against the rubric),
    ``unreadable`` (the model answered, the answer cannot be read: repair, as live), or an
    ``error`` (``retryable``: expired, cancelled, a provider fault; else a failed row)."""

    custom_id: str
    state: str  # answered | unreadable | errored
    reply_json: str | None = None
    error: str | None = None
    raw: str = ""
    retryable: bool = False
    tokens_in: int = 0
    tokens_out: int = 0


class BatchTransport(Protocol):
    async def submit(self, lines: Sequence[tuple[str, JudgeRequest]],
                     metadata: Mapping[str, str]) -> BatchStatus: ...

    async def status(self, batch_id: str) -> BatchStatus: ...

    async def results(self, batch_id: str, requests: Mapping[str, JudgeRequest]
                      ) -> list[LineResult]: ...

    async def cancel(self, batch_id: str) -> None: ...


def _read(custom_id: str, read: Any) -> LineResult:
    """Run the live reader on a result; its verdict as a line outcome."""
    try:
        reply = read()
    except InvalidOutput as exc:
        return LineResult(custom_id=custom_id, state="unreadable", error=str(exc),
                          raw=exc.raw_response, tokens_in=exc.tokens_in,
                          tokens_out=exc.tokens_out)
    return LineResult(custom_id=custom_id, state="answered", reply_json=reply.model_dump_json(),
                      raw=reply.raw_response, tokens_in=reply.tokens_in,
                      tokens_out=reply.tokens_out)


class OpenAIBatchTransport:
    """The OpenAI Batch API (also any compatible server that implements it)."""

    endpoint: Literal["/v1/chat/completions"] = "/v1/chat/completions"
    _ENDED = frozenset({"completed", "failed", "expired", "cancelled"})

    def __init__(self, judge: OpenAIJudge) -> None:
        self.judge = judge
        self.client: openai.AsyncOpenAI = judge._client

    def _secrets(self) -> tuple[str | None, ...]:
        return tuple(self.judge.secrets)

    def _status(self, batch: Any) -> BatchStatus:
        counts = batch.request_counts
        done = (counts.completed + counts.failed) if counts else 0
        return BatchStatus(batch_id=batch.id, status=batch.status,
                           ended=batch.status in self._ENDED, done=done,
                           total=counts.total if counts else 0)

    async def submit(self, lines: Sequence[tuple[str, JudgeRequest]],
                     metadata: Mapping[str, str]) -> BatchStatus:
        body = "".join(json.dumps({"custom_id": custom_id, "method": "POST",
                                   "url": self.endpoint,
                                   "body": self.judge.request_body(request)},
                                  ensure_ascii=False) + "\n"
                       for custom_id, request in lines)
        uploaded = await self.client.files.create(
            file=("eval_pipeline_batch.jsonl", body.encode("utf-8"), "application/jsonl"),
            purpose="batch")
        batch = await self.client.batches.create(
            input_file_id=uploaded.id, endpoint=self.endpoint, completion_window="24h",
            metadata=dict(metadata))
        return self._status(batch)

    async def status(self, batch_id: str) -> BatchStatus:
        return self._status(await self.client.batches.retrieve(batch_id))

    async def _file_lines(self, file_id: str | None) -> list[dict[str, Any]]:
        if not file_id:
            return []
        content = await self.client.files.content(file_id)
        return [json.loads(line) for line in content.text.splitlines() if line.strip()]

    async def results(self, batch_id: str, requests: Mapping[str, JudgeRequest]
                      ) -> list[LineResult]:
        batch = await self.client.batches.retrieve(batch_id)
        out: list[LineResult] = []
        for item in [*await self._file_lines(batch.output_file_id),
                     *await self._file_lines(batch.error_file_id)]:
            custom_id = str(item.get("custom_id"))
            request = requests.get(custom_id)
            if request is None:
                continue  # not ours (a line we did not send)
            out.append(self._line(custom_id, request, item))
        if batch.status == "failed" and not out:  # the input was refused as a whole
            errors = "; ".join(f"{e.code}: {e.message}" for e in
                               (batch.errors.data or [] if batch.errors else []))
            message = redact(f"batch {batch_id} failed: {errors or 'no reason given'}",
                             self._secrets())
            out = [LineResult(custom_id=c, state="errored", error=message)
                   for c in requests]
        return out

    def _line(self, custom_id: str, request: JudgeRequest, item: dict[str, Any]
              ) -> LineResult:
        response = item.get("response") or {}
        error = item.get("error")
        code = int(response.get("status_code") or 0)
        if code == 200 and not error:
            completion = ChatCompletion.model_validate(response.get("body") or {})
            return _read(custom_id, lambda: self.judge.read_completion(request, completion))
        if error:  # no answer at all: expired, cancelled, or refused before the model
            kind = str(error.get("code") or "error")
            text = f"{kind}: {error.get('message') or ''}".strip()
            retryable = kind in ("batch_expired", "batch_cancelled") or code in _RETRYABLE_HTTP
        else:
            body = response.get("body") or {}
            detail = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
            text = f"HTTP {code}: {detail or json.dumps(body)[:300]}"
            retryable = code in _RETRYABLE_HTTP
        return LineResult(custom_id=custom_id, state="errored",
                          error=redact(f"batch line failed: {text}", self._secrets()),
                          retryable=retryable)

    async def cancel(self, batch_id: str) -> None:
        await self.client.batches.cancel(batch_id)


class AnthropicBatchTransport:
    """Anthropic's Message Batches API."""

    def __init__(self, judge: AnthropicJudge) -> None:
        self.judge = judge
        self.client: anthropic.AsyncAnthropic = judge._client

    def _secrets(self) -> tuple[str | None, ...]:
        return tuple(self.judge.secrets)

    @staticmethod
    def _status(batch: Any) -> BatchStatus:
        c = batch.request_counts
        done = c.succeeded + c.errored + c.canceled + c.expired
        return BatchStatus(batch_id=batch.id, status=batch.processing_status,
                           ended=batch.processing_status == "ended", done=done,
                           total=done + c.processing)

    async def submit(self, lines: Sequence[tuple[str, JudgeRequest]],
                     metadata: Mapping[str, str]) -> BatchStatus:
        batch = await self.client.messages.batches.create(requests=[
            {"custom_id": custom_id, "params": self.judge.request_params(request)}  # type: ignore[typeddict-item]
            for custom_id, request in lines])
        return self._status(batch)

    async def status(self, batch_id: str) -> BatchStatus:
        return self._status(await self.client.messages.batches.retrieve(batch_id))

    async def results(self, batch_id: str, requests: Mapping[str, JudgeRequest]
                      ) -> list[LineResult]:
        out: list[LineResult] = []
        async for item in await self.client.messages.batches.results(batch_id):
            request = requests.get(item.custom_id)
            if request is None:
                continue
            result = item.result
            if result.type == "succeeded":
                message = result.message
                out.append(_read(item.custom_id,
                                 lambda m=message, r=request: self.judge.read_message(r, m)))
                continue
            if result.type == "errored":
                error = result.error.error
                kind = str(getattr(error, "type", "error"))
                text = f"{kind}: {getattr(error, 'message', '')}"
                retryable = kind in _RETRYABLE_ANTHROPIC
            else:  # canceled, expired: never processed
                text, retryable = f"request {result.type} before it was processed", True
            out.append(LineResult(custom_id=item.custom_id, state="errored",
                                  error=redact(f"batch line failed: {text}", self._secrets()),
                                  retryable=retryable))
        return out

    async def cancel(self, batch_id: str) -> None:
        await self.client.messages.batches.cancel(batch_id)


def transport_for(judge: Judge) -> BatchTransport:
    """The batch API of a live judge's provider; ValueError for a judge that has none."""
    if isinstance(judge, OpenAIJudge):
        return OpenAIBatchTransport(judge)
    if isinstance(judge, AnthropicJudge):
        return AnthropicBatchTransport(judge)
    raise ValueError(f"judge {judge.name!r} ({judge.provider}) has no batch API")
