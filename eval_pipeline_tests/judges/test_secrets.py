"""The API key reaches the provider and nowhere else: rows, errors, logs, reprs, Dagster."""

from __future__ import annotations

import logging

import dagster as dg
import pytest

from eval_pipeline.defs.pipeline.resources import judge_resources
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.errors import redact
from eval_pipeline_tests.judges import fake_servers as fs
from eval_pipeline_tests.judges.conftest import SECRET, make_tasks
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run


@pytest.fixture(params=["openai", "anthropic"])
def server(request, openai_server, anthropic_server):
    return openai_server if request.param == "openai" else anthropic_server


def _config(server, **kw):
    return (openai_config if server.kind == "openai" else anthropic_config)(server, **kw)


def test_key_is_sent_but_never_lands_in_rows_or_logs(server, caplog):
    caplog.set_level(logging.DEBUG)
    # the server echoes the key in error bodies, as real providers do in masked form
    server.push(fs.status(400, echo_key=True), fs.status(500, echo_key=True),
                fs.text(f"my key is {SECRET}"), fs.text(f"still {SECRET}"))
    mode = {"output_mode": "tool"} if server.kind == "anthropic" else {}
    rows = run(_config(server, concurrency=1, max_retries=0, **mode), make_tasks(1, 4),
               breaker_threshold=99)
    sent = server.requests[0].headers
    assert SECRET in sent.get("authorization", "") + sent.get("x-api-key", "")
    assert [r.status for r in rows] == ["failed", "failed", "failed", "ok"]
    assert any("[REDACTED]" in (r.error or "") for r in rows)
    for row in rows:
        assert SECRET not in row.model_dump_json()
    assert SECRET not in caplog.text


def test_breaker_error_does_not_carry_the_key(server):
    server.push(*[fs.status(401, echo_key=True)] * 3)
    rows = run(_config(server), make_tasks(1, 2))
    assert [r.status for r in rows] == ["failed", "failed"]
    assert "circuit breaker open" in (rows[1].error or "")
    assert all(SECRET not in r.model_dump_json() for r in rows)


def test_judge_repr_hides_the_key(server):
    judge = make_judge(_config(server), SECRET)
    assert SECRET not in repr(judge) and SECRET not in str(judge)


def test_redact_masks_key_shaped_tokens():
    assert "abcd" not in redact("Incorrect API key provided: sk-proj-****abcd")
    assert redact("value XYZ-secret-123 here", ["XYZ-secret-123"]) == "value [REDACTED] here"


def test_dagster_resource_binds_key_from_envvar_and_never_shows_it(openai_server, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("FAKE_OPENAI_KEY", SECRET)
    config = openai_config(openai_server)
    resources = judge_resources([config], cache_path=str(tmp_path / "c.sqlite"),
                                retry_base_s=0.01)
    resource = resources["judge_gpt"]
    assert isinstance(resource.api_key, dg.EnvVar) or SECRET not in repr(resource)

    openai_server.push(fs.status(400, echo_key=True))

    @dg.asset(required_resource_keys={"judge_gpt"})
    async def judged(context):  # unannotated: dagster rejects a string annotation
        rows = await context.resources.judge_gpt.run(make_tasks(1, 2))
        return dg.Output(len(rows), metadata={
            "errors": "\n".join(r.error or "" for r in rows),
            "statuses": ",".join(r.status for r in rows)})

    result = dg.materialize([judged], resources=resources)
    assert result.success
    materialization = result.asset_materializations_for_node("judged")[0]
    assert materialization.metadata["statuses"].value == "failed,ok"
    assert SECRET in openai_server.requests[0].headers["authorization"]
    for event in result.all_events:
        assert SECRET not in str(event)

    # a fatal provider error leaves a failed row with a clear, key-free message (the clip
    # that succeeded before comes from the cache)
    openai_server.push(*[fs.status(401, echo_key=True)] * 3)
    failed = dg.materialize([judged], resources=resources)
    materialization = failed.asset_materializations_for_node("judged")[0]
    assert materialization.metadata["statuses"].value == "failed,ok"
    text = "\n".join(str(e) for e in failed.all_events)
    assert "HTTP 401" in text and SECRET not in text
