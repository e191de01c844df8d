"""The judges against a real LLM server: llama.cpp's own, serving SmolLM2-135M-Instruct.

Every other judge test talks to fake servers written here; this module proves both SDK paths
(``openai_compatible`` on ``/v1/chat/completions``, ``anthropic`` on ``/v1/messages``) and
every reply mode against what a real server and a real (tiny) model send back: replies cut
off, scores the grammar did not bound, a forced tool use answered in plain text. The CLI runs
once over an XML-tag trajectory and a ReAct text one with one judge per (provider, reply
mode). A 135M model is a compatibility check, not a judge: rows may fail, but each must end
ok with scores in [0, 1] or failed with its error, and every path must get some rows ok.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline_tests.judges import llamacpp_server

# 42 s on an idle 2-core machine; several times that where other test runs share the cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

_MISSING = llamacpp_server.missing_packages()
if _MISSING:
    pytest.skip(f"real-server judge tests need {' and '.join(_MISSING)} (the llm-server test "
                "extra: bash scripts/bootstrap.sh installs them)", allow_module_level=True)

DUMMY_KEY_ENV = "LLAMACPP_TEST_DUMMY_KEY"  # the server checks no key; the SDK wants one

# One short trajectory per format, two clips each (a tool clip and the final answer).
XML_RECORD = {
    "task_id": "xml_sum",
    "task_description": "Compute the sum of the integers from 1 to 10.",
    "raw_response": (
        "<think>\nI need the sum of the integers 1 to 10. I will compute it in the sandbox.\n"
        "</think>\n<microsandbox><microsandbox_execute>print(sum(range(1, 11)))"
        "</microsandbox_execute></microsandbox>\n<result>55</result>\n"
        "<think>\nThe sandbox printed 55, which answers the task.\n</think>\n"
        "<answer>The sum of the integers from 1 to 10 is 55.</answer>"),
    "success": True,
}
REACT_LOG = """Question: What is the weather in Paris today?
Thought: I need the current weather for Paris, so I will call the weather tool.
Action: get_weather
Action Input: {"city": "Paris"}
Observation: 18C and sunny
Thought: The tool says 18C and sunny; that answers the question.
Final Answer: It is 18C and sunny in Paris today.
"""

# (judge name, provider, output_mode forced in the judges file, evaluation kinds, the reply
# mode its rows must report). The grammar mode gets the rubric (four scores per clip, each an
# enum the grammar enforces: 4 requests); the others a ReAct question on each tool clip (a
# label, which a tiny model can give in text: 2 requests each, with prompts alike from judge
# to judge, so the server's prompt cache saves most of their prompt work). The anthropic
# judge left on its default (a forced tool use) meets a server without tool calling, reads
# the text answer and stays in text mode. A forced tool mode cannot succeed here: that is
# the forced-mode contract, shown with fake servers elsewhere.
PATHS = [
    ("oa_json_schema", "openai_compatible", "json_schema", ["clip_rubric"], "json_schema"),
    ("oa_json_object", "openai_compatible", "json_object", ["thought_to_tool"], "json_object"),
    ("oa_text", "openai_compatible", "text", ["thought_to_tool"], "text"),
    ("ant_default", "anthropic", None, ["thought_to_tool"], "text"),
    ("ant_text", "anthropic", "text", ["thought_to_tool"], "text"),
]


# Token budgets per forced mode: the grammar modes' replies end by themselves (about 80
# tokens for the rubric with 60-character text fields, 35 for a label); the prose modes
# ramble, so their cut-off comes early.
MAX_TOKENS = {"json_schema": 160, "json_object": 96, None: 96, "text": 48}

# Every path must get rows ok (issue 15). Under json_schema the grammar enforces the
# scores' enum and the 60-character text fields, so the rubric answers close inside the
# budget (4 of 4 ok); under json_object the model answers a label (2 of 2). In plain text
# (openai text, anthropic text, and the anthropic default once its forced tool use came
# back as text) SmolLM2-135M rambles until the budget cuts it off; a ramble that names
# exactly one label is read as the seed's Phoenix llm_classify reads it (1-2 of 2 per path
# at temperature 0), one that names none stays a failed row with its error.
MUST_HAVE_OK = {name for name, *_ in PATHS}


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server's root URL; a subprocess, so teardown can end it by its pid.

    One slot: requests are decoded one at a time, so each answer is the same from run to
    run (with several slots, llama.cpp batches whatever is in flight together and the
    greedy answers changed between runs: which prose path got its rows ok moved), and
    on 2 cores it is no slower (42 s against 55 s for the module, idle machine)."""
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    with llamacpp_server.running(log, "--slots", "1") as root:
        yield root


def _judges_yaml(root: str) -> str:
    lines = ["judges:"]
    for name, provider, mode, kinds, _ in PATHS:
        lines += [f"  - name: {name}", f"    provider: {provider}", "    model: smollm2-135m",
                  f"    evaluations: [{', '.join(kinds)}]",
                  # Greedy decoding (the server adds its fixed seed). A tiny model repeats a
                  # sentence until max_tokens cuts it off: a grammar bounds the free text
                  # (text_max_chars), and the prose modes, which nothing bounds, get a small
                  # budget, as this machine generates a few tokens a second. The server
                  # queues requests beyond its slots; a wait there counts toward the timeout.
                  "    temperature: 0.0",
                  "    text_max_chars: 60",
                  f"    max_tokens: {MAX_TOKENS[mode]}",
                  "    timeout_s: 600",
                  "    max_retries: 1", "    concurrency: 1"]
        if mode is not None:
            lines.append(f"    output_mode: {mode}")
        if provider == "anthropic":
            lines += [f"    base_url: {root}", f"    api_key_env: {DUMMY_KEY_ENV}"]
        else:
            lines += ["    preset: llamacpp", f"    base_url: {root}/v1"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def run_output(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CLI run over both trajectories with every judge; its output folder."""
    tmp = tmp_path_factory.mktemp("llamacpp_run")
    drop = tmp / "in"
    drop.mkdir()
    (drop / "sum.jsonl").write_text(json.dumps(XML_RECORD) + "\n", "utf-8")
    (drop / "weather.txt").write_text(REACT_LOG, "utf-8")
    judges = tmp / "judges.yaml"
    judges.write_text(_judges_yaml(llama_server), "utf-8")
    out = tmp / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(tmp / "home"))
        mp.setenv(DUMMY_KEY_ENV, "not-a-real-key")
        mp.chdir(tmp)
        code = main(["run", str(drop), "--output", str(out), "--judges", str(judges)])
    # 0: every judge has rows ok; 3 ("judgments failed"): a judge with none ok. A 135M model
    # may run past its token budget on every answer of a path, so 3 is a finished run too;
    # which paths must have rows ok is asserted per path below.
    assert code in (0, 3), f"CLI exit code {code}"
    return out


@pytest.mark.parametrize(("name", "provider", "kinds"), [(p[0], p[1], p[3]) for p in PATHS],
                         ids=[p[0] for p in PATHS])
def test_every_path_ends_rows_ok_or_failed_with_its_error(run_output: Path, name: str,
                                                           provider: str,
                                                           kinds: list[str]) -> None:
    rows = pd.read_parquet(run_output / f"judgments__{name}.parquet")
    clips = pd.read_parquet(run_output / "clips.parquet")
    tool_clips = clips[clips["tool_type"] != "final"]
    expected = len(clips) if kinds == ["clip_rubric"] else len(tool_clips)
    assert len(rows) == expected and set(rows["evaluation_kind"]) == set(kinds)
    # Both trajectories (ids start with their file's stem) are judged.
    assert {t.split(":")[0] for t in rows["trajectory_id"]} == {"sum", "weather"}
    assert set(rows["status"]) <= {"ok", "failed"}
    assert set(rows["provider"]) == {provider}

    ok = rows[rows["status"] == "ok"]
    failed = rows[rows["status"] == "failed"]
    counts = f"{name}: {len(ok)} ok, {len(failed)} failed; errors: {list(failed['error'])}"
    print(counts)
    if name in MUST_HAVE_OK:
        assert len(ok) >= 1, counts
    for scores in ok["scores"]:
        values = json.loads(scores).values()
        assert values and all(0.0 <= v <= 1.0 for v in values), scores
    if kinds == ["thought_to_tool"]:
        # The score follows from the label, whatever number the reply carried.
        for label, scores in zip(ok["label"], ok["scores"], strict=True):
            expected_score = 1.0 if label == "correct" else 0.0
            assert label in ("correct", "incorrect")
            assert json.loads(scores) == {"thought_to_tool": expected_score}
    assert failed["error"].fillna("").str.strip().ne("").all(), "a failed row without error"
    assert (failed["scores"] == "{}").all(), "a failed row carries scores"



@pytest.mark.parametrize(("name", "reply_mode"), [(p[0], p[4]) for p in PATHS],
                         ids=[p[0] for p in PATHS])
def test_rows_say_which_reply_mode_answered(run_output: Path, name: str,
                                            reply_mode: str) -> None:
    rows = pd.read_parquet(run_output / f"judgments__{name}.parquet")
    # A forced mode never falls back; the anthropic default reads text after its probe.
    assert set(rows["reply_mode"]) == {reply_mode}, set(rows["reply_mode"])
    # ...and the run's metadata says so, where the UI shows it.
    home = run_output.parent / "home"
    # The CLI's instance stores events under $DAGSTER_HOME (FastSqliteEventLogStorage), as
    # every dagster command that opens it sets it.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.from_config(str(home)) as instance:
            event = instance.get_latest_materialization_event(
                dg.AssetKey(["judgments", name]))
            assert event is not None and event.asset_materialization is not None
            metadata = event.asset_materialization.metadata
    assert metadata["judge.reply_mode"].value == reply_mode
    if name == "ant_default":  # it fell back from a forced tool use, and says why
        assert "came back as text" in metadata["reply_mode_note"].value
