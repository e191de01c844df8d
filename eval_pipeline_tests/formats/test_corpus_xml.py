"""The original tool's XML-tag logs and its newer dialect, on the real DataEva corpora.

Expected numbers were counted independently from the raw JSON (tag counts per record,
``tool_call_statistics``) and against SOURCES.md.
"""

from __future__ import annotations

from collections import Counter

from eval_pipeline.formats import detect_format, parse_file
from eval_pipeline_tests.formats.helpers import assert_result_ok, calls, n_calls


def test_demo01_three_records_seven_calls(corpora_dir):
    path = corpora_dir / "dataeva" / "demo01.jsonl"
    assert detect_format(path) == "xml_tags"
    result = parse_file(path, "b")
    assert_result_ok(result)
    by_id = {t.task_id: t for t in result.trajectories}
    assert set(by_id) == {"test_1", "test_2", "test_reasoning_combo"}
    # <microsandbox> x1, <browser_use> x3 (one after a stray unclosed <answer>), <microsandbox> x3
    assert [c.tool_name for c in calls(by_id["test_1"])] == ["microsandbox_execute"]
    assert [c.tool_type for c in calls(by_id["test_2"])] == ["browser_use"] * 3
    assert len(calls(by_id["test_reasoning_combo"])) == 3
    # The answer opened mid-log and never closed must not swallow the calls after it.
    combo = by_id["test_reasoning_combo"]
    assert any("unclosed <answer>" in n for n in combo.extra["tag_notes"])
    assert by_id["test_1"].success is True and "冒泡排序" in by_id["test_1"].task_description


def test_demo02_quirks_counted(corpora_dir):
    result = parse_file(corpora_dir / "dataeva" / "demo02.jsonl", "b")
    assert_result_ok(result)
    trajs = result.trajectories
    assert len(trajs) == 97 and not result.quarantined
    assert sum(t.success is None for t in trajs) == 27  # success missing in 27 rows
    assert sum(bool(t.extra.get("success_missing")) for t in trajs) == 27
    unclosed = sum(any(n.startswith("unclosed <answer> read to the end") for n in
                       t.extra.get("tag_notes", [])) for t in trajs)
    assert unclosed == 84  # SOURCES.md: 84 of 97 end in an unclosed <answer>
    assert sum(not any(s.kind == "answer" for s in t.steps) for t in trajs) == 13
    assert n_calls(result) == 370
    # Row 2 (tool_star_44224): a failed deepsearch call, one <tool_param> lookup whose
    # <result> only echoes the parameter schema, then the real call and its result.
    row = trajs[1]
    assert row.task_id == "tool_star_44224"
    assert [c.tool_type for c in calls(row)] == ["deepsearch", "deepsearch"]
    assert sum(s.kind == "tool_result" for s in row.steps) == 2
    echoes = [s for s in row.steps if s.tool_name == "tool_param"]
    assert len(echoes) == 2 and all(s.kind == "text" for s in echoes)
    assert '"parameters"' in echoes[1].content
    # memory_write is not in the registry: scored generic and reported, never dropped.
    unknown = Counter(n for t in trajs for n in t.extra.get("unregistered_tools", []))
    assert unknown == {"memory_write": 2}


def test_evaluated_output_reads_back_without_evaluation_blocks(corpora_dir):
    result = parse_file(corpora_dir / "dataeva" / "example_0721_evaluated.jsonl", "b")
    assert_result_ok(result)
    assert len(result.trajectories) == 10
    first = result.trajectories[0]
    assert first.task_id == "tool_star_52048"
    assert "<clip_evaluation>" not in first.raw_response
    assert len(first.extra["clip_evaluations"]) == 2  # evaluation_metadata.num_clips == 2
    assert first.extra["evaluation_metadata"]["num_clips"] == 2


def test_agent_data_platform_every_file_loads(corpora_dir):
    total = Counter()
    for path in sorted((corpora_dir / "agent_data_platform").glob("*.jsonl")):
        result = parse_file(path, "b")
        assert_result_ok(result)
        assert not result.quarantined
        total["trajectories"] += len(result.trajectories)
        total["calls"] += n_calls(result)
    assert total == {"trajectories": 207, "calls": 734}


def test_newer_dialect_tool_call_json(corpora_dir):
    aime = parse_file(corpora_dir / "dataeva" / "aime_cleaned.first50.jsonl", "b")
    assert_result_ok(aime)
    assert len(aime.trajectories) == 50
    # tool_call_statistics: 26 of 50 use a tool, 85 calls in all
    assert sum(bool(calls(t)) for t in aime.trajectories) == 26
    assert n_calls(aime) == 85
    for traj in aime.trajectories:
        assert [c.tool_name for c in calls(traj)] == traj.extra["tool_call_statistics"][
            "tool_call"] or len(calls(traj)) == traj.extra["tool_call_statistics"]["tool_use"]
    first_tool = next(t for t in aime.trajectories if calls(t))
    call = calls(first_tool)[0]
    assert call.tool_name == "sandbox_start" and call.tool_type == "microsandbox"
    assert '"sandbox": "math_solver"' in call.tool_input

    nq = parse_file(corpora_dir / "dataeva" / "nq_hotpot_qa_cleaned.first50.jsonl", "b")
    assert_result_ok(nq)
    assert n_calls(nq) == 74 and all(calls(t) for t in nq.trajectories)
    # tool_call_statistics: tavily-search x71, tavily-extract x2, deepsearch x1
    types = Counter(c.tool_type for t in nq.trajectories for c in calls(t))
    assert types == {"tavily": 73, "deepsearch": 1}
