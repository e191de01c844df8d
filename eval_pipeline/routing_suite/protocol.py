"""What a suite run needs of a model, without the SDKs: the turn it answers, the protocol
of a model under test, and the choice of a judges-file entry. (:mod:`.model` holds the SDK
classes; importing them costs seconds, which the CLI's other verbs must not pay.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import InvalidOutput
from eval_pipeline.routing_suite.spec import ToolDefinition

Message = dict[str, Any]


class ModelRefused(InvalidOutput):
    """The model declined to answer (OpenAI ``refusal``, Anthropic ``stop_reason: refusal``):
    no tool choice to check, so the case has no verdict. An answer not usable, like
    :class:`InvalidOutput`: the provider answered, so the circuit breaker counts it as a
    success, never towards opening."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it (or Anthropic's input, serialized)


@dataclass
class ModelTurn:
    """One answer of the model: its text, its calls (parallel when more than one), what it
    cost."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str = ""
    tokens_in: int = 0
    tokens_out: int = 0

    def message(self) -> Message:
        """The answer as an OpenAI-shaped assistant message for the conversation."""
        out: Message = {"role": "assistant", "content": self.text or None}
        if self.calls:
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in self.calls]
        return out


class ToolCallingModel(Protocol):
    """What a suite run needs of a model: its identity, one turn, and closing."""

    name: str
    provider: str
    model: str
    config: JudgeConfig

    async def turn(self, conversation: Sequence[Message],
                   tools: Sequence[ToolDefinition]) -> ModelTurn: ...

    async def aclose(self) -> None: ...


class NoModelUnderTest(ValueError):
    """A suite needs a model that calls tools; this configuration names none."""


def pick_entry(entries: Sequence[JudgeConfig], name: str | None) -> JudgeConfig:
    """The entry named ``name`` of a judges file; with no name, its only LLM entry."""
    if name is not None:
        for entry in entries:
            if entry.name == name:
                return entry
        known = ", ".join(e.name for e in entries)
        raise NoModelUnderTest(f"no entry named {name!r} in the judges file (it has: {known})")
    llms = [e for e in entries if e.provider != "heuristic"]
    if len(llms) == 1:
        return llms[0]
    if not llms:
        raise NoModelUnderTest("the judges file has no LLM entry; a routing suite needs a "
                               "model with tool calling")
    raise NoModelUnderTest(f"the judges file has {len(llms)} LLM entries "
                           f"({', '.join(e.name for e in llms)}); name one as the model "
                           "under test")
