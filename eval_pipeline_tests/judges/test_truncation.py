"""Oversized trajectory fields are cut for an LLM judge (#10.5): head and tail around a marker
saying how much was left out, within the judge's ``input_max_chars``; the row records it, the
asset metadata counts such rows, and the limit versions the judge like its other
answer-shaping settings. Short fields reach the server exactly as they were."""

from __future__ import annotations

import asyncio
import json
import re

import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline.defs.pipeline.assets.judging import (
    judge_code_version,
    judgment_metadata,
    judgment_table,
)
from eval_pipeline.defs.pipeline.resources import LLMJudgeResource, judge_resources
from eval_pipeline.judges.base import ClipTask, ClipView
from eval_pipeline.judges.config import DEFAULT_INPUT_MAX_CHARS, JudgeConfig
from eval_pipeline.judges.requests import build_request, cut_text
from eval_pipeline.rubrics import ALL_EVALUATIONS
from eval_pipeline_tests.judges.conftest import SECRET
from eval_pipeline_tests.judges.helpers import openai_config

LIMIT = 2_500
_BLOCK = re.compile(r"<(data-[0-9a-f]{8}x*)>\n(.*?)\n</\1>", re.DOTALL)
_MARKER = re.compile(r"\[\.\.\. (\d+) characters left out \.\.\.\]")


def _long(tag: str, size: int) -> str:
    """``size`` characters: a recognisable head, a middle and a tail."""
    middle = f" {tag}-MIDDLE " * (size // 10)
    text = f"{tag}-HEAD {middle} {tag}-TAIL"
    return text[:size - len(f" {tag}-TAIL")] + f" {tag}-TAIL"


def _tasks() -> list[ClipTask]:
    big = ClipTask(
        trajectory_id="big", clip_index=0, tool_type="microsandbox",
        task_description=_long("TASK", 4_000),
        clip=ClipView(content=_long("CLIP", 12_000), thought=_long("THOUGHT", 3_000),
                      tool_name="python", action_input=_long("INPUT", 6_000),
                      result=_long("RESULT", 9_000)))
    big_final = ClipTask(trajectory_id="big", clip_index=1, tool_type="final",
                         task_description=big.task_description,
                         clip=ClipView(content="<answer>42</answer>", has_answer=True))
    small = ClipTask(trajectory_id="small", clip_index=0, tool_type="microsandbox",
                     task_description="Add two numbers.",
                     clip=ClipView(content="<think>add</think><result>3</result>",
                                   thought="I add them.", tool_name="python",
                                   action_input="1+2", result="3"))
    return [big, big_final, small]


def _resource(server, **fields) -> LLMJudgeResource:
    values = {"name": "gpt", "provider": "openai", "model": "gpt-4.1-mini",
              "base_url": server.base_url, "api_key": SECRET, "timeout_s": 5.0,
              "evaluations": list(ALL_EVALUATIONS), "input_max_chars": LIMIT,
              "cache_enabled": False, **fields}
    return LLMJudgeResource(**values)


def _user_prompts(server) -> list[str]:
    return [next(m["content"] for m in r.body["messages"] if m["role"] == "user")
            for r in server.requests]


def test_cut_keeps_head_and_tail_and_says_how_much_is_missing():
    text = _long("X", 10_000)
    cut, left_out = cut_text(text, LIMIT)
    assert len(cut) <= LIMIT
    marker = _MARKER.search(cut)
    assert int(marker.group(1)) == left_out
    head, tail = cut[:marker.start() - 1], cut[marker.end() + 1:]  # the marker's own lines
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + left_out + len(tail) == len(text)  # exactly the middle is left out
    assert abs(len(head) - len(tail)) <= 1
    assert cut_text("short", LIMIT) == ("short", 0)
    assert cut_text("x" * LIMIT, LIMIT) == ("x" * LIMIT, 0)  # at the limit: untouched


def test_the_server_receives_cut_fields_and_each_row_records_what_it_lost(openai_server):
    tasks = _tasks()
    outcome = asyncio.run(_resource(openai_server).run_result(tasks))
    assert outcome.failed is None
    rows = {(r.trajectory_id, r.clip_index, r.evaluation_kind): r for r in outcome.rows}
    assert all(r.status == "ok" for r in rows.values())

    prompts = _user_prompts(openai_server)
    big = tasks[0]
    for prompt in prompts:
        # every fenced field fits the limit, and the fences still hold
        assert all(len(m.group(2)) <= LIMIT for m in _BLOCK.finditer(prompt))
        for whole in (big.task_description, big.clip.content, big.clip.thought,
                      big.clip.action_input):
            assert whole not in prompt
    rubric = next(p for p in prompts if "CLIP-HEAD" in p)
    assert "CLIP-TAIL" in rubric and "TASK-HEAD" in rubric and "TASK-TAIL" in rubric
    lost = {m: cut_text(getattr(big.clip, m, None) or big.task_description, LIMIT)[1]
            for m in ("content", "thought", "action_input")}
    lost["task"] = cut_text(big.task_description, LIMIT)[1]
    assert f"[... {lost['content']} characters left out ...]" in rubric
    thought_to_tool = next(p for p in prompts if "INPUT-HEAD" in p
                           and "determine if the \"Action\"" in p)
    assert "INPUT-TAIL" in thought_to_tool and "THOUGHT-TAIL" in thought_to_tool

    assert rows[("big", 0, "clip_rubric")].truncated_chars == lost["task"] + lost["content"]
    assert rows[("big", 0, "thought_to_tool")].truncated_chars == (
        lost["task"] + lost["thought"] + lost["action_input"])
    assert rows[("big", 0, "query_to_thought")].truncated_chars == (
        lost["task"] + lost["thought"])
    assert rows[("big", -1, "sequence_optimality")].truncated_chars == lost["task"]
    # the assessments show each clip shortened to their own bound, whatever the limit:
    # only the task description's cut is counted
    assert rows[("big", -1, "category_assessment")].truncated_chars == lost["task"]
    assert rows[("big", -1, "trajectory_assessment")].truncated_chars == lost["task"]
    assert rows[("big", 1, "clip_rubric")].truncated_chars == lost["task"]
    small = [r for key, r in rows.items() if key[0] == "small"]
    assert small and all(r.truncated_chars == 0 for r in small)

    # Short fields are untouched: the small clip's prompt is the one built from the task.
    expected = build_request(tasks[2], "").user_prompt
    assert expected in prompts

    # The asset's metadata counts the truncated rows.
    config = _resource(openai_server).judge_config()
    table = judgment_table(outcome.rows)
    assert list(table.columns).count("truncated_chars") == 1
    meta = judgment_metadata(config, outcome.rows, table, outcome)
    assert meta["truncated_rows"] == sum(r.truncated_chars > 0 for r in outcome.rows) == 7
    assert meta["truncated_chars"] == int(table["truncated_chars"].sum())


def test_the_limit_versions_the_judge_and_a_new_limit_re_asks_only_what_it_cuts(
        openai_server, tmp_path):
    cache = str(tmp_path / "cache.sqlite")
    tasks = _tasks()
    evaluations = ["clip_rubric"]
    first = asyncio.run(_resource(openai_server, cache_enabled=True, cache_path=cache,
                                  evaluations=evaluations).run(tasks))
    assert openai_server.calls == 3 and not any(r.cached for r in first)
    wider = asyncio.run(_resource(openai_server, cache_enabled=True, cache_path=cache,
                                  evaluations=evaluations, input_max_chars=20_000).run(tasks))
    # The big trajectory's prompts change (both its clips carry the cut task description);
    # the small one's do not, so it is served from the cache.
    by_key = {(r.trajectory_id, r.clip_index): r for r in wider}
    assert by_key[("small", 0)].cached
    assert not by_key[("big", 0)].cached and not by_key[("big", 1)].cached
    assert by_key[("big", 0)].truncated_chars == 0  # 20,000 cuts nothing here
    assert openai_server.calls == 3 + 2
    base = openai_config(openai_server)
    assert judge_code_version(base) != judge_code_version(
        base.model_copy(update={"input_max_chars": 20_000}))
    heuristic = JudgeConfig(name="h")
    assert judge_code_version(heuristic) == judge_code_version(
        heuristic.model_copy(update={"input_max_chars": 20_000}))


def test_the_default_limit_and_the_heuristic_reads_whole_fields():
    assert JudgeConfig(name="g", provider="openai").input_max_chars == DEFAULT_INPUT_MAX_CHARS
    resource = judge_resources([JudgeConfig(name="h")])["judge_h"]
    tasks = _tasks()
    fitted, truncation = resource.fit(tasks)
    assert fitted == tasks and not truncation.cut


@pytest.mark.slow
def test_cli_run_records_truncation_in_rows_and_asset_metadata(openai_server, tmp_path,
                                                               monkeypatch, capsys):
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRUNC_KEY", SECRET)
    huge = "line of tool output\n" * 500  # 10,000 characters
    record = {"task_id": "big", "task_description": "Print the log.", "success": True,
              "raw_response": "<think>Print it.</think><microsandbox><microsandbox_execute>"
                              "print(log)</microsandbox_execute></microsandbox>"
                              f"<result>{huge}</result><answer>done</answer>"}
    small = {"task_id": "small", "task_description": "Add.", "success": True,
             "raw_response": "<think>Add.</think><microsandbox><microsandbox_execute>1+2"
                             "</microsandbox_execute></microsandbox><result>3</result>"
                             "<answer>3</answer>"}
    drop = tmp_path / "runs.jsonl"
    drop.write_text(json.dumps(record) + "\n" + json.dumps(small) + "\n", "utf-8")
    judges = tmp_path / "judges.yaml"
    judges.write_text(f"judges:\n  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
                      f"    base_url: {openai_server.base_url}\n    api_key_env: TRUNC_KEY\n"
                      f"    input_max_chars: {LIMIT}\n    evaluations: [clip_rubric]\n",
                      "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(drop), "--output", str(out), "--judges", str(judges)]) == 0
    capsys.readouterr()
    rows = pd.read_parquet(out / "judgments__gpt.parquet")
    assert (rows["status"] == "ok").all()
    task_of = pd.read_parquet(out / "raw_trajectories.parquet").set_index(
        "trajectory_id")["task_id"]
    cut = rows[rows["truncated_chars"] > 0]
    assert len(cut) >= 1 and set(cut["trajectory_id"].map(task_of)) == {"big"}
    assert (rows[rows["trajectory_id"].map(task_of) == "small"]["truncated_chars"] == 0).all()
    prompts = _user_prompts(openai_server)
    marked = [p for p in prompts if _MARKER.search(p)]
    assert len(marked) == len(cut)
    assert {int(_MARKER.search(p).group(1)) for p in marked} <= set(cut["truncated_chars"])
    with dg.DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["judgments", "gpt"]))
        meta = event.asset_materialization.metadata
    assert meta["truncated_rows"].value == len(cut)
