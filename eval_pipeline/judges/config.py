"""The judges file: a YAML list under ``judges:`` of judge configurations.

A judge is configured, not coded. Keys are never in this file, only the *name* of the
environment variable that holds one (``api_key_env``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from eval_pipeline.rubrics import ALL_EVALUATIONS

Provider = Literal["heuristic", "openai", "openai_compatible", "anthropic"]
OutputMode = Literal["json_schema", "json_object", "tool", "text"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Asset-safe name: lower case, digits, underscores.")
    provider: Provider = "heuristic"
    model: str = "heuristic-v1"
    base_url: str | None = None
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable holding the API key."
    )
    preset: str | None = Field(
        default=None, description="openai_compatible preset: deepseek, kimi, gemini, vllm ..."
    )
    output_mode: OutputMode | None = Field(
        default=None,
        description="Force the reply mode: json_schema, json_object, tool (a forced tool or "
        "function call) or text (plain text: JSON or the seed's 'LABEL: x' form). None: the "
        "preset's mode, with a fallback when the server refuses it (see docs/judges.md).",
    )
    schema_bounds: bool | None = Field(
        default=None,
        description="Send the score bounds (minimum/maximum) in the wire schema; None: the "
        "preset's setting. Turn off for a host that refuses the keywords.",
    )
    score_steps: int | None = Field(
        default=None, ge=1, le=100,
        description="Send each score as an enum of steps+1 evenly spaced values in [0, 1], "
        "for grammar engines that ignore bounds on numbers (llama.cpp); None: the preset's.")
    text_max_chars: int | None = Field(
        default=None, ge=1,
        description="maxLength on the reply's free-text fields (reasoning, summary, "
        "explanation) in the wire schema, for grammar engines: a small model cannot run on "
        "until max_tokens cuts its JSON off. None: the preset's (local servers: 2000).")
    project: str | None = Field(default=None, description="Vertex AI: the Google Cloud project")
    location: str | None = Field(
        default=None, description="Vertex AI: the region (e.g. us-central1) or global")
    temperature: float = 0.1
    max_tokens: int = 2000
    timeout_s: float = 60.0
    max_retries: int = 4
    concurrency: int = Field(default=4, ge=1)
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    input_price_per_mtok: float | None = Field(
        default=None, description="USD per million input tokens; None uses the preset default."
    )
    output_price_per_mtok: float | None = None
    budget_usd: float | None = Field(default=None, description="Stop issuing calls past this.")
    context_budget_chars: int | None = Field(
        default=None, ge=0,
        description="Cap on the earlier-clip summaries in a clip prompt (characters): the "
        "most recent that fit are kept. None: unbounded, as the original tool.")
    evaluations: list[str] = Field(
        default_factory=lambda: list[str](ALL_EVALUATIONS),
        description="Evaluation kinds this judge produces: clip_rubric, thought_to_tool, "
        "query_to_thought, sequence_optimality (default: all four).",
    )

    def key_env(self) -> str | None:
        """The variable that holds this judge's key: ``api_key_env``, or the preset's usual
        one (OPENAI_API_KEY, ...) when the entry leaves it out; None for keyless judges."""
        from eval_pipeline.judges.presets import key_env

        return key_env(self)

    @field_validator("evaluations")
    @classmethod
    def _known_evaluations(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in ALL_EVALUATIONS]
        if unknown:
            raise ValueError(f"unknown evaluation kinds {unknown}; known: "
                             f"{', '.join(ALL_EVALUATIONS)}")
        if not value:
            raise ValueError("evaluations must name at least one evaluation kind")
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate evaluation kinds in {value}")
        # One canonical order, so the same set always hashes to the same code_version.
        return [k for k in ALL_EVALUATIONS if k in value]

    @field_validator("name")
    @classmethod
    def _asset_safe(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"judge name {value!r} must match {_NAME.pattern} (it becomes an asset key)"
            )
        return value


class JudgesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judges: list[JudgeConfig] = Field(min_length=1)

    @field_validator("judges")
    @classmethod
    def _unique(cls, judges: list[JudgeConfig]) -> list[JudgeConfig]:
        names = [j.name for j in judges]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate judge names: {dupes}")
        return judges


DEFAULT_JUDGES = [JudgeConfig(name="heuristic")]


def load_judges(path: str | Path | None) -> list[JudgeConfig]:
    if path is None:
        return list(DEFAULT_JUDGES)
    data = yaml.safe_load(Path(path).read_text("utf-8"))
    return JudgesFile.model_validate(data).judges
