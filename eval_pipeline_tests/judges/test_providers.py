"""Happy paths through the real SDKs: what is sent, what comes back, one row per clip."""

from __future__ import annotations

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.presets import call_identity, resolve_endpoint, sends_temperature
from eval_pipeline.judges.runner import summarize_rows
from eval_pipeline.rubrics import rubric_for
from eval_pipeline_tests.judges.conftest import SECRET
from eval_pipeline_tests.judges.helpers import (
    anthropic_config,
    openai_config,
    run,
    scores_of,
)


def test_openai_happy_path_structured_output(openai_server, tasks):
    rows = run(openai_config(openai_server), tasks)

    assert openai_server.calls == len(tasks) == len(rows)
    assert all(r.status == "ok" and r.success and not r.cached for r in rows)
    for row in rows:
        assert set(scores_of(row)) == set(rubric_for(row.tool_type).metric_names)
        assert all(v == 0.8 for v in scores_of(row).values())
        assert row.tokens_in == 1000 and row.tokens_out == 200
    sent = openai_server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    fmt = sent.body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"scores", "summary", "reasoning"}
    assert sent.body["max_completion_tokens"] == 2000
    assert sent.body["messages"][0]["role"] == "system"


def test_context_chain_carries_earlier_summaries(openai_server, tasks):
    rows = run(openai_config(openai_server, concurrency=1), tasks)
    t0 = sorted((r for r in rows if r.trajectory_id == "t0"), key=lambda r: r.clip_index)
    assert t0[0].previous_context == ""
    assert t0[1].previous_context == f"[Previous: {t0[0].summary}]"
    assert t0[2].previous_context.count("[Previous:") == 2


def test_anthropic_happy_path_forced_tool_call(anthropic_server, tasks):
    rows = run(anthropic_config(anthropic_server), tasks)

    assert anthropic_server.calls == len(tasks)
    assert all(r.status == "ok" for r in rows)
    assert {r.provider for r in rows} == {"anthropic"}
    sent = anthropic_server.requests[0]
    assert sent.path == "/v1/messages"
    # anthropic 2.x sends the key as a bearer token (older SDKs used x-api-key)
    assert SECRET in (sent.headers.get("x-api-key", ""), sent.headers.get("authorization", "")
                      .removeprefix("Bearer "))
    assert sent.body["tool_choice"]["type"] == "tool"
    assert sent.body["tool_choice"]["name"] == sent.body["tools"][0]["name"]
    assert sent.body["system"].startswith("You are an expert evaluator")
    metrics = set(sent.body["tools"][0]["input_schema"]["properties"]["scores"]["properties"])
    assert metrics == set(rubric_for(tasks[0].tool_type).metric_names)


def test_two_judges_score_the_same_clips(openai_server, anthropic_server, tasks):
    gpt = run(openai_config(openai_server), tasks)
    claude = run(anthropic_config(anthropic_server), tasks)
    keys = {(r.trajectory_id, r.clip_index) for r in gpt}
    assert keys == {(r.trajectory_id, r.clip_index) for r in claude}
    assert {r.judge for r in gpt} == {"gpt"} and {r.judge for r in claude} == {"claude"}
    assert all(r.status == "ok" for r in gpt + claude)


def test_compatible_preset_json_object_mode_and_no_key_local(openai_server, tasks):
    deepseek = JudgeConfig(name="ds", provider="openai_compatible", preset="deepseek",
                           base_url=openai_server.base_url, api_key_env="DS_KEY")
    rows = run(deepseek, tasks[:1])
    assert rows[0].status == "ok" and rows[0].model == "deepseek-chat"
    sent = openai_server.requests[-1].body
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["max_tokens"] == 2000 and sent["temperature"] == 0.1
    # JSON mode has no schema to enforce the label: the fake reads it from the prompt, and
    # the reply is validated against the same label enum on the way back.
    assert all(r.status == "ok" for r in rows)
    assert {r.evaluation_kind: r.label for r in rows[1:]} == {
        "thought_to_tool": "correct", "sequence_optimality": "optimal",
        "category_assessment": None, "trajectory_assessment": None}

    local = JudgeConfig(name="local", provider="openai_compatible", preset="vllm",
                        base_url=openai_server.base_url, model="qwen")
    rows = run(local, tasks[:1], api_key=None)
    assert rows[0].status == "ok" and rows[0].cost_usd == 0.0
    assert openai_server.requests[-1].body["response_format"]["type"] == "json_schema"
    # Default evaluations: the clip's rubric row, the assessments of its category and of
    # the trajectory, its thought_to_tool row and the trajectory's sequence_optimality row
    # (the clip states no thought: no query_to_thought).
    assert [r.evaluation_kind for r in rows] == [
        "clip_rubric", "category_assessment", "trajectory_assessment", "thought_to_tool",
        "sequence_optimality"]
    summary = summarize_rows(rows)
    assert summary.ok == 5 and summary.calls == 5


def test_anthropic_compatible_servers_get_the_temperature_and_anthropic_does_not(
        anthropic_server, tasks):
    # llama.cpp's /v1/messages samples at 0.8 unless told; the SDK has no parameter for it
    run(anthropic_config(anthropic_server, temperature=0.0), tasks[:1])
    assert anthropic_server.requests[-1].body["temperature"] == 0.0
    hosted = JudgeConfig(name="c", provider="anthropic", model="claude-sonnet-4-5")
    assert not sends_temperature(hosted, resolve_endpoint(hosted))
    assert call_identity(hosted)["temperature"] is None
