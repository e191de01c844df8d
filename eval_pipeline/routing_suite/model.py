"""The model under test: a configured judge entry asked to pick tools instead of to score.

A suite's model is configured exactly like a judge (a judges-file entry: provider, model,
base_url, api_key_env, preset, timeout_s, max_retries, concurrency, per-minute limits,
prices), and built by the judges' own classes: :class:`ToolCallingOpenAI` *is* an
:class:`~eval_pipeline.judges.openai_judge.OpenAIJudge` (the same AsyncOpenAI client with
the SDK's own retries off, the sized httpx pool, the key refused when missing and never
shown, the temperature rule for reasoning models, the error translation into transient,
fatal and plain failures), with one more method, :meth:`turn`: send the conversation and
the tools, read back the text and the tool calls. The same for Anthropic.

The conversation is kept in one shape, OpenAI's chat messages (``system``, ``user``,
``assistant`` with ``tool_calls``, ``tool`` with ``tool_call_id``), the shape the chat
format reads back into a trajectory. The Anthropic model converts it on the way out: the
system prompt as ``system``, calls as ``tool_use`` blocks, the results of one message's
calls as ``tool_result`` blocks of one user message, as the Messages API requires.

Nothing is cached: a suite measures what the model does today, and a daily run that
replayed yesterday's answers would measure nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anthropic
import openai

from eval_pipeline.judges.anthropic_judge import AnthropicJudge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import InvalidOutput, redact
from eval_pipeline.judges.openai_judge import OpenAIJudge
from eval_pipeline.routing_suite.protocol import (
    Message,
    ModelRefused,
    ModelTurn,
    NoModelUnderTest,
    ToolCall,
    ToolCallingModel,
)
from eval_pipeline.routing_suite.spec import ToolDefinition


def _call_id(raw: str | None, turn: int, index: int) -> str:
    """A compatible server may leave a call's id out; the tool result still needs one."""
    return raw or f"call_{turn}_{index}"


class ToolCallingOpenAI(OpenAIJudge):
    """A Chat Completions model with tools (OpenAI and every compatible server)."""

    async def turn(self, conversation: Sequence[Message],
                   tools: Sequence[ToolDefinition]) -> ModelTurn:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(conversation),
            "tools": [t.openai() for t in tools],
            self.endpoint.tokens_param: self.config.max_tokens,
        }
        if self._send_temperature:
            kwargs["temperature"] = self.config.temperature
        try:
            with self._clients.lease() as client:
                completion = await client.chat.completions.create(**kwargs)
        except openai.APIError as exc:
            raise self._translate(exc) from None
        usage = completion.usage
        tokens_in = usage.prompt_tokens if usage else 0
        tokens_out = usage.completion_tokens if usage else 0
        if not completion.choices:
            raise InvalidOutput("response has no choices", tokens_in=tokens_in,
                                tokens_out=tokens_out)
        choice = completion.choices[0]
        message = choice.message
        if getattr(message, "refusal", None):
            raise ModelRefused(redact(f"model refused: {message.refusal}", self.secrets),
                               tokens_in=tokens_in, tokens_out=tokens_out)
        if choice.finish_reason == "length":
            # A call's arguments may stop mid-JSON: no choice of tools to check.
            raise InvalidOutput(f"response cut off at max_tokens={self.config.max_tokens}",
                                raw_response=message.content or "", tokens_in=tokens_in,
                                tokens_out=tokens_out)
        turn = sum(1 for m in conversation if m.get("role") == "assistant")
        calls = [ToolCall(_call_id(c.id, turn, i), c.function.name,
                          c.function.arguments or "{}")
                 for i, c in enumerate(message.tool_calls or [])
                 if getattr(c, "function", None) is not None]
        return ModelTurn(message.content or "", calls, choice.finish_reason or "",
                         tokens_in, tokens_out)


def anthropic_messages(conversation: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """The OpenAI-shaped conversation as Anthropic's ``system`` and ``messages``."""
    system = "\n\n".join(str(m["content"]) for m in conversation if m["role"] == "system")
    out: list[Message] = []
    for m in conversation:
        role = m["role"]
        if role == "user":
            out.append({"role": "user", "content": m["content"]})
        elif role == "assistant":
            blocks: list[Message] = [{"type": "text", "text": m["content"]}] \
                if m.get("content") else []
            for c in m.get("tool_calls") or []:
                try:
                    arguments = json.loads(c["function"]["arguments"] or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                blocks.append({"type": "tool_use", "id": c["id"],
                               "name": c["function"]["name"], "input": arguments})
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"],
                     "content": m["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)  # one user message per assistant's calls
            else:
                out.append({"role": "user", "content": [block]})
    return (system or None), out


class ToolCallingAnthropic(AnthropicJudge):
    """An Anthropic Messages model with tools."""

    async def turn(self, conversation: Sequence[Message],
                   tools: Sequence[ToolDefinition]) -> ModelTurn:
        system, messages = anthropic_messages(conversation)
        # Plain dicts in the API's documented shapes; the SDK's TypedDicts add nothing here.
        kwargs: dict[str, Any] = {"messages": messages,
                                  "tools": [t.anthropic() for t in tools]}
        if system:
            kwargs["system"] = system
        try:
            with self._clients.lease() as client:
                message = await client.messages.create(
                    model=self.model, max_tokens=self.config.max_tokens,
                    extra_body=self._body or None, **kwargs)
        except anthropic.APIError as exc:
            raise self._translate(exc) from None
        tokens_in = message.usage.input_tokens if message.usage else 0
        tokens_out = message.usage.output_tokens if message.usage else 0
        text = "\n".join(getattr(b, "text", "") for b in message.content
                         if getattr(b, "type", None) == "text")
        if message.stop_reason == "refusal":
            raise ModelRefused(redact(f"model refused: {text or 'stop_reason refusal'}",
                                      self.secrets), tokens_in=tokens_in, tokens_out=tokens_out)
        if message.stop_reason == "max_tokens":
            raise InvalidOutput(f"response cut off at max_tokens={self.config.max_tokens}",
                                raw_response=text, tokens_in=tokens_in, tokens_out=tokens_out)
        turn = sum(1 for m in conversation if m.get("role") == "assistant")
        uses: list[Any] = [b for b in message.content if getattr(b, "type", None) == "tool_use"]
        calls = [ToolCall(_call_id(getattr(b, "id", None), turn, i), b.name,
                          json.dumps(b.input, ensure_ascii=False))
                 for i, b in enumerate(uses)]
        return ModelTurn(text, calls, message.stop_reason or "", tokens_in, tokens_out)


def model_under_test(config: JudgeConfig, api_key: str | None) -> ToolCallingModel:
    """The model for a judges-file entry. The heuristic judge cannot call tools, so it is
    refused rather than run: a suite's verdicts are about a real model's choices."""
    if config.provider == "heuristic":
        raise NoModelUnderTest(
            f"entry {config.name!r} is the heuristic judge, which calls no tools; a routing "
            "suite needs an LLM with tool calling (provider openai, anthropic or "
            "openai_compatible)")
    if config.provider == "anthropic":
        return ToolCallingAnthropic(config, api_key)
    return ToolCallingOpenAI(config, api_key)

