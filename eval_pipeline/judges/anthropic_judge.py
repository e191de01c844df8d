"""Anthropic judges through the Messages API, structured by a forced tool call.

The rubric's schema becomes the ``input_schema`` of a single tool and ``tool_choice``
forces the model to call it, so the answer arrives as parsed JSON in a ``tool_use``
block; it is validated against the same pydantic model as every other provider.

The installed SDK (2.x) no longer exposes ``temperature`` on ``messages.create``, so the
configured temperature is not sent. SDK retries are off for the reason given in
:mod:`.openai_judge`.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
from anthropic import AsyncAnthropic

from eval_pipeline.judges.base import JudgeReply, JudgeRequest
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import (
    InvalidOutput,
)
from eval_pipeline.judges.schema import SCHEMA_NAME, validate_reply_data, wire_schema
from eval_pipeline.judges.sdk_judge import SdkJudge

_TOOL_DESCRIPTION = "Record the evaluation of the clip: one score per criterion, a summary, "\
    "and the reasoning (and the label, when the schema asks for one)."


class AnthropicJudge(SdkJudge):
    """One configured judge on the Anthropic Messages API."""

    sdk = anthropic

    def __init__(self, config: JudgeConfig, api_key: str | None = None) -> None:
        super().__init__(config, api_key)
        # base_url is always explicit so ANTHROPIC_BASE_URL or a profile on disk cannot
        # silently redirect a judge.
        self._client = AsyncAnthropic(api_key=api_key, base_url=self.endpoint.base_url,
                                      timeout=config.timeout_s, max_retries=0)

    async def score(self, request: JudgeRequest) -> JudgeReply:
        tool: dict[str, Any] = {
            "name": SCHEMA_NAME,
            "description": _TOOL_DESCRIPTION,
            "input_schema": wire_schema(request.metrics, request.labels),
            "strict": True,
        }
        try:
            message = await self._client.messages.create(
                model=self.model,
                max_tokens=self.config.max_tokens,
                system=request.system_prompt,
                messages=[{"role": "user", "content": request.user_prompt}],
                tools=[tool],
                tool_choice={"type": "tool", "name": SCHEMA_NAME,
                             "disable_parallel_tool_use": True},
            )
        except anthropic.APIError as exc:
            raise self._translate(exc) from None
        tokens_in = message.usage.input_tokens if message.usage else 0
        tokens_out = message.usage.output_tokens if message.usage else 0
        calls = [b for b in message.content if getattr(b, "type", None) == "tool_use"
                 and getattr(b, "name", None) == SCHEMA_NAME]
        texts = [getattr(b, "text", "") for b in message.content
                 if getattr(b, "type", None) == "text"]
        if not calls:
            raise InvalidOutput(f"no {SCHEMA_NAME} tool call in the response "
                                f"(stop_reason={message.stop_reason})",
                                raw_response="\n".join(texts), tokens_in=tokens_in,
                                tokens_out=tokens_out)
        data = calls[0].input
        raw = json.dumps(data, ensure_ascii=False)
        if message.stop_reason == "max_tokens":
            raise InvalidOutput(f"response cut off at max_tokens={self.config.max_tokens}",
                                raw_response=raw, tokens_in=tokens_in, tokens_out=tokens_out)
        try:
            validate_reply_data(data, request.metrics, raw_response=raw, labels=request.labels)
        except InvalidOutput as exc:
            exc.tokens_in, exc.tokens_out = tokens_in, tokens_out
            raise
        return JudgeReply(scores=data["scores"], summary=data["summary"],  # type: ignore[arg-type]
                          reasoning=data["reasoning"], label=data.get("label"),  # type: ignore[arg-type]
                          raw_response=raw,
                          tokens_in=tokens_in, tokens_out=tokens_out)
