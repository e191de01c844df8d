"""Every fault the issue names, injected at the HTTP level and driven through the real SDKs.

Transient faults must end in a valid row after retries; invalid output gets exactly one
repair attempt and then a failed row carrying the error and the raw answer, never a score.
"""

from __future__ import annotations

import pytest

from eval_pipeline.judges.runner import JudgmentRow
from eval_pipeline_tests.judges import fake_servers as fs
from eval_pipeline_tests.judges.conftest import make_tasks
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run

ONE = make_tasks(1, 1)


@pytest.fixture(params=["openai", "anthropic"])
def server(request, openai_server, anthropic_server):
    return openai_server if request.param == "openai" else anthropic_server


def judge_once(server, **overrides) -> JudgmentRow:
    make = openai_config if server.kind == "openai" else anthropic_config
    if server.kind == "anthropic":
        # Anthropic's own API: a forced tool call always comes back as one, so text is an
        # invalid answer here (a server without tool calling is test_reply_modes.py's).
        overrides.setdefault("output_mode", "tool")
    rows = run(make(server, **overrides), ONE, breaker_threshold=99)
    assert len(rows) == 1
    return rows[0]


def assert_unscored_failure(row: JudgmentRow) -> None:
    assert row.status == "failed" and not row.success
    assert row.scores == "{}" and row.summary == ""
    assert row.error


# -- transient faults: retried, then ok --------------------------------------------------

@pytest.mark.parametrize("fault", [
    fs.status(429), fs.status(500), fs.status(503), fs.status(529), fs.RESET,
], ids=["429", "500", "503", "529", "reset"])
def test_transient_fault_is_retried(server, fault):
    server.push(fault, fault)
    row = judge_once(server)
    assert row.status == "ok", row.error
    assert row.attempts == 3 and server.calls == 3


def test_retry_after_is_honoured(server):
    server.push(fs.status(429, {"retry-after": "0.4"}))
    row = judge_once(server)
    assert row.status == "ok" and server.calls == 2
    gap = server.requests[1].at - server.requests[0].at
    assert gap >= 0.39, f"retried after {gap:.3f}s despite Retry-After: 0.4"


def test_retry_after_ms_is_honoured(openai_server):
    openai_server.push(fs.status(429, {"retry-after-ms": "300"}))
    row = judge_once(openai_server)
    assert row.status == "ok"
    assert openai_server.requests[1].at - openai_server.requests[0].at >= 0.29


def test_timeout_is_retried(server):
    server.push(fs.sleep(5.0))
    row = judge_once(server, timeout_s=0.3)
    assert row.status == "ok" and row.attempts == 2
    # Far below the 5 s the server holds the first answer, with room for a loaded machine.
    assert row.latency_s < 4.0, "the slow response must be abandoned at the timeout"


def test_persistent_5xx_fails_the_row_after_max_retries(server):
    server.push(*[fs.status(500)] * 3)
    row = judge_once(server, max_retries=2)
    assert_unscored_failure(row)
    assert "HTTP 500" in row.error and "after 3 attempts" in row.error
    assert server.calls == 3


def test_client_error_is_not_retried(server):
    server.push(fs.status(400))
    row = judge_once(server)
    assert_unscored_failure(row)
    assert "HTTP 400" in row.error and server.calls == 1


# -- invalid output: one repair, then a failed row -----------------------------------------

def _invalid(server, kind: str) -> fs.Act:
    if kind == "not_json":
        return fs.text("Sure! The scores are great.")
    if kind == "out_of_range":
        return fs.scores({"code_correctness": 1.7})
    if kind == "missing_metric":
        return fs.scores(drop_metric=True)
    if kind == "schema":
        return fs.Act(kind="ok", data={"scores": [0.5], "summary": "x", "reasoning": "y"})
    raise AssertionError(kind)


INVALID = ["not_json", "out_of_range", "missing_metric", "schema"]


@pytest.mark.parametrize("kind", INVALID)
def test_invalid_output_is_repaired_once(server, kind):
    server.push(_invalid(server, kind))
    row = judge_once(server)
    assert row.status == "ok" and row.repaired and row.attempts == 2
    repair_prompt = server.requests[1].body["messages"][-1]["content"]
    assert "could not be used" in repair_prompt
    # both calls were billed
    assert row.tokens_in == 2 * server.tokens_in


@pytest.mark.parametrize("kind", INVALID)
def test_invalid_output_twice_is_a_failed_row_with_raw_response(server, kind):
    server.push(_invalid(server, kind), _invalid(server, kind))
    row = judge_once(server)
    assert_unscored_failure(row)
    assert server.calls == 2 and row.attempts == 2
    assert "after one repair attempt" in row.error
    not_json = "not JSON" if server.kind == "openai" else "no clip_evaluation tool call"
    expected = {"not_json": not_json, "out_of_range": "1.7", "missing_metric": "code_correctness",
                "schema": "scores"}[kind]
    assert expected in row.error
    if kind == "not_json":
        assert row.raw_response == "Sure! The scores are great."
    else:
        assert row.raw_response, "the raw answer is kept for inspection"


def test_markdown_fenced_json_is_accepted(openai_server):
    body = '```json\n{"scores": {"code_correctness": 0.5, "computational_efficiency": 0.5, ' \
           '"error_handling": 0.5, "result_interpretation": 0.5}, "summary": "s", ' \
           '"reasoning": "r"}\n```'
    openai_server.push(fs.text(body))
    row = judge_once(openai_server)
    assert row.status == "ok" and not row.repaired
