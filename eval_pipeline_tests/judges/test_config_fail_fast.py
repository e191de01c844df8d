"""Bad configuration fails fast (#10.7) and a key written in a judges file is refused
(#10.4): one line on stderr naming the judge and the field, exit 1, before the input is
split into batches; with ``--check-judges`` (and always in the UI's resource setup) an
unreachable base_url or a refused key is found by one 1-token request."""

from __future__ import annotations

import socket
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline.judges.check import JudgeCheckError, check_judge, check_judge_once
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer, status
from eval_pipeline_tests.judges.helpers import openai_config

KEY = "sk-failfast-OPENAI-7d6c5b4a3f2e1d0c"
ANT_KEY = "sk-ant-failfast-1a2b3c4d5e6f7a8b"
GPT = "  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"


@pytest.fixture(autouse=True)
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FF_OPENAI_KEY", KEY)
    monkeypatch.setenv("FF_ANTHROPIC_KEY", ANT_KEY)
    return home


@pytest.fixture
def sample(project_root: Path, tmp_path: Path) -> Path:
    full = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    if not full.is_file():
        pytest.skip("sample drop not present")
    small = tmp_path / "in" / "three_runs.jsonl"
    small.parent.mkdir()
    small.write_text("".join(full.read_text("utf-8").splitlines(keepends=True)[:3]), "utf-8")
    return small


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(tmp_path: Path, sample: Path, judges_yaml: str, capsys: pytest.CaptureFixture[str],
         *extra: str) -> tuple[int, list[str], str]:
    """The CLI on ``sample`` with this judges file: exit code, stderr lines, stdout."""
    judges = tmp_path / "judges.yaml"
    judges.write_text(judges_yaml, "utf-8")
    code = main(["run", str(sample), "--output", str(tmp_path / "out"), "--judges",
                 str(judges), *extra])
    printed = capsys.readouterr()
    return code, [line for line in printed.err.splitlines() if line.strip()], printed.out


def _nothing_ran(tmp_path: Path, store: Path, dagster_home: Path) -> None:
    """No batch was split, no run recorded, no output written."""
    assert not (store / "batches").exists()
    assert not (tmp_path / "out").exists()
    if dagster_home.exists():
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            assert instance.get_runs() == []


@pytest.mark.parametrize("entry, expected", [
    ("    provider: opena\n",
     "judge 'bad', field provider: unknown provider 'opena' (known: anthropic, heuristic, "
     "openai, openai_compatible)"),
    ("    provider: openai\n    concurency: 8\n",
     "judge 'bad', field concurency: unknown field (did you mean concurrency?)"),
    ("    provider: openai\n    concurrency: many\n",
     "judge 'bad', field concurrency: must be a whole number, got 'many'"),
    ("    provider: openai\n    concurrency: yes\n",  # YAML's true is not a number
     "judge 'bad', field concurrency: must be a whole number, got True"),
    ("    provider: openai\n    temperature: [0.1]\n", "judge 'bad', field temperature:"),
    ("    provider: openai\n    concurrency: 0\n",
     "judge 'bad', field concurrency: must be at least 1, got 0"),
    ("    provider: openai\n    requests_per_minute: 0\n",
     "judge 'bad', field requests_per_minute: must be more than 0"),
    ("    provider: openai\n    tokens_per_minute: -100\n",
     "judge 'bad', field tokens_per_minute: must be more than 0"),
    ("    provider: openai\n    max_tokens: 0\n",
     "judge 'bad', field max_tokens: must be at least 1"),
    ("    provider: openai\n    timeout_s: 0\n",
     "judge 'bad', field timeout_s: must be more than 0"),
    ("    provider: openai\n    budget_usd: -5\n",
     "judge 'bad', field budget_usd: must be more than 0"),
    ("    provider: openai\n    max_retries: -1\n",
     "judge 'bad', field max_retries: must be at least 0, got -1"),
    ("    provider: openai\n    input_max_chars: 10\n",
     "judge 'bad', field input_max_chars: must be at least 2500"),
    ("    provider: openai\n    concurrency: 2\n    concurrency: 4\n",
     "field 'concurrency' is given twice"),
    ("    provider: openai_compatible\n    preset: nope\n", "judge 'bad': unknown preset 'nope'"),
    ("    provider: openai_compatible\n    model: m\n",
     "judge 'bad': provider openai_compatible needs base_url or a preset"),
    ("    provider: openai_compatible\n    base_url: localhost:8000\n",
     "judge 'bad', field base_url: must be an http:// or https:// URL"),
    ("    provider: openai_compatible\n    base_url: http://h/v1\n    model: m\n"
     "    budget_usd: 2\n", "judge 'bad', field budget_usd: model 'm' has no known price"),
    ("    provider: openai\n    evaluations: [clip_rubric, vibes]\n",
     "judge 'bad', field evaluations: unknown evaluation kinds ['vibes']"),
])
def test_an_invalid_judge_fails_in_one_line_naming_judge_and_field(
        entry, expected, tmp_path, sample, capsys, isolated_store, dagster_home):
    judges = f"judges:\n{GPT}    api_key_env: FF_OPENAI_KEY\n  - name: bad\n{entry}"
    code, err, out = _run(tmp_path, sample, judges, capsys)
    assert code == 1
    assert len(err) == 1, err
    assert err[0].startswith("eval-pipeline: error: invalid judges file ")
    assert expected in err[0]
    assert "Traceback" not in err[0] and "pydantic" not in err[0] and "http" not in \
        err[0].replace("http://", "").replace("https://", "")
    assert out == ""
    _nothing_ran(tmp_path, isolated_store, dagster_home)


@pytest.mark.parametrize("judges, expected", [
    (f"judges:\n{GPT}{GPT}", "judge 'gpt', field name: 2 judges have this name"),
    ("judges:\n  - name: Bad Name\n", "judge #1, field name: judge name 'Bad Name' must match"),
    ("judges:\n  - provider: openai\n", "judge #1, field name: required"),
    ("judges: gpt\n", "field judges: must be a list"),
    ("judges: []\n", "field judges:"),
    ("", "the file is empty"),
    ("judges:\n  - name: a\n   provider: x\n", "not valid YAML at line 3"),
])
def test_an_invalid_judges_file_fails_in_one_line(judges, expected, tmp_path, sample, capsys,
                                                   isolated_store, dagster_home):
    code, err, _ = _run(tmp_path, sample, judges, capsys)
    assert code == 1 and len(err) == 1 and expected in err[0], err
    _nothing_ran(tmp_path, isolated_store, dagster_home)


SECRET_VALUE = "sk-proj-INLINE0key9never8printed7"


@pytest.mark.parametrize("entry, field", [
    (f"    api_key: {SECRET_VALUE}\n", "api_key"),
    (f"    token: {SECRET_VALUE}\n", "token"),
    (f"    openai_key: '{SECRET_VALUE}'\n", "openai_key"),
    (f"    api_key_env: {SECRET_VALUE}\n", "api_key_env"),  # the key where its name goes
    (f"    model: {SECRET_VALUE}\n", "model"),  # a key-shaped value in any field
    ("    model: 3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a\n", "model"),  # a bare hex token
    (f"    base_url: https://user:{SECRET_VALUE}@api.example.com/v1\n", "base_url"),
    (f"    base_url: https://api.example.com/v1?key={SECRET_VALUE}\n", "base_url"),
])
def test_a_key_written_in_the_judges_file_is_refused_without_printing_it(
        entry, field, tmp_path, sample, capsys, isolated_store, dagster_home):
    judges = f"judges:\n  - name: gpt\n    provider: openai\n{entry}"
    code, err, out = _run(tmp_path, sample, judges, capsys)
    assert code == 1 and len(err) == 1, err
    assert f"judge 'gpt', field {field}:" in err[0]
    assert "not shown" in err[0] and ("api_key_env" in err[0])
    printed = "\n".join(err) + out
    for part in (SECRET_VALUE, "INLINE0key9never8printed7", "3f9a8b7c6d5e4f3a2b1c"):
        assert part not in printed
    _nothing_ran(tmp_path, isolated_store, dagster_home)


def test_a_missing_key_variable_is_named_before_the_endpoint_is_tried(
        openai_server, tmp_path, sample, capsys, monkeypatch, isolated_store, dagster_home):
    monkeypatch.delenv("FF_UNSET_KEY", raising=False)
    judges = (f"judges:\n{GPT}    base_url: {openai_server.base_url}\n"
              "    api_key_env: FF_UNSET_KEY\n")
    code, err, _ = _run(tmp_path, sample, judges, capsys, "--check-judges")
    assert code == 1 and len(err) == 1 and "FF_UNSET_KEY" in err[0] and "'gpt'" in err[0]
    assert openai_server.calls == 0
    _nothing_ran(tmp_path, isolated_store, dagster_home)


def _both(openai_url: str, anthropic_url: str) -> str:
    return (f"judges:\n{GPT}    base_url: {openai_url}\n    api_key_env: FF_OPENAI_KEY\n"
            f"  - name: claude\n    provider: anthropic\n    base_url: {anthropic_url}\n"
            "    api_key_env: FF_ANTHROPIC_KEY\n")


def test_check_judges_sends_one_token_request_per_llm_judge_and_goes_on(
        openai_server, anthropic_server, tmp_path, sample, capsys, isolated_store,
        dagster_home):
    # --dry-run after the check: nothing else is sent, so the servers saw only the check.
    judges = _both(openai_server.base_url, anthropic_server.base_url) + \
        "  - name: rules\n    provider: heuristic\n"
    code, err, out = _run(tmp_path, sample, judges, capsys, "--check-judges", "--dry-run")
    assert code == 0, err
    assert "gpt" in out and "claude" in out  # the dry run's table followed
    assert openai_server.calls == 1 and anthropic_server.calls == 1
    sent = openai_server.requests[0]
    assert sent.path == "/v1/chat/completions" and sent.body["max_completion_tokens"] == 1
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    sent = anthropic_server.requests[0]
    assert sent.path == "/v1/messages" and sent.body["max_tokens"] == 1
    assert ANT_KEY in sent.headers.get("authorization", "") + sent.headers.get("x-api-key", "")
    assert not (isolated_store / "batches").exists()


def test_without_check_judges_a_dry_run_calls_nothing(tmp_path, sample, capsys):
    closed = f"http://127.0.0.1:{_closed_port()}"
    code, _, _ = _run(tmp_path, sample, _both(f"{closed}/v1", closed), capsys, "--dry-run")
    assert code == 0


def test_a_server_error_other_than_a_refusal_passes_the_check(openai_server):
    openai_server.push(status(500))
    check_judge(openai_config(openai_server), KEY)  # there, and took the key
    openai_server.push(status(429, headers={"retry-after": "1"}))
    check_judge(openai_config(openai_server), KEY)
    assert openai_server.calls == 2


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("code, words", [(401, "refused the key from"),
                                         (403, "refused the key"),
                                         (404, "answered 404 Not Found")])
def test_a_refused_key_fails_in_one_line_without_the_key(
        kind, code, words, tmp_path, sample, capsys, isolated_store, dagster_home):
    server = FakeLLMServer(kind).start()
    other = FakeLLMServer("anthropic" if kind == "openai" else "openai").start()
    try:
        server.push(status(code, echo_key=True))  # the error body quotes the key back
        urls = ((server.base_url, other.base_url) if kind == "openai"
                else (other.base_url, server.base_url))
        result, err, out = _run(tmp_path, sample, _both(*urls), capsys, "--check-judges")
        name = "gpt" if kind == "openai" else "claude"
        assert result == 1 and len(err) == 1, err
        assert err[0].startswith(f"eval-pipeline: error: judge '{name}': {server.base_url} ")
        assert words in err[0]
        if code == 401:
            assert ("FF_OPENAI_KEY" if kind == "openai" else "FF_ANTHROPIC_KEY") in err[0]
        assert KEY not in err[0] + out and ANT_KEY not in err[0] + out
        assert server.calls == 1  # one cheap request, not a batch of judgments
        _nothing_ran(tmp_path, isolated_store, dagster_home)
    finally:
        server.stop()
        other.stop()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_unreachable_base_url_fails_in_one_line(kind, openai_server, anthropic_server,
                                                   tmp_path, sample, capsys, isolated_store,
                                                   dagster_home):
    closed = f"http://127.0.0.1:{_closed_port()}" + ("/v1" if kind == "openai" else "")
    urls = ((closed, anthropic_server.base_url) if kind == "openai"
            else (openai_server.base_url, closed))
    code, err, out = _run(tmp_path, sample, _both(*urls), capsys, "--check-judges")
    name = "gpt" if kind == "openai" else "claude"
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"eval-pipeline: error: judge '{name}': cannot reach {closed}: ")
    assert KEY not in err[0] + out and ANT_KEY not in err[0] + out
    _nothing_ran(tmp_path, isolated_store, dagster_home)


def test_a_passed_check_is_not_repeated_in_the_process_a_failed_one_is(openai_server):
    config = openai_config(openai_server, name="once")
    check_judge_once(config, KEY)
    check_judge_once(config, KEY)
    assert openai_server.calls == 1
    other = openai_config(openai_server, name="refused")
    openai_server.push(status(401))
    with pytest.raises(JudgeCheckError, match="refused the key"):
        check_judge_once(other, KEY)
    check_judge_once(other, KEY)  # the server takes it now: checked again, and passes
    assert openai_server.calls == 3


@pytest.mark.slow
def test_check_judges_then_the_whole_run(openai_server, tmp_path, sample, capsys):
    judges = f"judges:\n{GPT}    base_url: {openai_server.base_url}\n" \
        "    api_key_env: FF_OPENAI_KEY\n    evaluations: [clip_rubric]\n"
    code, err, _ = _run(tmp_path, sample, judges, capsys, "--check-judges")
    assert code == 0, err
    rows = pd.read_parquet(tmp_path / "out" / "judgments__gpt.parquet")
    assert (rows["status"] == "ok").all()
    # the check first, then one request per judgment
    assert openai_server.calls == 1 + len(rows)
    assert openai_server.requests[0].body["max_completion_tokens"] == 1


@pytest.mark.slow
def test_the_ui_location_fails_a_run_at_the_judge_step_in_one_line(
        tmp_path, sample, capsys, monkeypatch):
    """A run launched from the UI's code location with a refused key fails when the judge
    resource is set up, with the check's line; no judgment is written, where the run would
    otherwise have materialized a table of failed rows (and succeeded)."""
    from eval_pipeline.definitions import defs
    from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION

    # The CLI (heuristic judge) splits and registers the batch the UI will run.
    assert main(["run", str(sample), "--output", str(tmp_path / "cli")]) == 0
    server = FakeLLMServer("openai").start()
    try:
        judges = tmp_path / "ui_judges.yaml"
        judges.write_text(f"judges:\n{GPT}    base_url: {server.base_url}\n"
                          "    api_key_env: FF_OPENAI_KEY\n", "utf-8")
        monkeypatch.setenv("EVAL_PIPELINE_JUDGES", str(judges))
        server.push(status(401, echo_key=True))
        location = defs()
        with dg.DagsterInstance.get() as instance:
            batch = instance.get_dynamic_partitions(BATCHES_PARTITION)[0]
            result = location.resolve_job_def("evaluate_batch").execute_in_process(
                instance=instance, partition_key=batch, raise_on_error=False)
            judged = instance.get_latest_materialization_event(
                dg.AssetKey(["judgments", "gpt"]))
        assert not result.success
        # In process the run sets up its resources first, so it stops before any step
        # (under the UI's multiprocess executor: when the judgments step starts).
        assert not [e for e in result.all_events if e.is_step_start]
        failed = [e for e in result.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE"]
        assert len(failed) == 1
        text = failed[0].event_specific_data.error.to_string()
        assert f"judge 'gpt': {server.base_url} refused the key from FF_OPENAI_KEY" in text
        assert KEY not in text
        assert judged is None
        assert server.calls == 1
    finally:
        server.stop()


def test_a_key_used_as_a_judge_name_is_not_printed_either(tmp_path, sample, capsys):
    token = "a1b2c3d4e5f6a7b8c9d0a1b2c3d4e5f6a7"  # a valid asset name, shaped like a key
    code, err, out = _run(tmp_path, sample,
                          f"judges:\n  - name: {token}\n    provider: openai\n", capsys)
    assert code == 1 and len(err) == 1 and "judge #1, field name:" in err[0]
    assert token not in err[0] + out
