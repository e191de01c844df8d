"""Rubrics and prompt templates, each with a version that is a hash of its text.

The versions feed the judge assets' ``code_version`` and the cache key, so editing a rubric
or a template makes exactly the judgments that used it stale in the Dagster UI.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache, lru_cache
from importlib import resources

import yaml
from pydantic import BaseModel

from eval_pipeline.models import GENERIC_TOOL_TYPE


def text_version(*texts: str) -> str:
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()
    return digest[:12]


class Rubric(BaseModel):
    tool_type: str
    title: str
    metrics: dict[str, str]

    @property
    def metric_names(self) -> list[str]:
        return list(self.metrics)

    @property
    def version(self) -> str:
        return text_version(self.model_dump_json())

    def criteria_text(self) -> str:
        lines = []
        for i, (name, desc) in enumerate(self.metrics.items(), start=1):
            label = name.replace("_", " ").title()
            lines.append(f"{i}. {label} (0-1): {desc}")
        return "\n".join(lines)

    def json_example(self) -> str:
        example = {
            "scores": dict.fromkeys(self.metrics, 0.0),
            "summary": "One sentence summary of what this clip did and the result",
            "reasoning": "Detailed explanation of your evaluation and scoring rationale",
        }
        return json.dumps(example, indent=4)


def _read(name: str) -> str:
    return resources.files("eval_pipeline").joinpath(f"rubrics/{name}").read_text("utf-8")


@lru_cache(maxsize=1)
def rubrics() -> dict[str, Rubric]:
    data = yaml.safe_load(_read("rubrics.yaml"))
    return {k: Rubric(tool_type=k, title=v["title"], metrics=v["metrics"]) for k, v in data.items()}


def rubric_for(tool_type: str) -> Rubric:
    table = rubrics()
    return table.get(tool_type) or table[GENERIC_TOOL_TYPE]


@cache
def template(name: str) -> str:
    return _read(f"templates/{name}.txt")


def templates_version() -> str:
    """One version over every template and rubric: what a judge's output depends on."""
    return text_version(
        template("system"), template("clip"), *(r.version for r in rubrics().values())
    )


def render_clip_prompt(
    *, tool_type: str, task_description: str, previous_context: str, clip_content: str
) -> tuple[str, str]:
    """Return (system, user) prompts for scoring one clip on its tool type's rubric."""
    rubric = rubric_for(tool_type)
    user = template("clip").format(
        rubric_title=rubric.title,
        task_description=task_description,
        previous_context=previous_context,
        clip_content=clip_content,
        tool_type=tool_type,
        criteria=rubric.criteria_text(),
        json_example=rubric.json_example(),
    )
    return template("system").strip(), user
