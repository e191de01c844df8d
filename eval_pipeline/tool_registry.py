"""Map tool tags and tool names to tool types (rubric families).

The registry is data (``rubrics/tools.yaml``) so that a user adds a tool without touching
code; parsers ask it which tags are tool calls and which rubric a call is scored on.
"""

from __future__ import annotations

from functools import lru_cache
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

    @property
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
        """Resolve a tool/function name; prefixes like ``tavily-search`` or ``a.b`` also match."""
        if not name:
            return GENERIC_TOOL_TYPE
        norm = name.strip().lower()
        candidates = [norm, norm.replace("-", "_")]
        for sep in (".", "__", "-", "_", "/"):
            if sep in norm:
                candidates.append(norm.split(sep, 1)[0])
        for cand in candidates:
            for tool_type, spec in self.tool_types.items():
                known = {n.lower().replace("-", "_") for n in spec.names + spec.tags}
                if cand.replace("-", "_") in known:
                    return tool_type
        return GENERIC_TOOL_TYPE


def load_registry(path: str | Path | None = None) -> ToolRegistry:
    if path is None:
        text = resources.files("eval_pipeline").joinpath("rubrics/tools.yaml").read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    return ToolRegistry.model_validate(yaml.safe_load(text))


@lru_cache(maxsize=1)
def default_registry() -> ToolRegistry:
    return load_registry()
