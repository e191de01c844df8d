"""Routing cases and reference records: expected_tools / expected_calls are kept.

BFCL and DevAI numbers were counted from the raw files (ground-truth calls per answer
file, human ``satisfied`` requirements per developer agent).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from eval_pipeline.formats import detect_format, parse_file
from eval_pipeline_tests.formats.helpers import assert_result_ok, n_calls


def test_plain_routing_cases(tmp_path: Path):
    path = tmp_path / "routing.jsonl"
    rows = [
        {"name": "weather", "prompt": "Weather in Paris?", "expected_tools": ["get_weather"]},
        {"name": "calc", "prompt": "2+2", "expected_calls": [
            {"name": "calculator", "arguments": {"expr": "2+2"}}, "log"]},
        {"name": "bad", "prompt": "x", "expected_tools": "get_weather"},
        {"name": "noprompt", "expected_tools": []},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert detect_format(path) == "routing_cases"
    result = parse_file(path, "b")
    assert_result_ok(result)
    weather, calc = result.trajectories
    assert weather.expected_tools == ["get_weather"] and weather.task_id == "weather"
    assert [s.kind for s in weather.steps] == ["user"]
    assert calc.expected_calls == [{"name": "calculator", "arguments": {"expr": "2+2"}},
                                   {"name": "log"}]
    assert calc.expected_tools == ["calculator", "log"]
    assert [(q.source_line, q.reason) for q in result.quarantined] == [
        (3, "wrong_type"), (4, "missing_field")]


def test_toolbench_queries_expect_their_relevant_apis(corpora_dir):
    path = corpora_dir / "toolbench" / "data_example" / "instruction" / "G1_query.json"
    result = parse_file(path, "b")
    assert_result_ok(result)
    assert len(result.trajectories) == 5
    # relevant APIs [['SQUAKE', 'Checkhealth'], ['SQUAKE', 'Projects']]
    assert result.trajectories[0].expected_tools == [
        "checkhealth_for_squake", "projects_for_squake"]


def test_bfcl_questions_join_their_answers(corpora_dir):
    data = corpora_dir / "bfcl" / "berkeley-function-call-leaderboard" / "bfcl_eval" / "data"
    simple = parse_file(data / "BFCL_v4_simple_python.json", "b")
    assert_result_ok(simple)
    assert len(simple.trajectories) == 400
    first = simple.trajectories[0]
    assert first.task_id == "simple_python_0"
    # Single-turn gold calls are one model response: one group (parallel, unordered).
    assert first.expected_calls == [{"name": "calculate_triangle_area", "arguments": {
        "base": [10], "height": [5], "unit": ["units", ""]}, "group": 0}]
    assert first.expected_tools == ["calculate_triangle_area"]

    multi = parse_file(data / "BFCL_v4_multi_turn_base.json", "b")
    assert len(multi.trajectories) == 200
    assert sum(len(t.expected_calls) for t in multi.trajectories) == 1142
    assert multi.trajectories[0].expected_calls[0] == {
        "name": "cd", "call": "cd(folder='document')", "turn": 0}
    assert sum(s.kind == "user" for s in multi.trajectories[0].steps) == 4  # four turns

    irrelevant = parse_file(data / "BFCL_v4_irrelevance.json", "b")
    assert len(irrelevant.trajectories) == 240
    assert all(t.expected_tools == [] for t in irrelevant.trajectories)

    answers = parse_file(data / "possible_answer" / "BFCL_v4_multi_turn_base.json", "b")
    assert detect_format(data / "possible_answer" / "BFCL_v4_multi_turn_base.json") == (
        "bfcl_answers")
    assert n_calls(answers) == 1142 and answers.trajectories[0].extra["reference"] is True

    docs = parse_file(data / "multi_turn_func_doc" / "gorilla_file_system.json", "b")
    assert not docs.trajectories
    assert {q.reason for q in docs.quarantined} == {"not_a_trajectory"}


def test_devai_judgments_keep_requirement_labels(corpora_dir):
    judgments = corpora_dir / "devai_agent_as_a_judge" / "benchmark" / "judgment"
    satisfied = Counter()
    total = Counter()
    for path in sorted(judgments.glob("*/human_as_a_judge/*.json")):
        result = parse_file(path, "b")
        assert_result_ok(result)
        (traj,) = result.trajectories
        assert traj.extra["judge"] == "human"
        labels = [s.label for s in traj.steps if s.content.startswith("Requirement")]
        assert set(labels) <= {1.0, -1.0}
        satisfied[traj.agent_version] += sum(label > 0 for label in labels)
        total[traj.agent_version] += len(labels)
    assert satisfied == {"OpenHands": 157, "MetaGPT": 81, "GPT-Pilot": 163}
    assert total == {"OpenHands": 366, "MetaGPT": 366, "GPT-Pilot": 366}
    agent = parse_file(next(judgments.glob("OpenHands/agent_as_a_judge/gray_box/*.json")), "b")
    assert agent.trajectories[0].extra["judge"] == "agent_as_a_judge"
