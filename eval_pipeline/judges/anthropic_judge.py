"""Anthropic judges through the Messages API: a forced tool call, or plain text.

In ``tool`` mode (the default) the reply schema is the ``input_schema`` of a single tool and
``tool_choice`` forces the model to call it, so the answer arrives as parsed JSON in a
``tool_use`` block. Anthropic-compatible servers without tool calling (llama.cpp with a
model whose chat template has none) answer a forced tool use with text and
``stop_reason: end_turn``. The first time that happens the judge reads the JSON or the
seed's ``LABEL:`` form from the text, or, when the text is unreadable, asks the same
question once more without tools; either way it switches to ``text`` mode (no tools, the
schema stated in the prompt) for the rest of the run and says so in ``reply_mode_note``.
A mode set in the judges file (``output_mode``) is kept as it is.

The installed SDK (2.x) no longer exposes ``temperature`` on ``messages.create``: Anthropic's
own API gets none, an Anthropic-compatible server gets the configured one in the request
body (llama.cpp otherwise samples at 0.8). SDK retries are off for the reason given in
:mod:`.openai_judge`.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any, ClassVar

import anthropic
from anthropic import AsyncAnthropic
from anthropic.types import Message

from eval_pipeline.judges.base import JudgeReply, JudgeRequest
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import InvalidOutput, Tokens
from eval_pipeline.judges.presets import sends_temperature
from eval_pipeline.judges.schema import SCHEMA_NAME
from eval_pipeline.judges.sdk_judge import SdkJudge

_TOOL_DESCRIPTION = "Record the evaluation (the fields of the requested JSON answer)."


class AnthropicJudge(SdkJudge):
    """One configured judge on the Anthropic Messages API."""

    sdk: ClassVar[ModuleType] = anthropic
    fallback_from: ClassVar[str] = "tool"

    def __init__(self, config: JudgeConfig, api_key: str | None = None) -> None:
        super().__init__(config, api_key)
        # base_url is always explicit so ANTHROPIC_BASE_URL or a profile on disk cannot
        # silently redirect a judge.
        self._clients = self._shards(lambda http_client: AsyncAnthropic(
            api_key=api_key, base_url=self.endpoint.base_url, timeout=config.timeout_s,
            max_retries=0, http_client=http_client))
        self._body: dict[str, Any] = ({"temperature": config.temperature}
                                      if sends_temperature(config, self.endpoint) else {})

    def _params(self, request: JudgeRequest, *, tools: bool) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        user = request.user_prompt
        if tools:
            kwargs["tools"] = [{"name": SCHEMA_NAME, "description": _TOOL_DESCRIPTION,
                                "input_schema": self._schema(request), "strict": True}]
            kwargs["tool_choice"] = {"type": "tool", "name": SCHEMA_NAME,
                                     "disable_parallel_tool_use": True}
        else:
            user = self._prompt_with_schema(request)
        return {"model": self.model, "max_tokens": self.config.max_tokens,
                "system": request.system_prompt,
                "messages": [{"role": "user", "content": user}], **kwargs}

    def request_params(self, request: JudgeRequest) -> dict[str, Any]:
        """The Messages parameters this judge sends for ``request`` in its current reply
        mode, body extras included: what a Message Batches request carries (judges/batch)."""
        return {**self._params(request, tools=self.reply_mode == "tool"), **self._body}

    def read_message(self, request: JudgeRequest, message: Message) -> JudgeReply:
        """The reply in a message, read as every live answer is (a batch result's too)."""
        return self._read(request, message)

    async def _create(self, request: JudgeRequest, *, tools: bool) -> Message:
        # The SDK's own ``post`` rather than ``messages.create``: the same client, key,
        # timeout, errors and typed reply, without the parameter transform that walks the
        # TypedDict annotations on every call (openai_judge._post says why).
        try:
            with self._clients.lease() as client:
                return await client.post("/v1/messages", cast_to=Message,
                                         body={**self._params(request, tools=tools),
                                               **self._body})
        except anthropic.APIError as exc:
            raise self._translate(exc) from None

    def _read(self, request: JudgeRequest, message: Message) -> JudgeReply:
        tokens: Tokens = {"tokens_in": message.usage.input_tokens if message.usage else 0,
                          "tokens_out": message.usage.output_tokens if message.usage else 0}
        calls: list[Any] = [b for b in message.content if getattr(b, "type", None) == "tool_use"
                            and getattr(b, "name", None) == SCHEMA_NAME]
        text = "\n".join(getattr(b, "text", "") for b in message.content
                         if getattr(b, "type", None) == "text")
        raw = json.dumps(calls[0].input, ensure_ascii=False) if calls else text
        if message.stop_reason == "max_tokens":
            return self._cut_off(request, raw, prose=not calls, **tokens)
        if calls:
            return self._reply(request, data=calls[0].input, raw=raw, **tokens)
        if self.reply_mode == "tool" and self.endpoint.output_mode_forced:
            raise InvalidOutput(f"no {SCHEMA_NAME} tool call in the response "
                                f"(stop_reason={message.stop_reason})", raw_response=raw,
                                **tokens)
        return self._reply(request, text=text, **tokens)

    async def score(self, request: JudgeRequest) -> JudgeReply:
        async with self._gate.turn():
            tools = self.reply_mode == "tool"
            message = await self._create(request, tools=tools)
            has_call = any(getattr(b, "type", None) == "tool_use" for b in message.content)
            if not tools or has_call or self.endpoint.output_mode_forced:
                self._gate.settled = True
                return self._read(request, message)
            # A forced tool use came back as text: this server has no tool calling.
            reason = (f"a forced tool use came back as text "
                      f"(stop_reason={message.stop_reason})")
            try:
                reply = self._read(request, message)
            except InvalidOutput as unreadable:
                self._fall_back("text", reason + "; asked again without tools")
                again = await self._create(request, tools=False)
                try:
                    reply = self._read(request, again)
                except InvalidOutput as exc:  # both answers were billed
                    exc.tokens_in += unreadable.tokens_in
                    exc.tokens_out += unreadable.tokens_out
                    raise
                return reply.model_copy(update={
                    "tokens_in": reply.tokens_in + unreadable.tokens_in,
                    "tokens_out": reply.tokens_out + unreadable.tokens_out})
            self._fall_back("text", reason + "; read the answer from the text")
            return reply
