"""Map tool tags and tool names to tool types (rubric families).

The registry is data (``rubrics/tools.yaml``) so that a user adds a tool without touching
code; parsers ask it which tags are tool calls and which rubric a call is scored on.
"""

from __future__ import annotations

from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

from eval_pipeline.models import GENERIC_TOOL_TYPE


class ToolTypeSpec(BaseModel):
    tags: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list)


class ToolRegistry(BaseModel):
    tool_types: dict[str, ToolTypeSpec]

    @cached_property
    def tool_tags(self) -> list[str]:
        """Every XML tag that wraps a tool call, longest first so regex alternation is greedy."""
        tags = {t.lower() for spec in self.tool_types.values() for t in spec.tags}
        return sorted(tags, key=lambda t: (-len(t), t))

    def tool_type_for_tag(self, tag: str) -> str:
        tag = tag.lower()
        for tool_type, spec in self.tool_types.items():
            if tag in (t.lower() for t in spec.tags):
                return tool_type
        return GENERIC_TOOL_TYPE

    def tool_type_for_name(self, name: str | None) -> str:
        """Resolve a tool/function name; ``tavily-search`` or ``deepsearch.quick_research`` match
        their server tag by prefix.

        Prefixes are matched against tags (server names) only: matching them against action
        names would send SWE-agent's ``scroll_down`` to the browser rubric via ``scroll``.
        """
        if not name:
            return GENERIC_TOOL_TYPE
        norm = _norm(name)
        for tool_type, spec in self.tool_types.items():
            if norm in {_norm(n) for n in spec.names + spec.tags}:
                return tool_type
        prefixes = [norm.split(sep, 1)[0] for sep in (".", "__", "_", "/") if sep in norm]
        for cand in prefixes:
            for tool_type, spec in self.tool_types.items():
                if cand in {_norm(t) for t in spec.tags}:
                    return tool_type
        return GENERIC_TOOL_TYPE


def _norm(name: str) -> str:
    """Case and dash insensitive: ``Tavily-Search`` and ``tavily_search`` are one tool."""
    return name.strip().lower().replace("-", "_")


def load_registry(path: str | Path | None = None) -> ToolRegistry:
    if path is None:
        text = resources.files("eval_pipeline").joinpath("rubrics/tools.yaml").read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    return ToolRegistry.model_validate(yaml.safe_load(text))


@lru_cache(maxsize=1)
def default_registry() -> ToolRegistry:
    return load_registry()
