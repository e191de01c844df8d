"""Chat messages with tool calls: OpenAI, legacy function_call, Anthropic blocks, and the
benchmark files built on them (tau-bench, AgentProcessBench, FireAct, ToolBench, SWE-agent).

Corpus numbers were counted from the raw JSON: ``tool_calls`` entries, ``function_call``
names, ``Action:`` lines, ``trajectory`` lengths.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from eval_pipeline.formats import detect_format, parse_file
from eval_pipeline.formats.chat import render_messages
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.formats.helpers import assert_offsets, assert_result_ok, calls, n_calls

REG = default_registry()


def test_openai_tool_calls_render_with_offsets():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "tavily-search", "arguments": '{"query": "Paris weather"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "assistant", "content": "It is 18C."},
    ]
    r = render_messages(messages, REG)
    assert [s.kind for s in r.steps] == [
        "system", "user", "thought", "tool_call", "tool_result", "answer"]
    call, result = r.steps[3], r.steps[4]
    assert (call.tool_name, call.tool_type, call.tool_call_id) == ("tavily-search", "tavily", "c1")
    assert call.tool_input == '{"query": "Paris weather"}'
    assert result.tool_name == "tavily-search" and result.content == "18C"
    assert r.text[call.start:call.end] == (
        '<tool_call name="tavily-search" id="c1">{"query": "Paris weather"}</tool_call>')
    assert r.message_steps == [[0], [1], [2, 3], [4], [5]]


def test_legacy_function_call_and_anthropic_blocks():
    legacy = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "lookup", "arguments": '{"k": 1}'}},
        {"role": "function", "name": "lookup", "content": "v"},
        {"role": "assistant", "content": "v it is"},
    ]
    r = render_messages(legacy, REG)
    assert [s.kind for s in r.steps] == ["user", "tool_call", "tool_result", "answer"]
    assert r.steps[1].tool_type == "generic" and r.steps[2].tool_name == "lookup"

    anthropic = [
        {"role": "user", "content": [{"type": "text", "text": "run it"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "need code"},
            {"type": "text", "text": "Running."},
            {"type": "tool_use", "id": "tu1", "name": "sandbox_run_code",
             "input": {"code": "print(1)"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu1",
             "content": [{"type": "text", "text": "1"}]}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Printed 1."}]},
    ]
    r = render_messages(anthropic, REG)
    assert [s.kind for s in r.steps] == [
        "user", "thought", "thought", "tool_call", "tool_result", "answer"]
    assert r.steps[3].tool_type == "microsandbox"
    assert json.loads(r.steps[3].tool_input) == {"code": "print(1)"}
    assert r.steps[4].tool_name == "sandbox_run_code" and r.steps[4].content == "1"


def test_tool_call_tags_in_chat_text():
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant",
         "content": "<think>t</think>\n<tool_call>free text query</tool_call>"},
        {"role": "user", "content": "No effective tool call detected."},
        {"role": "assistant", "content": "<think>t</think>\n<tool_call>search</tool_call>",
         "tool_calls": [{"id": "c", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r"},
        {"role": "action", "content": '<tool_call>{"name": "tavily-search", "arguments": {}}'
                                      "</tool_call>"},
    ]
    r = render_messages(messages, REG)
    assert [(s.kind, s.tool_name) for s in r.steps if s.kind in ("tool_call", "tool_result")] == [
        ("tool_call", "search"), ("tool_result", "search"), ("tool_call", "tavily-search")]
    assert sum("kept as text" in n for n in r.notes) == 2


def test_tau_bench_rewards_and_expected_calls(corpora_dir):
    path = corpora_dir / "tau_bench" / "historical_trajectories" / "gpt-4o-airline.trials0-1.json"
    assert detect_format(path) == "tau_bench"
    result = parse_file(path, "b")
    assert_result_ok(result)
    trajs = result.trajectories
    assert len(trajs) == 100 and n_calls(result) == 572
    assert sum(t.reward == 1.0 for t in trajs) == 43
    first = trajs[0]
    assert [c.tool_name for c in calls(first)] == [
        "get_user_details", "search_direct_flight", "search_onestop_flight", "calculate",
        "book_reservation", "think", "calculate", "book_reservation"]
    assert first.expected_tools == ["book_reservation"]
    assert first.expected_calls[0]["arguments"]["user_id"] == "mia_li_3668"
    # trials 0 and 1 of a task are not duplicates of each other
    assert not any("duplicate_of" in t.extra for t in trajs)


def test_tau_bench_few_shot_display_transcripts(corpora_dir):
    path = corpora_dir / "tau_bench" / "few_shot_data" / "MockAirlineDomainEnv-few_shot.jsonl"
    result = parse_file(path, "b")
    assert_result_ok(result)
    # 98 "assistant: None" turns followed by a tool line: calls whose name was flattened away
    assert len(result.trajectories) == 19 and n_calls(result) == 98
    assert {c.tool_name for t in result.trajectories for c in calls(t)} == {"unknown"}


def test_agentprocessbench_step_labels_land_on_steps(corpora_dir):
    path = corpora_dir / "agentprocessbench" / "hotpotqa.jsonl"
    result = parse_file(path, "b")
    assert_result_ok(result)
    trajs = result.trajectories
    assert len(trajs) == 250
    assert Counter(t.final_label for t in trajs) == {1.0: 163, -1.0: 87}
    # 461 native tool_calls; the 44 Search-R1 style "<tool_call>free text</tool_call>"
    # attempts in message text executed nothing (or narrate a native call): not calls.
    assert n_calls(result) == 461
    first = trajs[0]  # step_labels {"2": 1, "4": 1, "6": 1, "8": -1}
    assert [c.label for c in calls(first)] == [1.0, 1.0, 1.0]
    assert [s.label for s in first.steps if s.kind == "answer"] == [-1.0]
    assert first.final_label == -1.0 and first.final_result == "Adelaide"
    # Every one of the 734 source labels reaches at least one step.
    labelled = 0
    for traj in trajs:
        assert not any("matches no step" in n for n in traj.extra.get("parse_notes", []))
        labelled += len(traj.extra["step_labels"])
    assert labelled == 734


def test_fireact_react_inside_chat(corpora_dir):
    path = next((corpora_dir / "fireact").glob("*.json"))
    assert detect_format(path) == "fireact"
    result = parse_file(path, "b")
    assert_result_ok(result)
    trajs = result.trajectories
    assert len(trajs) == 465 and sum(t.success for t in trajs) == 200
    assert n_calls(result) == 906  # non-finish "Action:" lines
    first = trajs[0]  # key 6238: question, Thought+finish, verdict
    assert first.task_id == "6238"
    assert [s.kind for s in first.steps] == ["user", "thought", "answer", "text"]
    assert first.steps[2].content == "Seth MacFarlane"


def test_toolbench_answer_trees(corpora_dir):
    files = sorted((corpora_dir / "toolbench" / "data_example" / "answer").glob("*/*.json"))
    got = {}
    for path in files:
        assert detect_format(path) == "toolbench"
        result = parse_file(path, "b")
        assert_result_ok(result)
        (traj,) = result.trajectories
        got[f"{path.parent.name}/{path.stem.split('_')[0]}"] = (traj.success, len(calls(traj)))
    assert got == {
        "G1_answer/10": (True, 2), "G1_answer/11": (True, 3), "G1_answer/57": (True, 3),
        "G1_answer/59": (True, 4), "G1_answer/69": (False, 0), "G2_answer/102": (True, 3),
        "G2_answer/10": (False, 3), "G2_answer/119": (False, 2), "G2_answer/127": (False, 2),
        "G2_answer/52": (True, 2)}
    first = parse_file(files[0], "b").trajectories[0]
    assert calls(first)[0].tool_name == "transitaires_for_transitaires"
    # The Finish call is the answer, and its final_answer text is the step's content.
    assert first.steps[-1].kind == "answer"
    assert first.steps[-1].content.startswith("The contact details of the 'Gondrand'")


def test_swe_agent_traj_files(corpora_dir):
    counts = {}
    for path in sorted((corpora_dir / "swe_agent").rglob("*.traj")):
        result = parse_file(path, "b")
        assert_result_ok(result)
        (traj,) = result.trajectories
        counts[path.relative_to(corpora_dir).as_posix()] = len(calls(traj))
    # len(trajectory) per file (function_calling_simple has only a history of 5 calls)
    assert sorted(counts.values()) == sorted([5, 12, 4, 7, 5, 5, 14, 11, 11])
    fc = next(p for p in (corpora_dir / "swe_agent").rglob("*.traj")
              if "function_calling__" in str(p))
    traj = parse_file(fc, "b").trajectories[0]
    assert calls(traj)[0].tool_name == "create" and "reproduce.py" in calls(traj)[0].tool_input
    assert traj.final_result and "diff --git" in traj.final_result
    assert "\r\n" not in "".join(s.content for s in traj.steps if s.kind == "tool_result")


def test_sharegpt_conversations_and_swe_preds(corpora_dir):
    result = parse_file(corpora_dir / "dataeva" / "finetune_clip_judge_prompts.jsonl", "b")
    assert_result_ok(result)
    assert len(result.trajectories) == 8
    assert [s.kind for s in result.trajectories[0].steps] == ["user", "answer"]
    preds = next((corpora_dir / "swe_agent").rglob("all_preds.jsonl"))
    (traj,) = parse_file(preds, "b").trajectories
    assert traj.task_id == "pydicom__pydicom-1458" and traj.steps[0].kind == "answer"


def test_message_that_is_not_an_object_is_kept(tmp_path: Path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"id": "x", "messages": [
        {"role": "user", "content": "hi"}, "stray string", {"role": "assistant",
                                                          "content": "hello"}]}) + "\n")
    (traj,) = parse_file(path, "b").trajectories
    assert_offsets(traj)
    assert [s.kind for s in traj.steps] == ["user", "text", "answer"]
    assert "message 1 is a str" in traj.extra["parse_notes"][0]
