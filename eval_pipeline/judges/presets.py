"""Provider presets: what a judge needs to know about an endpoint beyond its URL.

A preset fills what the judges file leaves out (base URL, default model, key variable) and
records what the endpoint can do, so the adapter asks for the strongest structured output
that endpoint supports instead of the weakest common denominator.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from eval_pipeline.judges.config import JudgeConfig

OutputMode = Literal["json_schema", "json_object", "tool"]
TokensParam = Literal["max_tokens", "max_completion_tokens"]


class Preset(BaseModel):
    name: str
    provider: Literal["openai", "openai_compatible", "anthropic"]
    base_url: str
    default_model: str
    output_mode: OutputMode
    key_env: str | None = None
    requires_key: bool = True
    tokens_param: TokensParam = "max_tokens"
    local: bool = False


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(name="openai", provider="openai", base_url="https://api.openai.com/v1",
               default_model="gpt-4.1-mini", output_mode="json_schema",
               key_env="OPENAI_API_KEY", tokens_param="max_completion_tokens"),
        Preset(name="anthropic", provider="anthropic", base_url="https://api.anthropic.com",
               default_model="claude-sonnet-4-5", output_mode="tool",
               key_env="ANTHROPIC_API_KEY"),
        # DeepSeek and Kimi document JSON mode (json_object) but not json_schema.
        Preset(name="deepseek", provider="openai_compatible",
               base_url="https://api.deepseek.com/v1", default_model="deepseek-chat",
               output_mode="json_object", key_env="DEEPSEEK_API_KEY"),
        Preset(name="kimi", provider="openai_compatible", base_url="https://api.moonshot.ai/v1",
               default_model="kimi-k2-0905-preview", output_mode="json_object",
               key_env="MOONSHOT_API_KEY"),
        Preset(name="gemini", provider="openai_compatible",
               base_url="https://generativelanguage.googleapis.com/v1beta/openai/",
               default_model="gemini-2.5-flash", output_mode="json_schema",
               key_env="GEMINI_API_KEY"),
        # Local servers: no key, free, grammar-constrained decoding of a JSON schema.
        Preset(name="vllm", provider="openai_compatible", base_url="http://localhost:8000/v1",
               default_model="Qwen/Qwen2.5-7B-Instruct", output_mode="json_schema",
               requires_key=False, local=True),
        Preset(name="ollama", provider="openai_compatible",
               base_url="http://localhost:11434/v1", default_model="qwen2.5:7b",
               output_mode="json_schema", requires_key=False, local=True),
        Preset(name="llamacpp", provider="openai_compatible",
               base_url="http://localhost:8080/v1", default_model="local-model",
               output_mode="json_schema", requires_key=False, local=True),
    ]
}
PRESETS["llama.cpp"] = PRESETS["llama_cpp"] = PRESETS["llamacpp"]


class ResolvedEndpoint(BaseModel):
    """A judge config with the preset's defaults filled in."""

    provider: str
    preset: str | None
    base_url: str
    model: str
    output_mode: OutputMode
    key_env: str | None
    requires_key: bool
    tokens_param: TokensParam
    local: bool


def preset_for(config: JudgeConfig) -> Preset | None:
    if config.preset:
        try:
            return PRESETS[config.preset.lower()]
        except KeyError:
            known = ", ".join(sorted(PRESETS))
            raise ValueError(
                f"judge {config.name!r}: unknown preset {config.preset!r} (known: {known})"
            ) from None
    if config.provider in ("openai", "anthropic"):
        return PRESETS[config.provider]
    return None


def resolve_endpoint(config: JudgeConfig) -> ResolvedEndpoint:
    """Merge the judges-file entry over its preset; explicit fields always win."""
    if config.provider == "heuristic":
        raise ValueError("the heuristic judge has no endpoint")
    preset = preset_for(config)
    if preset is not None and preset.provider == "anthropic" and config.provider != "anthropic":
        raise ValueError(f"judge {config.name!r}: preset {preset.name!r} needs provider anthropic")
    # "heuristic-v1" is JudgeConfig's default: an LLM judge that leaves model out gets the
    # preset's model instead.
    model_set = "model" in config.model_fields_set and config.model != "heuristic-v1"
    base_url = config.base_url or (preset.base_url if preset else None)
    if not base_url:
        raise ValueError(
            f"judge {config.name!r}: provider openai_compatible needs base_url or a preset"
        )
    model = config.model if model_set or preset is None else preset.default_model
    # A custom base_url with no key variable is taken for a local server.
    requires_key = preset.requires_key if preset else bool(config.api_key_env)
    output_mode: OutputMode
    if config.provider == "anthropic":
        output_mode = "tool"
    else:
        output_mode = preset.output_mode if preset else "json_schema"
    return ResolvedEndpoint(
        provider=config.provider,
        preset=preset.name if preset else None,
        base_url=base_url,
        model=model,
        output_mode=output_mode,
        key_env=config.api_key_env or (preset.key_env if preset else None),
        requires_key=requires_key or bool(config.api_key_env),
        tokens_param=preset.tokens_param if preset else "max_tokens",
        local=preset.local if preset else False,
    )


# Reasoning models reject a temperature other than the default, so none is sent.
_NO_TEMPERATURE_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def sends_temperature(config: JudgeConfig, endpoint: ResolvedEndpoint) -> bool:
    if endpoint.provider == "anthropic":
        return False  # the installed SDK's messages.create has no temperature parameter
    return not (endpoint.provider == "openai"
                and endpoint.model.startswith(_NO_TEMPERATURE_PREFIXES))


def call_identity(config: JudgeConfig) -> dict[str, object]:
    """Everything besides prompt and schema that shapes a judge's answer: the cache key's
    judge part. Computable without a key or a client, so a dry run can consult the cache."""
    endpoint = resolve_endpoint(config)
    return {
        "provider": endpoint.provider,
        "base_url": endpoint.base_url.rstrip("/"),
        "model": endpoint.model,
        "temperature": config.temperature if sends_temperature(config, endpoint) else None,
        "max_tokens": config.max_tokens,
        "output_mode": endpoint.output_mode,
    }


def effective_model(config: JudgeConfig) -> str:
    """The model a judge really calls (a preset fills it in when the file leaves it out)."""
    return config.model if config.provider == "heuristic" else resolve_endpoint(config).model
