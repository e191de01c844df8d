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

    @cached_property
    def tool_tag_set(self) -> frozenset[str]:
        """``tool_tags`` as a set, for membership tests per tag."""
        return frozenset(self.tool_tags)

    @cached_property
    def _type_by_tag(self) -> dict[str, str]:
        """Lower-cased tag -> tool type, the first tool type listing it winning."""
        found: dict[str, str] = {}
        for tool_type, spec in self.tool_types.items():
            for tag in spec.tags:
                found.setdefault(tag.lower(), tool_type)
        return found

    @cached_property
    def _type_by_name(self) -> tuple[dict[str, str], dict[str, str]]:
        """Normalized name or tag -> tool type, and normalized tag -> tool type (for the
        prefix match), the first tool type listing it winning."""
        names: dict[str, str] = {}
        tags: dict[str, str] = {}
        for tool_type, spec in self.tool_types.items():
            for name in spec.names + spec.tags:
                names.setdefault(_norm(name), tool_type)
            for tag in spec.tags:
                tags.setdefault(_norm(tag), tool_type)
        return names, tags

    def tool_type_for_tag(self, tag: str) -> str:
        # A dict built once: scanning every tool type's tags per call was a sixth of the
        # XML parser's time (pyinstrument, #12.1).
        return self._type_by_tag.get(tag.lower(), GENERIC_TOOL_TYPE)

    def tool_type_for_name(self, name: str | None) -> str:
        """Resolve a tool/function name; ``tavily-search`` or ``deepsearch.quick_research`` match
        their server tag by prefix.

        Prefixes are matched against tags (server names) only: matching them against action
        names would send SWE-agent's ``scroll_down`` to the browser rubric via ``scroll``.
        """
        if not name:
            return GENERIC_TOOL_TYPE
        norm = _norm(name)
        names, tags = self._type_by_name
        if norm in names:
            return names[norm]
        prefixes = [norm.split(sep, 1)[0] for sep in (".", "__", "_", "/") if sep in norm]
        for cand in prefixes:
            if cand in tags:
                return tags[cand]
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
