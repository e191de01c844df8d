"""Reply modes against servers that answer like real ones (issue 7 item 4, issue 15 items
2 and 3): every mode parses, a server that refuses json_schema or has no tool calling
makes the judge fall back once, and nothing is invented or clipped on the way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from eval_pipeline.judges import PROVIDERS, make_judge
from eval_pipeline.judges.config import JudgeConfig, Provider
from eval_pipeline.judges.heuristic import HeuristicJudge
from eval_pipeline.judges.presets import resolve_endpoint
from eval_pipeline.judges.runner import ClipTask, JudgeRuntime, JudgmentRow, run_judge
from eval_pipeline.rubrics import ALL_EVALUATIONS, REACT_EVALUATIONS
from eval_pipeline_tests.judges import fake_servers as fs
from eval_pipeline_tests.judges.conftest import SECRET, make_tasks
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, scores_of

ALL = list(ALL_EVALUATIONS)
REACT = list(REACT_EVALUATIONS)
# make_tasks' clips state no thought, so they get no query_to_thought row; the category
# and trajectory assessments answer in the rubric's shape, so every mode must read them too
KINDS = ["clip_rubric", "thought_to_tool", "sequence_optimality", "category_assessment",
         "trajectory_assessment"]


def judge_and_rows(config: JudgeConfig, tasks: Sequence[ClipTask], api_key: str | None = SECRET
                   ) -> tuple[Any, list[JudgmentRow]]:
    """Run like the judgments asset does, keeping the judge to read its reply mode."""
    async def go() -> tuple[Any, list[JudgmentRow]]:
        judge = make_judge(config, api_key)
        runtime = JudgeRuntime.from_config(config, retry_base_s=0.01)
        return judge, await run_judge(judge, tasks, config.concurrency, runtime,
                                      evaluations=config.evaluations)

    return asyncio.run(go())


@pytest.fixture
def server(request: pytest.FixtureRequest):
    options = getattr(request, "param", {})
    started = FakeLLMServer(**{"kind": "openai", **options}).start()
    yield started
    started.stop()


def assert_all_ok(rows: list[JudgmentRow], kinds: Sequence[str] = KINDS) -> None:
    assert rows and all(r.status == "ok" for r in rows), [r.error for r in rows]
    assert {r.evaluation_kind for r in rows} == set(kinds)
    for row in rows:
        assert all(0.0 <= v <= 1.0 for v in scores_of(row).values())


# -- every mode parses ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["json_schema", "json_object", "tool", "text"])
def test_every_openai_mode_parses_rubric_and_react_replies(openai_server, mode):
    config = openai_config(openai_server, evaluations=ALL, output_mode=mode)
    judge, rows = judge_and_rows(config, make_tasks(2, 3))
    assert_all_ok(rows)
    assert judge.reply_mode == mode and judge.reply_mode_note is None
    assert {r.label for r in rows if r.evaluation_kind in REACT} == {"correct", "optimal"}
    sent = openai_server.requests[0].body
    user = sent["messages"][-1]["content"]
    if mode == "json_schema":
        assert sent["response_format"]["type"] == "json_schema" and "tools" not in sent
    elif mode == "tool":
        assert "response_format" not in sent
        assert sent["tool_choice"] == {"type": "function",
                                       "function": {"name": "clip_evaluation"}}
        assert sent["tools"][0]["function"]["parameters"]["additionalProperties"] is False
    else:
        # the server does not enforce the schema, so the prompt states it
        assert "It must follow this JSON schema:" in user and "tools" not in sent
        assert sent.get("response_format") == ({"type": "json_object"}
                                               if mode == "json_object" else None)


@pytest.mark.parametrize("act", [
    fs.styled("prose"), fs.styled("fenced"),
    fs.Act(strings=True), fs.Act(metric_names="title"), fs.Act(metric_names="upper"),
    fs.styled("prose", strings=True, metric_names="title"),
], ids=["prose", "fenced", "strings", "title-case", "upper-case", "all-at-once"])
def test_rubric_replies_as_real_models_write_them(openai_server, act):
    openai_server.push(act)
    config = openai_config(openai_server, output_mode="json_object")
    (row,) = judge_and_rows(config, make_tasks(1, 1))[1]
    assert row.status == "ok" and not row.repaired, row.error
    assert set(scores_of(row).values()) == {0.8}
    assert "code_correctness" in scores_of(row)  # the rubric's names, not the model's


@pytest.mark.parametrize("style", ["label_line", "bare_label", "prose", "fenced"])
def test_react_replies_in_text_including_the_seed_label_form(openai_server, style):
    openai_server.push(*[fs.label(lbl, style=style) for lbl in
                         ("incorrect", "correct", "incorrect", "suboptimal")])
    config = openai_config(openai_server, evaluations=["thought_to_tool",
                                                       "sequence_optimality"],
                           output_mode="text", concurrency=1)
    rows = judge_and_rows(config, make_tasks(1, 3))[1]
    assert [(r.evaluation_kind, r.label, json.loads(r.scores)) for r in rows] == [
        ("thought_to_tool", "incorrect", {"thought_to_tool": 0.0}),
        ("thought_to_tool", "correct", {"thought_to_tool": 1.0}),
        ("thought_to_tool", "incorrect", {"thought_to_tool": 0.0}),
        ("sequence_optimality", "suboptimal", {"sequence_optimality": 0.0}),
    ]
    assert all(not r.repaired for r in rows)
    if style == "label_line":
        assert rows[0].raw_response.endswith('LABEL: "incorrect"')
        assert rows[0].reasoning.startswith("EXPLANATION: looks right")


RAMBLE = ("The agent chose the correct tool for the task.\n\nThe agent followed the "
          "correct reasoning.\n\nThe agent followed the")  # SmolLM2-135M, cut at 48 tokens


@pytest.mark.parametrize("make", [openai_config, anthropic_config])
def test_prose_cut_off_at_max_tokens_naming_one_label_reads_as_phoenix_reads_it(
        openai_server, anthropic_server, make):
    server = openai_server if make is openai_config else anthropic_server
    server.push(fs.cut_off(RAMBLE), fs.cut_off("It is correct, or maybe incorrect, since"),
                fs.cut_off("It is correct, or maybe incorrect, since"),
                fs.cut_off('{"explanation": "the tool is correct and'),
                fs.cut_off('{"explanation": "the tool is correct and'))
    config = make(server, evaluations=["thought_to_tool"], output_mode="text", concurrency=1)
    rows = judge_and_rows(config, make_tasks(1, 4))[1]
    ok, both, cut_json = rows[0], rows[1], rows[2]
    assert (ok.status, ok.label, json.loads(ok.scores)) == (
        "ok", "correct", {"thought_to_tool": 1.0})
    assert ok.reasoning.startswith("[response cut off at max_tokens=")
    # both labels named, or an unfinished JSON object: a failed row, nothing read into it
    for row in (both, cut_json):
        assert row.status == "failed" and row.scores == "{}" and row.label is None
        assert "cut off at max_tokens" in row.error


def test_a_rubric_cut_off_at_max_tokens_is_a_failed_row(openai_server):
    openai_server.push(*[fs.cut_off('{"scores": {"a": 0.5')] * 2)
    rows = judge_and_rows(openai_config(openai_server, concurrency=1), make_tasks(1, 1))[1]
    assert [(r.status, r.scores) for r in rows] == [("failed", "{}")]
    assert "cut off at max_tokens" in rows[0].error


def test_schema_following_servers_with_a_score_beside_the_label_give_ok_rows(
        openai_server, anthropic_server):
    # issue 7 item 1: "score 0.74 contradicts label 'incorrect'" failed every ReAct row
    for server, make in ((openai_server, openai_config), (anthropic_server, anthropic_config)):
        server.push(*[fs.label("incorrect", score=0.74)] * 3)
        rows = judge_and_rows(make(server, evaluations=["thought_to_tool"],
                                   concurrency=1), make_tasks(1, 3))[1]
        assert [(r.status, r.label, r.attempts) for r in rows] == [("ok", "incorrect", 1)] * 3
        assert all(json.loads(r.scores) == {"thought_to_tool": 0.0} for r in rows)


def test_an_unknown_label_goes_back_for_repair_asking_for_the_label(openai_server):
    openai_server.push(fs.label("maybe"))
    config = openai_config(openai_server, evaluations=["sequence_optimality"])
    (row,) = judge_and_rows(config, make_tasks(1, 2))[1]
    assert (row.status, row.repaired, row.label) == ("ok", True, "optimal")
    repair = openai_server.requests[-1].body["messages"][-1]["content"]
    assert "label must be one of ['optimal', 'suboptimal'], got 'maybe'" in repair
    assert 'an "explanation" string and a "label" that is exactly one of' in repair
    assert '"scores"' not in repair.split("could not be used")[1]


# -- nothing invented, nothing clipped -------------------------------------------------------

@pytest.mark.parametrize("bad,fragment", [
    (fs.scores(drop_metric=True), "missing metrics: ['code_correctness']"),
    (fs.scores({"code_correctness": 285}), "out of range [0, 1]: 285"),
    (fs.scores({"code_correctness": "285"}), "out of range [0, 1]: '285'"),
], ids=["missing", "285", "'285'"])
def test_a_missing_metric_or_a_score_out_of_range_is_a_failed_row(openai_server, bad,
                                                                   fragment):
    openai_server.push(bad, bad)
    (row,) = judge_and_rows(openai_config(openai_server), make_tasks(1, 1))[1]
    assert row.status == "failed" and row.scores == "{}" and row.attempts == 2
    assert fragment in row.error and row.raw_response


def test_the_wire_schema_carries_bounds_and_the_label_enum_where_the_host_takes_them(
        openai_server, anthropic_server):
    def sent_schema(server: FakeLLMServer, config: JudgeConfig) -> dict[str, Any]:
        judge_and_rows(config, make_tasks(1, 1))
        body = server.requests[-1].body
        if server.kind == "anthropic":
            return body["tools"][0]["input_schema"]
        return body["response_format"]["json_schema"]["schema"]

    score = sent_schema(openai_server, openai_config(openai_server))[
        "properties"]["scores"]["properties"]["code_correctness"]
    assert (score["minimum"], score["maximum"]) == (0.0, 1.0)
    # a host that refuses the keywords: switched off in the judges file
    off = sent_schema(openai_server, openai_config(openai_server, schema_bounds=False))
    assert "minimum" not in json.dumps(off)
    # Anthropic's strict tools refuse numeric bounds; its preset leaves them out
    tool = sent_schema(anthropic_server, anthropic_config(anthropic_server))
    assert "minimum" not in json.dumps(tool)
    # llama.cpp's grammar ignores bounds on numbers: its preset sends the values as an enum
    local = JudgeConfig(name="local", provider="openai_compatible", preset="llamacpp",
                        base_url=openai_server.base_url, evaluations=["clip_rubric"])
    score = sent_schema(openai_server, local)["properties"]["scores"]["properties"][
        "code_correctness"]
    assert score["enum"][:3] == [0.0, 0.05, 0.1] and score["enum"][-1] == 1.0
    # ... and bounds the free text, which its grammar enforces (a tiny model otherwise
    # repeats a sentence until max_tokens cuts the JSON off); hosted APIs get no maxLength
    assert sent_schema(openai_server, local)["properties"]["reasoning"]["maxLength"] == 2000
    assert "maxLength" not in json.dumps(sent_schema(openai_server, openai_config(openai_server)))
    short = sent_schema(openai_server, openai_config(
        openai_server, text_max_chars=80, evaluations=["thought_to_tool"]))
    assert short["properties"]["explanation"]["maxLength"] == 80
    assert "maxLength" not in short["properties"]["label"]
    # any host can ask for steps, e.g. an Anthropic-compatible llama.cpp with tool calling
    stepped = sent_schema(anthropic_server, anthropic_config(anthropic_server, score_steps=4))
    assert stepped["properties"]["scores"]["properties"]["code_correctness"]["enum"] == [
        0.0, 0.25, 0.5, 0.75, 1.0]
    react = sent_schema(openai_server, openai_config(openai_server,
                                                     evaluations=["sequence_optimality"]))
    assert react["properties"]["label"]["enum"] == ["optimal", "suboptimal"]


# -- fallbacks -------------------------------------------------------------------------------

@pytest.mark.parametrize("server", [{"structured": "json_object_only"}], indirect=True)
def test_a_server_that_refuses_json_schema_makes_the_judge_fall_back_once(server):
    config = openai_config(server, evaluations=ALL, concurrency=8, max_retries=0)
    judge, rows = judge_and_rows(config, make_tasks(6, 3))
    assert_all_ok(rows)
    # exactly one refused request for the whole run, retried at once in json_object mode
    assert server.refused == 1
    assert server.calls == len(rows) + 1
    assert all(r.attempts == 1 and not r.repaired for r in rows)
    assert judge.reply_mode == "json_object"
    assert judge.reply_mode_note.startswith("json_object instead of json_schema: "
                                            "json_schema refused (HTTP 500")
    assert "Input should be 'text' or 'json_object'" in judge.reply_mode_note
    later = [r.body for r in server.requests[1:]]
    assert all(b["response_format"] == {"type": "json_object"} for b in later)
    assert all("It must follow this JSON schema:" in b["messages"][-1]["content"]
               for b in later)


@pytest.mark.parametrize("server", [{"structured": "json_object_only"}], indirect=True)
def test_a_forced_json_schema_is_not_abandoned(server):
    config = openai_config(server, output_mode="json_schema")
    judge, rows = judge_and_rows(config, make_tasks(1, 2))
    assert judge.reply_mode == "json_schema" and server.refused == 1
    assert all(r.status in ("failed", "skipped") for r in rows)
    assert "refused output_mode json_schema" in rows[0].error
    assert "set output_mode: json_object" in rows[0].error


def test_a_400_naming_response_format_also_falls_back(openai_server):
    openai_server.push(fs.status(400, message="Invalid parameter: 'response_format' of type "
                                 "'json_schema' is not supported with this model."))
    judge, rows = judge_and_rows(openai_config(openai_server), make_tasks(1, 2))
    assert_all_ok(rows, ["clip_rubric"])
    assert openai_server.calls == 3 and judge.reply_mode == "json_object"
    assert "HTTP 400" in judge.reply_mode_note

    # llama.cpp's answer to a schema its grammar converter cannot handle
    openai_server.push(fs.status(400, message="Unable to generate parser for this template. "
                                 "JSON schema error at #/properties/scores: cannot resolve"))
    judge, rows = judge_and_rows(openai_config(openai_server), make_tasks(1, 1))
    assert rows[0].status == "ok" and judge.reply_mode == "json_object"

    # any other 400 is the row's failure, not a reason to change modes
    openai_server.push(fs.status(400, message="max_tokens is too large"))
    judge, rows = judge_and_rows(openai_config(openai_server), make_tasks(1, 1))
    assert rows[0].status == "failed" and "max_tokens is too large" in rows[0].error
    assert judge.reply_mode == "json_schema" and judge.reply_mode_note is None


@pytest.mark.parametrize("server", [{"structured": "none"}], indirect=True)
def test_a_server_without_structured_output_is_read_from_prose(server):
    judge, rows = judge_and_rows(openai_config(server, evaluations=ALL), make_tasks(1, 3))
    assert_all_ok(rows)
    assert "Here is my evaluation" in rows[0].raw_response
    assert judge.reply_mode == "json_schema"


@pytest.mark.parametrize("server", [{"kind": "anthropic", "tools": False}], indirect=True)
def test_anthropic_server_without_tool_calling_reads_the_text(server):
    config = anthropic_config(server, evaluations=ALL, concurrency=4)
    judge, rows = judge_and_rows(config, make_tasks(3, 3))
    assert_all_ok(rows)
    assert judge.reply_mode == "text"
    assert judge.reply_mode_note == (
        "text instead of tool: a forced tool use came back as text (stop_reason=end_turn); "
        "read the answer from the text")
    # decided on the first request: every later one is sent without tools
    assert "tools" in server.requests[0].body and server.calls == len(rows)
    assert all("tools" not in r.body for r in server.requests[1:])
    assert all("It must follow this JSON schema:" in r.body["messages"][-1]["content"]
               for r in server.requests[1:])


@pytest.mark.parametrize("server", [{"kind": "anthropic", "tools": False}], indirect=True)
def test_anthropic_unreadable_text_is_asked_again_without_tools_once(server):
    server.push(fs.text("I would call the tool, but I cannot."))
    config = anthropic_config(server, evaluations=["clip_rubric", "sequence_optimality"],
                              concurrency=1)
    judge, rows = judge_and_rows(config, make_tasks(1, 2))
    assert_all_ok(rows, ["clip_rubric", "sequence_optimality"])
    assert judge.reply_mode == "text" and "asked again without tools" in judge.reply_mode_note
    assert [("tools" in r.body) for r in server.requests] == [True, False, False, False]
    first = rows[0]
    assert first.attempts == 1 and first.tokens_in == 2 * server.tokens_in  # both billed


@pytest.mark.parametrize("server", [{"kind": "anthropic", "tools": False}], indirect=True)
def test_anthropic_label_form_without_tools(server):
    server.push(fs.label("suboptimal", style="label_line"))
    config = anthropic_config(server, evaluations=["sequence_optimality"])
    (row,) = judge_and_rows(config, make_tasks(1, 2))[1]
    assert (row.status, row.label, json.loads(row.scores)) == (
        "ok", "suboptimal", {"sequence_optimality": 0.0})


def test_the_heuristic_judge_names_its_mode():
    judge = HeuristicJudge(JudgeConfig(name="h"))
    assert (judge.reply_mode, judge.reply_mode_note) == ("heuristic", None)


# -- providers and presets -------------------------------------------------------------------

def test_the_registry_builds_every_provider():
    assert set(PROVIDERS) == set(Provider.__args__)


@pytest.mark.parametrize("preset,variable", [
    ("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY"),
    ("deepseek", "DEEPSEEK_API_KEY"), ("kimi", "MOONSHOT_API_KEY"),
    ("gemini", "GEMINI_API_KEY"), ("vertex", "GOOGLE_VERTEX_TOKEN"), ("vllm", None),
])
def test_each_preset_has_its_usual_key_variable(preset, variable):
    provider = preset if preset in ("openai", "anthropic") else "openai_compatible"
    config = JudgeConfig(name="j", provider=provider, preset=preset, project="p")
    assert config.key_env() == variable
    explicit = config.model_copy(update={"api_key_env": "MY_KEY"})
    assert explicit.key_env() == "MY_KEY"


def test_a_judge_without_api_key_env_uses_the_preset_variable(openai_server, monkeypatch):
    import dagster as dg

    from eval_pipeline.defs.pipeline.resources import judge_resource
    from eval_pipeline.local_run import check_judge_keys

    config = JudgeConfig(name="ds", provider="openai_compatible", preset="deepseek",
                         base_url=openai_server.base_url, evaluations=["clip_rubric"])
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with pytest.raises(Exception, match="DEEPSEEK_API_KEY"):
        check_judge_keys([config])
    monkeypatch.setenv("DEEPSEEK_API_KEY", SECRET)
    check_judge_keys([config])
    resource = judge_resource(config, cache_enabled=False)
    assert resource.api_key == dg.EnvVar("DEEPSEEK_API_KEY")
    with dg.build_resources({"judge": resource}) as bound:
        rows = asyncio.run(bound.judge.run(make_tasks(1, 1)))
    assert rows[0].status == "ok"
    assert openai_server.requests[-1].headers["authorization"] == f"Bearer {SECRET}"


def test_vertex_preset_builds_its_endpoint_from_project_and_location():
    config = JudgeConfig(name="v", provider="openai_compatible", preset="vertex",
                         project="my-proj", location="europe-west4")
    endpoint = resolve_endpoint(config)
    assert endpoint.base_url == ("https://europe-west4-aiplatform.googleapis.com/v1/projects/"
                                 "my-proj/locations/europe-west4/endpoints/openapi")
    assert endpoint.model == "google/gemini-2.5-flash" and endpoint.key_env == \
        "GOOGLE_VERTEX_TOKEN"
    assert endpoint.output_mode == "json_schema"
    glob = resolve_endpoint(config.model_copy(update={"location": "global"}))
    assert glob.base_url.startswith("https://aiplatform.googleapis.com/v1/projects/my-proj/"
                                    "locations/global/")
    with pytest.raises(ValueError, match="needs project"):
        resolve_endpoint(JudgeConfig(name="v", provider="openai_compatible", preset="vertex"))


def test_output_mode_is_checked_against_the_provider():
    with pytest.raises(ValueError, match="has no output_mode 'json_object'"):
        resolve_endpoint(JudgeConfig(name="a", provider="anthropic", output_mode="json_object"))
    with pytest.raises(Exception, match="output_mode"):
        JudgeConfig(name="a", provider="openai", output_mode="yaml")
    assert resolve_endpoint(JudgeConfig(name="a", provider="anthropic",
                                        output_mode="text")).output_mode_forced
