"""OpenAI and OpenAI-compatible judges (DeepSeek, Kimi, Gemini, Vertex AI, vLLM, Ollama,
llama.cpp).

Chat Completions is the one API every compatible server speaks, but not every server
speaks every structured-output mode, so the judge has four (``reply_mode``):

- ``json_schema``: strict structured output, the schema enforced by the server;
- ``json_object``: JSON mode, the schema stated in the prompt;
- ``tool``: a forced function call whose parameters are the schema;
- ``text``: no response format at all; the reply is read from the text (JSON in prose or
  a fenced block, or the seed's ``LABEL: x`` form for ReAct kinds).

A server that refuses ``json_schema`` (llama-cpp-python: HTTP 500 "Input should be 'text'
or 'json_object'"; others: HTTP 400 naming response_format, or llama.cpp's "JSON schema
error" for a schema its grammar converter cannot handle) makes the judge fall back to
``json_object`` once for the rest of the run: the refused request is sent again in the new
mode at once, so it neither fails a row nor counts toward the circuit breaker. A mode set
in the judges file (``output_mode``) is kept as it is, and a refusal of it is fatal.

The SDK's own retries are switched off (``max_retries=0``): the runner retries instead,
because each retry must pass the rate limiter and the circuit breaker again, and its
backoff must be configurable. The SDK's timeout machinery is used as is.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from eval_pipeline.judges.base import JudgeReply, JudgeRequest
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import FatalProviderError, InvalidOutput, Tokens, redact
from eval_pipeline.judges.presets import sends_temperature
from eval_pipeline.judges.schema import SCHEMA_NAME
from eval_pipeline.judges.sdk_judge import SdkJudge

_TOOL_DESCRIPTION = "Record the evaluation (the fields of the requested JSON answer)."
_REFUSAL_500 = "input should be 'text' or 'json_object'"


def refuses_json_schema(exc: openai.APIStatusError) -> bool:
    """Whether an error says the server does not do ``response_format: json_schema``."""
    text = f"{exc.message} {exc.body}".lower()
    if exc.status_code >= 500:
        return _REFUSAL_500 in text
    # "response_format ... json_schema not supported", or (llama.cpp) "JSON schema error at
    # #/properties/...": the server cannot do our schema, JSON mode with it in the prompt can.
    return exc.status_code in (400, 422) and any(
        word in text for word in ("response_format", "json_schema", "json schema"))


class OpenAIJudge(SdkJudge):
    """One configured judge on a Chat Completions endpoint."""

    sdk: ClassVar[ModuleType] = openai
    fallback_from: ClassVar[str] = "json_schema"

    def __init__(self, config: JudgeConfig, api_key: str | None = None,
                 *, default_headers: dict[str, str] | None = None) -> None:
        super().__init__(config, api_key)
        self._send_temperature = sends_temperature(config, self.endpoint)
        self._clients = self._shards(lambda http_client: AsyncOpenAI(
            # Local servers ignore the key, but the SDK insists on one.
            api_key=api_key or "no-key-needed",
            base_url=self.endpoint.base_url,
            timeout=config.timeout_s,
            max_retries=0,
            default_headers=default_headers,
            http_client=http_client,
        ))

    def _kwargs(self, request: JudgeRequest, mode: str) -> dict[str, Any]:
        enforced = mode in ("json_schema", "tool")
        user = request.user_prompt if enforced else self._prompt_with_schema(request)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system_prompt},
                {"role": "user", "content": user},
            ],
            self.endpoint.tokens_param: self.config.max_tokens,
        }
        if self._send_temperature:
            kwargs["temperature"] = self.config.temperature
        if mode == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "schema": self._schema(request),
                                "strict": True},
            }
        elif mode == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        elif mode == "tool":
            kwargs["tools"] = [{"type": "function", "function": {
                "name": SCHEMA_NAME, "description": _TOOL_DESCRIPTION,
                "parameters": self._schema(request), "strict": True}}]
            kwargs["tool_choice"] = {"type": "function", "function": {"name": SCHEMA_NAME}}
        return kwargs

    async def _create(self, request: JudgeRequest) -> ChatCompletion:
        with self._clients.lease() as client:
            return await self._send(client, request)

    @staticmethod
    async def _post(client: AsyncOpenAI, body: dict[str, Any]) -> ChatCompletion:
        """``chat.completions.create`` without its parameter transform: the SDK's own
        ``post`` (its documented way to send a body as it is), with the same client, key,
        timeout, errors and typed reply. ``create`` walks the TypedDict annotations of every
        parameter on every call to transform them, about 0.5 ms of CPU per request (a fifth
        of the request at concurrency 256, profiled), and a judge's bodies are plain JSON
        already: the same bodies batch mode writes to its files."""
        return await client.post("/chat/completions", body=body, cast_to=ChatCompletion)

    async def _send(self, client: AsyncOpenAI, request: JudgeRequest) -> ChatCompletion:
        mode = self.reply_mode
        try:
            return await self._post(client, self._kwargs(request, mode))
        except openai.APIStatusError as exc:
            if mode != "json_schema" or not refuses_json_schema(exc):
                raise self._translate(exc) from None
            reason = redact(f"HTTP {exc.status_code}: {exc.message}"[:300], self.secrets)
            if self.endpoint.output_mode_forced:
                raise FatalProviderError(
                    f"the server refused output_mode json_schema ({reason}); set "
                    "output_mode: json_object or text for this judge") from None
            self._fall_back("json_object", f"json_schema refused ({reason})")
        except openai.APIError as exc:
            raise self._translate(exc) from None
        try:  # the same request again, in the mode the server accepts
            return await self._post(client, self._kwargs(request, self.reply_mode))
        except openai.APIError as exc:
            raise self._translate(exc) from None

    async def score(self, request: JudgeRequest) -> JudgeReply:
        async with self._gate.turn():
            completion = await self._create(request)
            self._gate.settled = True
        return self.read_completion(request, completion)

    def request_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The Chat Completions body this judge sends for ``request`` in its current reply
        mode: what a batch line carries (judges/batch), byte for byte the live request."""
        return self._kwargs(request, self.reply_mode)

    def read_completion(self, request: JudgeRequest, completion: ChatCompletion) -> JudgeReply:
        """The reply in a completion, read and checked as every live answer is (also for a
        completion that came back in a batch's output file)."""
        usage = completion.usage
        tokens: Tokens = {"tokens_in": usage.prompt_tokens if usage else 0,
                          "tokens_out": usage.completion_tokens if usage else 0}
        if not completion.choices:
            raise InvalidOutput("response has no choices", **tokens)
        choice = completion.choices[0]
        content = choice.message.content or ""
        # getattr, not isinstance: a compatible server may leave out the call's "type".
        calls: list[Any] = [c for c in choice.message.tool_calls or []
                            if getattr(c, "function", None) is not None]
        raw = calls[0].function.arguments if calls else content
        if getattr(choice.message, "refusal", None):
            raise InvalidOutput(f"model refused: {choice.message.refusal}", raw_response=raw,
                                **tokens)
        if choice.finish_reason == "length":
            return self._cut_off(request, raw, prose=not calls, **tokens)
        # A forced call's arguments are a JSON string; a server without tool calling puts
        # the answer in the text instead, which is read the same way.
        return self._reply(request, text=raw, **tokens)
