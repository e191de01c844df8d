"""OpenAI and OpenAI-compatible judges (DeepSeek, Kimi, Gemini, vLLM, Ollama, llama.cpp).

Chat Completions is the one API every compatible server speaks. Structured output uses the
strongest mode the endpoint supports (strict ``json_schema`` where it exists, JSON mode
otherwise); the reply is parsed and validated against the rubric's schema either way.

The SDK's own retries are switched off (``max_retries=0``): the runner retries instead,
because each retry must pass the rate limiter and the circuit breaker again, and its
backoff must be configurable. The SDK's timeout machinery is used as is.
"""

from __future__ import annotations

from typing import Any

import openai
from openai import AsyncOpenAI

from eval_pipeline.judges.base import JudgeReply, JudgeRequest
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import (
    InvalidOutput,
)
from eval_pipeline.judges.presets import sends_temperature
from eval_pipeline.judges.schema import SCHEMA_NAME, parse_reply_text, wire_schema
from eval_pipeline.judges.sdk_judge import SdkJudge


class OpenAIJudge(SdkJudge):
    """One configured judge on a Chat Completions endpoint."""

    sdk = openai

    def __init__(self, config: JudgeConfig, api_key: str | None = None,
                 *, default_headers: dict[str, str] | None = None) -> None:
        super().__init__(config, api_key)
        self._send_temperature = sends_temperature(config, self.endpoint)
        self._client = AsyncOpenAI(
            # Local servers ignore the key, but the SDK insists on one.
            api_key=api_key or "no-key-needed",
            base_url=self.endpoint.base_url,
            timeout=config.timeout_s,
            max_retries=0,
            default_headers=default_headers,
        )

    def _response_format(self, metrics: list[str], labels: list[str]) -> dict[str, Any]:
        if self.endpoint.output_mode == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "schema": wire_schema(metrics, labels),
                                "strict": True},
            }
        return {"type": "json_object"}

    async def score(self, request: JudgeRequest) -> JudgeReply:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system_prompt},
                {"role": "user", "content": request.user_prompt},
            ],
            "response_format": self._response_format(request.metrics, request.labels),
            self.endpoint.tokens_param: self.config.max_tokens,
        }
        if self._send_temperature:
            kwargs["temperature"] = self.config.temperature
        try:
            completion = await self._client.chat.completions.create(**kwargs)
        except openai.APIError as exc:
            raise self._translate(exc) from None
        usage = completion.usage
        tokens_in = usage.prompt_tokens if usage else 0
        tokens_out = usage.completion_tokens if usage else 0
        if not completion.choices:
            raise InvalidOutput("response has no choices", tokens_in=tokens_in,
                                tokens_out=tokens_out)
        choice = completion.choices[0]
        content = choice.message.content or ""
        if getattr(choice.message, "refusal", None):
            raise InvalidOutput(f"model refused: {choice.message.refusal}", raw_response=content,
                                tokens_in=tokens_in, tokens_out=tokens_out)
        if choice.finish_reason == "length":
            raise InvalidOutput(
                f"response cut off at max_tokens={self.config.max_tokens}",
                raw_response=content, tokens_in=tokens_in, tokens_out=tokens_out)
        try:
            data = parse_reply_text(content, request.metrics, request.labels)
        except InvalidOutput as exc:
            exc.tokens_in, exc.tokens_out = tokens_in, tokens_out
            raise
        return JudgeReply(scores=data["scores"], summary=data["summary"],
                          reasoning=data["reasoning"], label=data.get("label"),
                          raw_response=content,
                          tokens_in=tokens_in, tokens_out=tokens_out)
