"""Presets, prices, schema and resource plumbing: the pieces behind the integration tests."""

from __future__ import annotations

import pytest

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import InvalidOutput
from eval_pipeline.judges.presets import effective_model, resolve_endpoint
from eval_pipeline.judges.pricing import default_price, price_for
from eval_pipeline.judges.retry import RetryPolicy
from eval_pipeline.judges.schema import parse_reply_text, wire_schema
from eval_pipeline.resources import judge_resources

METRICS = ["a_metric", "b_metric"]


@pytest.mark.parametrize("preset,base_url,model,mode", [
    ("deepseek", "https://api.deepseek.com/v1", "deepseek-chat", "json_object"),
    ("kimi", "https://api.moonshot.ai/v1", "kimi-k2-0905-preview", "json_object"),
    ("gemini", "https://generativelanguage.googleapis.com/v1beta/openai/",
     "gemini-2.5-flash", "json_schema"),
    ("vllm", "http://localhost:8000/v1", "Qwen/Qwen2.5-7B-Instruct", "json_schema"),
    ("ollama", "http://localhost:11434/v1", "qwen2.5:7b", "json_schema"),
    ("llamacpp", "http://localhost:8080/v1", "local-model", "json_schema"),
])
def test_presets_fill_defaults(preset, base_url, model, mode):
    endpoint = resolve_endpoint(JudgeConfig(name="j", provider="openai_compatible",
                                            preset=preset))
    assert (endpoint.base_url, endpoint.model, endpoint.output_mode) == (base_url, model, mode)


def test_explicit_fields_beat_the_preset():
    config = JudgeConfig(name="j", provider="openai_compatible", preset="vllm",
                         base_url="http://gpu:9000/v1", model="llama")
    assert resolve_endpoint(config).base_url == "http://gpu:9000/v1"
    assert effective_model(config) == "llama"
    assert effective_model(JudgeConfig(name="o", provider="openai")) == "gpt-4.1-mini"


def test_bad_configs_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="unknown preset"):
        resolve_endpoint(JudgeConfig(name="j", provider="openai_compatible", preset="nope"))
    with pytest.raises(ValueError, match="needs base_url"):
        resolve_endpoint(JudgeConfig(name="j", provider="openai_compatible"))
    from eval_pipeline.judges import make_judge

    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        make_judge(JudgeConfig(name="j", provider="openai"), None)


def test_prices():
    assert default_price("gpt-4.1-mini-2025-04-14").input_per_mtok == 0.40
    assert default_price("gpt-4.1").output_per_mtok == 8.0
    assert default_price("claude-sonnet-4-5-20250929").output_per_mtok == 15.0
    assert default_price("unknown") is None
    local = JudgeConfig(name="l", provider="openai_compatible", preset="vllm")
    assert price_for(local, "anything", local=True).cost(10**6, 10**6) == 0.0


def test_wire_schema_is_strict_and_self_contained():
    schema = wire_schema(METRICS)
    assert "$defs" not in str(schema) and "$ref" not in str(schema)
    scores = schema["properties"]["scores"]
    assert scores["additionalProperties"] is False and scores["required"] == METRICS


@pytest.mark.parametrize("text,fragment", [
    ("", "empty"),
    ("nope", "not JSON"),
    ("[1, 2]", "not an object"),
    ('{"scores": {"a_metric": 0.5}, "summary": "", "reasoning": ""}', "b_metric"),
    ('{"scores": {"a_metric": 0.5, "b_metric": "0.5"}, "summary": "", "reasoning": ""}',
     "b_metric"),
    ('{"scores": {"a_metric": 0.5, "b_metric": true}, "summary": "", "reasoning": ""}',
     "b_metric"),
    ('{"scores": {"a_metric": -0.1, "b_metric": 0.5}, "summary": "", "reasoning": ""}',
     "-0.1"),
    ('{"scores": {"a_metric": 0.5, "b_metric": 0.5}, "summary": ""}', "reasoning"),
])
def test_parse_rejects_what_it_must(text, fragment):
    with pytest.raises(InvalidOutput, match=fragment.replace("$", r"\$")):
        parse_reply_text(text, METRICS)


def test_retry_policy_backoff_and_retry_after():
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=5.0, max_retry_after_s=10)
    assert 0.5 <= policy.delay(0, None) <= 1.0
    assert 2.0 <= policy.delay(2, None) <= 4.0
    assert policy.delay(10, None) <= 5.0
    assert policy.delay(0, 3.0) == 3.0
    assert policy.delay(0, 60.0) is None  # too long to wait out: fail the call instead


def test_resources_carry_config_and_envvar():
    configs = [JudgeConfig(name="h"),
               JudgeConfig(name="g", provider="openai", api_key_env="MY_KEY", budget_usd=2)]
    resources = judge_resources(configs)
    assert set(resources) == {"judge_h", "judge_g"}
    assert resources["judge_g"].judge_config() == configs[1]
    assert resources["judge_h"].judge_config() == configs[0]
    assert resources["judge_h"].api_key is None
