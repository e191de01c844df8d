"""Judges: configured in YAML, built by :func:`make_judge`, run by :mod:`.runner`.

The provider registry: one builder per ``JudgeConfig.provider``. Endpoint details (URLs,
default models, key variables, reply modes) live in :mod:`.presets`.
"""

from __future__ import annotations

from collections.abc import Callable

from eval_pipeline.judges.base import Judge
from eval_pipeline.judges.config import JudgeConfig


def _heuristic(config: JudgeConfig, api_key: str | None) -> Judge:
    from eval_pipeline.judges.heuristic import HeuristicJudge

    return HeuristicJudge(config)


def _openai(config: JudgeConfig, api_key: str | None) -> Judge:
    from eval_pipeline.judges.openai_judge import OpenAIJudge

    return OpenAIJudge(config, api_key)


def _anthropic(config: JudgeConfig, api_key: str | None) -> Judge:
    from eval_pipeline.judges.anthropic_judge import AnthropicJudge

    return AnthropicJudge(config, api_key)


# Keyed by every value of config.Provider (a test holds the two in step); the SDK modules
# are imported only for the providers a run uses.
PROVIDERS: dict[str, Callable[[JudgeConfig, str | None], Judge]] = {
    "heuristic": _heuristic,
    "openai": _openai,
    "openai_compatible": _openai,
    "anthropic": _anthropic,
}


def make_judge(config: JudgeConfig, api_key: str | None = None) -> Judge:
    """Build the provider client for one judge; the key comes from the caller's EnvVar."""
    return PROVIDERS[config.provider](config, api_key)
