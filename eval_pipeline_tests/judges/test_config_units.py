"""Presets, prices, schema and resource plumbing: the pieces behind the integration tests."""

from __future__ import annotations

import pytest

from eval_pipeline.defs.pipeline.resources import judge_resources
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import InvalidOutput
from eval_pipeline.judges.presets import effective_model, resolve_endpoint
from eval_pipeline.judges.pricing import default_price, price_for
from eval_pipeline.judges.reply import canonical_reply, validate_reply
from eval_pipeline.judges.retry import RetryPolicy
from eval_pipeline.judges.schema import (
    parse_reply_text,
    schema_version,
    snap_to_rail,
    wire_schema,
)

METRICS = ["a_metric", "b_metric"]
LABELS = ["correct", "incorrect"]


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


def _read(text: str, metrics=METRICS, labels=()) -> dict[str, float]:
    return validate_reply(parse_reply_text(text, labels), metrics, labels)


@pytest.mark.parametrize("text,fragment", [
    ("", "empty"),
    ("nope", "not JSON"),
    ("[1, 2]", "not JSON"),
    ('{"scores": {"a_metric": 0.5}, "summary": "", "reasoning": ""}', "b_metric"),
    ('{"scores": {"a_metric": 0.5, "b_metric": "high"}}', "b_metric"),
    ('{"scores": {"a_metric": 0.5, "b_metric": true}, "summary": "", "reasoning": ""}',
     "b_metric"),
    ('{"scores": {"a_metric": -0.1, "b_metric": 0.5}, "summary": "", "reasoning": ""}',
     "-0.1"),
    ('{"scores": {"a_metric": 285, "b_metric": 0.5}}', r"out of range \[0, 1\]: 285"),
    ('{"scores": {"a_metric": "NaN", "b_metric": 0.5}}', "out of range"),
    ('{"scores": {"a_metric": 0.5, "A Metric": 0.7, "b_metric": 0.5}}', "given twice"),
])
def test_parse_rejects_what_it_must(text, fragment):
    with pytest.raises(InvalidOutput, match=fragment):
        _read(text)


@pytest.mark.parametrize("text", [
    '{"scores": {"a_metric": 0.5, "b_metric": 0.25}, "summary": "s", "reasoning": "r"}',
    # numbers as strings, metric names in any case or spacing, keys in any case
    '{"Scores": {"A Metric": "0.5", "B-METRIC": " 0.25 "}, "Summary": "s"}',
    # prose around the JSON, a fenced block, flattened scores, a wrapper object
    'Here you go:\n{"scores": {"a_metric": 0.5, "b_metric": 0.25}}\nThanks!',
    'Sure.\n```json\n{"scores": {"a_metric": 0.5, "b_metric": 0.25}}\n```',
    '{"a_metric": 0.5, "b_metric": 0.25, "summary": "s", "reasoning": "r"}',
    '{"clip_evaluation": {"scores": {"a_metric": 0.5, "b_metric": 0.25}}}',
    # extra keys (an overall score, a confidence) are ignored
    '{"scores": {"a_metric": 0.5, "b_metric": 0.25, "overall": 7}, "confidence": "high"}',
])
def test_parse_accepts_what_real_models_send(text):
    assert _read(text) == {"a_metric": 0.5, "b_metric": 0.25}


@pytest.mark.parametrize("text,label", [
    ('{"explanation": "fits", "label": "correct"}', "correct"),
    ('{"explanation": "fits", "label": "Incorrect", "scores": {"t2t": 0.74}}', "incorrect"),
    ("EXPLANATION: the tool fits the thought.\n\nLABEL: \"correct\"", "correct"),
    ("The call is wrong.\n**LABEL:** incorrect", "incorrect"),
    ("incorrect", "incorrect"),
    ('Analysis first.\n```json\n{"label": "CORRECT"}\n```', "correct"),
])
def test_react_replies_parse_from_json_or_the_label_line(text, label):
    reply = canonical_reply(parse_reply_text(text, LABELS), ["t2t"], LABELS)
    assert reply.label == label
    assert reply.scores == {"t2t": 1.0 if label == "correct" else 0.0}


@pytest.mark.parametrize("text,rails,label", [
    # Phoenix's own cases for its snap_to_rail, which the seed's llm_classify applies
    ("irrelevant", ["relevant", "irrelevant"], "irrelevant"),
    ("...irrelevant", ["irrelevant", "relevant"], "irrelevant"),
    ("relevant...irrelevant", ["irrelevant", "relevant"], None),
    ("Irrelevant", ["relevant", "irrelevant"], "irrelevant"),
    ("relevant...relevant", ["irrelevant", "relevant"], "relevant"),
    (" abc", ["a", "ab", "abc"], "abc"),
    ("nothing here", ["correct", "incorrect"], None),
])
def test_snap_to_rail_reads_the_one_label_a_text_names(text, rails, label):
    assert snap_to_rail(text, rails) == label


@pytest.mark.parametrize("text,label", [
    # prose cut off by max_tokens, naming one label: read as Phoenix reads it
    ("The agent wants the population, and a search is the correct tool for that, so the "
     "choice is correct because the query", "correct"),
    ("LABEL: the choice is Incorrect.", "incorrect"),
])
def test_prose_naming_one_label_is_read_as_that_label(text, label):
    assert canonical_reply(parse_reply_text(text, LABELS), ["t2t"], LABELS).label == label


def test_prose_naming_both_labels_or_none_is_no_answer():
    for text in ("It could be correct or incorrect; hard to say.", "I think it is fine."):
        with pytest.raises(InvalidOutput, match="neither a JSON object nor"):
            parse_reply_text(text, LABELS)


def test_the_label_line_keeps_the_explanation():
    reply = parse_reply_text("EXPLANATION: it searched first.\nLABEL: correct", LABELS)
    assert reply.reasoning == "it searched first." and reply.label == "correct"
    with pytest.raises(InvalidOutput, match="neither a JSON object nor a 'LABEL: correct'"):
        parse_reply_text("I think it is fine.", LABELS)


def test_wire_schema_bounds_and_steps():
    bounded = wire_schema(METRICS)["properties"]["scores"]["properties"]["a_metric"]
    assert (bounded["minimum"], bounded["maximum"]) == (0.0, 1.0)
    plain = wire_schema(METRICS, bounds=False)["properties"]["scores"]["properties"]
    assert "minimum" not in plain["a_metric"]
    stepped = wire_schema(METRICS, bounds=False, steps=4)["properties"]["scores"]
    assert stepped["properties"]["b_metric"]["enum"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    # the cache's schema version does not depend on a host's bounds
    assert schema_version(METRICS) == schema_version(METRICS)


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
