"""Judges: configured in YAML, built by :func:`make_judge`, run by :mod:`.runner`."""

from __future__ import annotations

from eval_pipeline.judges.base import Judge
from eval_pipeline.judges.config import JudgeConfig


def make_judge(config: JudgeConfig, api_key: str | None = None) -> Judge:
    """Build the provider client for one judge; the key comes from the caller's EnvVar."""
    if config.provider == "heuristic":
        from eval_pipeline.judges.heuristic import HeuristicJudge

        return HeuristicJudge(config)
    if config.provider in ("openai", "openai_compatible"):
        from eval_pipeline.judges.openai_judge import OpenAIJudge

        return OpenAIJudge(config, api_key)
    if config.provider == "anthropic":
        from eval_pipeline.judges.anthropic_judge import AnthropicJudge

        return AnthropicJudge(config, api_key)
    raise NotImplementedError(f"provider {config.provider!r} is not available yet")
