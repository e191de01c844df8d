"""Provider presets: what a judge needs to know about an endpoint beyond its URL.

A preset fills what the judges file leaves out (base URL, default model, key variable) and
records what the endpoint can do, so the adapter asks for the strongest structured output
that endpoint supports instead of the weakest common denominator.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from eval_pipeline.judges.config import JudgeConfig, OutputMode

TokensParam = Literal["max_tokens", "max_completion_tokens"]

# The reply modes each provider family can be asked for (JudgeConfig.output_mode).
MODES_BY_PROVIDER: dict[str, tuple[str, ...]] = {
    "openai": ("json_schema", "json_object", "tool", "text"),
    "openai_compatible": ("json_schema", "json_object", "tool", "text"),
    "anthropic": ("tool", "text"),
}

# Vertex AI's OpenAI-compatible Chat Completions endpoint; ``global`` has no region prefix.
VERTEX_URL = "https://{host}/v1/projects/{project}/locations/{location}/endpoints/openapi"


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
    # minimum/maximum on the scores in the wire schema. Anthropic's strict tools refuse
    # numeric bounds ("property 'minimum' is not supported"); the range is then checked on
    # the way back only.
    schema_bounds: bool = True
    # llama.cpp's JSON-schema-to-grammar converter honours minimum/maximum only for integers,
    # so a "number" score is unbounded under its grammar (a small model answered 285). With
    # steps, each score is an enum of steps+1 evenly spaced values in [0, 1], which a grammar
    # does enforce.
    score_steps: int | None = None
    # maxLength on the free-text fields. Grammar engines (llama.cpp, Ollama, vLLM) enforce it,
    # so a runaway explanation ends inside the token budget instead of being cut off mid-JSON
    # (SmolLM2 repeated one sentence until max_tokens). Hosted strict modes do not list the
    # keyword, so only the local presets send it.
    text_max_chars: int | None = None
    vertex: bool = False  # base_url is VERTEX_URL, filled from project and location


LOCAL_TEXT_MAX_CHARS = 2000

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(name="openai", provider="openai", base_url="https://api.openai.com/v1",
               default_model="gpt-4.1-mini", output_mode="json_schema",
               key_env="OPENAI_API_KEY", tokens_param="max_completion_tokens"),
        Preset(name="anthropic", provider="anthropic", base_url="https://api.anthropic.com",
               default_model="claude-sonnet-4-5", output_mode="tool",
               key_env="ANTHROPIC_API_KEY", schema_bounds=False),
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
        # Vertex AI takes an OAuth access token (``gcloud auth print-access-token``, valid
        # about an hour), not an API key.
        Preset(name="vertex", provider="openai_compatible", base_url=VERTEX_URL,
               default_model="google/gemini-2.5-flash", output_mode="json_schema",
               key_env="GOOGLE_VERTEX_TOKEN", vertex=True),
        # Local servers: no key, free, grammar-constrained decoding of a JSON schema.
        Preset(name="vllm", provider="openai_compatible", base_url="http://localhost:8000/v1",
               default_model="Qwen/Qwen2.5-7B-Instruct", output_mode="json_schema",
               requires_key=False, local=True, text_max_chars=LOCAL_TEXT_MAX_CHARS),
        Preset(name="ollama", provider="openai_compatible",
               base_url="http://localhost:11434/v1", default_model="qwen2.5:7b",
               output_mode="json_schema", requires_key=False, local=True,
               text_max_chars=LOCAL_TEXT_MAX_CHARS),
        Preset(name="llamacpp", provider="openai_compatible",
               base_url="http://localhost:8080/v1", default_model="local-model",
               output_mode="json_schema", requires_key=False, local=True, score_steps=20,
               text_max_chars=LOCAL_TEXT_MAX_CHARS),
    ]
}
PRESETS["llama.cpp"] = PRESETS["llama_cpp"] = PRESETS["llamacpp"]
PRESETS["vertex_ai"] = PRESETS["vertexai"] = PRESETS["vertex"]


class ResolvedEndpoint(BaseModel):
    """A judge config with the preset's defaults filled in."""

    provider: str
    preset: str | None
    base_url: str
    model: str
    output_mode: OutputMode
    output_mode_forced: bool  # set in the judges file: never fall back from it
    key_env: str | None
    requires_key: bool
    tokens_param: TokensParam
    local: bool
    schema_bounds: bool
    score_steps: int | None
    text_max_chars: int | None


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


def _vertex_url(config: JudgeConfig) -> str:
    if not config.project:
        raise ValueError(f"judge {config.name!r}: preset vertex needs project (the Google "
                         "Cloud project id) and location (default us-central1)")
    location = config.location or "us-central1"
    host = ("aiplatform.googleapis.com" if location == "global"
            else f"{location}-aiplatform.googleapis.com")
    return VERTEX_URL.format(host=host, project=config.project, location=location)


def _output_mode(config: JudgeConfig, preset: Preset | None) -> OutputMode:
    allowed = MODES_BY_PROVIDER[config.provider]
    if config.output_mode is not None:
        if config.output_mode not in allowed:
            raise ValueError(f"judge {config.name!r}: provider {config.provider} has no "
                             f"output_mode {config.output_mode!r} (it has: {', '.join(allowed)})")
        return config.output_mode
    if config.provider == "anthropic":
        return "tool"
    return preset.output_mode if preset else "json_schema"


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
    preset_url = (_vertex_url(config) if preset is not None and preset.vertex and
                  not config.base_url else preset.base_url if preset else None)
    base_url = config.base_url or preset_url
    if not base_url:
        raise ValueError(
            f"judge {config.name!r}: provider openai_compatible needs base_url or a preset"
        )
    model = config.model if model_set or preset is None else preset.default_model
    # A custom base_url with no key variable is taken for a local server.
    requires_key = preset.requires_key if preset else bool(config.api_key_env)
    bounds = preset.schema_bounds if preset else True
    return ResolvedEndpoint(
        provider=config.provider,
        preset=preset.name if preset else None,
        base_url=base_url,
        model=model,
        output_mode=_output_mode(config, preset),
        output_mode_forced=config.output_mode is not None,
        key_env=config.api_key_env or (preset.key_env if preset else None),
        requires_key=requires_key or bool(config.api_key_env),
        tokens_param=preset.tokens_param if preset else "max_tokens",
        local=preset.local if preset else False,
        schema_bounds=bounds if config.schema_bounds is None else config.schema_bounds,
        score_steps=config.score_steps or (preset.score_steps if preset else None),
        text_max_chars=config.text_max_chars or (preset.text_max_chars if preset else None),
    )


def key_env(config: JudgeConfig) -> str | None:
    """The environment variable the judge's key is read from (None: it needs none).

    The one place that knows the preset defaults, so the CLI's key check and the Dagster
    resource's ``EnvVar`` bind the same variable the judge asks for.
    """
    if config.provider == "heuristic":
        return None
    if config.api_key_env:
        return config.api_key_env
    preset = preset_for(config)
    return preset.key_env if preset is not None and preset.requires_key else None


# Reasoning models reject a temperature other than the default, so none is sent.
_NO_TEMPERATURE_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def sends_temperature(config: JudgeConfig, endpoint: ResolvedEndpoint) -> bool:
    if endpoint.provider == "anthropic":
        # The installed SDK's messages.create has no temperature parameter, and Anthropic's
        # own API is left its default. An Anthropic-compatible server (llama.cpp's
        # /v1/messages) takes it in the body, and without it samples at its own default
        # (0.8 for llama.cpp), far from the judge's configured temperature.
        host = urlsplit(endpoint.base_url).hostname or ""
        return not (host == "anthropic.com" or host.endswith(".anthropic.com"))
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
