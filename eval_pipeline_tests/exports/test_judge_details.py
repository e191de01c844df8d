"""#8.2: per-judge detail files and the multi-model fields, with the heuristic judge and
with two LLM judges on the fake servers (through the official SDKs), one more dead."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.exports import write_exports
from eval_pipeline.exports.judge_details import judge_detail_files, judgment_tables
from eval_pipeline.rubrics import ALL_EVALUATIONS
from eval_pipeline_tests.exports.helpers import run_tables
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _prompt_lengths(server) -> list[int]:
    """len(system) + len(user) of every request the server received."""
    out = []
    for request in server.requests:
        body = request.body
        system = body.get("system")
        texts = [m["content"] for m in body["messages"]]
        if isinstance(system, str):
            texts.append(system)
        elif isinstance(system, list):
            texts += [part["text"] for part in system]
        out.append(sum(len(t) if isinstance(t, str) else sum(len(p["text"]) for p in t)
                       for t in texts))
    return sorted(out)


def test_heuristic_detail_files_hold_every_clip_of_every_trajectory(small_drop, tmp_path):
    tables = run_tables(small_drop)
    clips, judged = tables["clips"], tables["judgments__heuristic"]
    files = judge_detail_files(judgment_tables(tables), clips,
                               tables["preprocessed_trajectories"])
    task_ids = tables["preprocessed_trajectories"]["task_id"].tolist()
    assert sorted(files) == sorted(f"heuristic_heuristic-v1_{t}_eva.json" for t in task_ids)
    written = write_exports(tables, tmp_path)
    for name, content in files.items():
        on_disk = json.loads((tmp_path / "judge_details" / name).read_text("utf-8"))
        assert on_disk["task_id"] == content.task_id
        assert on_disk["model_name"] == "heuristic_heuristic-v1"
        own = clips[clips["trajectory_id"] == content.trajectory_id]
        assert on_disk["total_clips"] == len(own)
        assert [e["clip_index"] for e in on_disk["evaluations"]] == sorted(own["clip_index"])
        for evaluation in on_disk["evaluations"]:
            row = judged[(judged["trajectory_id"] == content.trajectory_id)
                         & (judged["clip_index"] == evaluation["clip_index"])
                         & (judged["evaluation_kind"] == "clip_rubric")].iloc[0]
            clip = own[own["clip_index"] == evaluation["clip_index"]].iloc[0]
            assert evaluation["clip_content"] == clip["content"]
            assert evaluation["evaluation_input"]["tool_type"] == clip["tool_type"]
            assert evaluation["evaluation_input"]["has_tool_call"] == bool(clip["tool_call"])
            assert evaluation["evaluation_output"]["scores"] == json.loads(row["scores"])
            assert evaluation["evaluation_output"]["reasoning"] == row["reasoning"]
            assert evaluation["evaluation_output"]["raw_response"] == row["raw_response"]
            # The prompt was rendered again and hashed to the row's prompt_hash.
            assert evaluation["evaluation_input"]["prompt_length"] > 1000
        kinds = {e["evaluation_kind"] for e in on_disk["react_evaluations"]}
        assert "sequence_optimality" in kinds and "clip_rubric" not in kinds
    assert sum(n.startswith("judge_details/") for n in written) == len(task_ids)


@pytest.fixture
def two_llm_judges_and_a_dead_one(small_drop, openai_server, anthropic_server, monkeypatch):
    monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-fake-openai-0000")
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-fake-anthropic-0000")
    anthropic_server.score = 0.4
    dead = openai_config(openai_server, name="dead", model="gpt-4o",
                         base_url=f"http://127.0.0.1:{_closed_port()}/v1", max_retries=0,
                         timeout_s=1.0, evaluations=list(ALL_EVALUATIONS))
    judges = [openai_config(openai_server, evaluations=list(ALL_EVALUATIONS)),
              anthropic_config(anthropic_server, evaluations=list(ALL_EVALUATIONS)), dead]
    return run_tables(small_drop, judges), openai_server, anthropic_server


def test_llm_judges_detail_files_and_multi_model_fields(two_llm_judges_and_a_dead_one,
                                                        tmp_path):
    tables, openai_server, anthropic_server = two_llm_judges_and_a_dead_one
    write_exports(tables, tmp_path)
    folder = tmp_path / "judge_details"
    trajectories = tables["preprocessed_trajectories"]
    for task_id in trajectories["task_id"]:
        for prefix in ("openai_gpt-4.1-mini", "anthropic_claude-sonnet-4-5", "openai_gpt-4o"):
            assert (folder / f"{prefix}_{task_id}_eva.json").is_file()

    # Every prompt length is the length of a prompt the server really received.
    for server, prefix in ((openai_server, "openai_gpt-4.1-mini"),
                           (anthropic_server, "anthropic_claude-sonnet-4-5")):
        lengths = []
        for path in folder.glob(f"{prefix}_*_eva.json"):
            data = json.loads(path.read_text("utf-8"))
            for e in data["evaluations"] + data["react_evaluations"] + data["assessments"]:
                assert e["evaluation_output"]["success"] is True
                lengths.append(e["evaluation_input"]["prompt_length"])
        assert sorted(lengths) == _prompt_lengths(server)
        assert all(isinstance(n, int) for n in lengths)

    # The dead judge's judgments stay failed, with their error, and no score.
    for path in folder.glob("openai_gpt-4o_*_eva.json"):
        data = json.loads(path.read_text("utf-8"))
        for e in data["evaluations"] + data["react_evaluations"] + data["assessments"]:
            out = e["evaluation_output"]
            assert out["success"] is False and out["scores"] == {} and out["error_message"]

    # evaluation_metadata names all three models; the blocks average the two that answered.
    summaries = tables["trajectory_summaries"]
    for meta_text, full in zip(summaries["evaluation_metadata"],
                               summaries["full_response_with_evaluations"], strict=True):
        meta = json.loads(meta_text)
        assert meta["num_models"] == 3
        assert meta["model_names"] == ["openai_gpt-4.1-mini", "anthropic_claude-sonnet-4-5",
                                       "openai_gpt-4o"]
        assert meta["total_clips"] == full.count("<clip_evaluation>")
        blocks = re.findall(r"<clip_evaluation>.*?</clip_evaluation>", full, re.DOTALL)
        assert len(blocks) == meta["total_clips"]
        for block in blocks:
            assert "<model_info>Averaged from 2 models</model_info>" in block
            assert "<summary>Combined evaluation: " in block
            assert "<reasoning>Combined evaluation: " in block
    rubric = tables["averaged_scores"]
    rubric = rubric[rubric["evaluation_kind"] == "clip_rubric"]
    # 0.8 (openai fake) and 0.4 (anthropic fake) average to 0.6 on every metric.
    for scores in rubric["scores"]:
        values = list(json.loads(scores).values())
        assert values and values == pytest.approx([0.6] * len(values))


def test_duplicate_task_ids_and_shared_models_never_overwrite_a_file(small_drop, tmp_path):
    """Two judges on one provider and model, and a task id met twice: one file each."""
    lines = small_drop.read_text("utf-8").splitlines()
    record = json.loads(lines[0])
    twice = tmp_path / "twice.jsonl"
    twice.write_text(lines[0] + "\n" + json.dumps({**record, "duration": 1.0}) + "\n", "utf-8")
    from eval_pipeline.judges.config import JudgeConfig

    judges = [JudgeConfig(name="h1", provider="heuristic"),
              JudgeConfig(name="h2", provider="heuristic")]
    tables = run_tables(twice, judges)
    files = judge_detail_files(judgment_tables(tables), tables["clips"],
                               tables["preprocessed_trajectories"])
    task = record["task_id"]
    assert sorted(files) == sorted(
        f"heuristic_heuristic-v1_{judge}_{task}{suffix}_eva.json"
        for judge in ("h1", "h2") for suffix in ("", "__2"))
    assert len({(f.judge, f.trajectory_id) for f in files.values()}) == 4
    assert isinstance(tables["clips"], pd.DataFrame)


def test_file_names_are_safe_for_slashes_in_models_and_task_ids(small_drop, tmp_path):
    record = json.loads(small_drop.read_text("utf-8").splitlines()[0])
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({**record, "task_id": "a/b c"}) + "\n", "utf-8")
    tables = run_tables(odd)
    (name,) = judge_detail_files(judgment_tables(tables), tables["clips"],
                                 tables["preprocessed_trajectories"])
    assert name == "heuristic_heuristic-v1_a_b_c_eva.json"
    write_exports(tables, tmp_path / "out")
    assert (tmp_path / "out" / "judge_details" / name).is_file()
    assert Path(name).name == name


def test_prompt_lengths_are_the_rows_own_and_rendered_again_for_older_tables(
        two_llm_judges_and_a_dead_one, monkeypatch):
    """Rows record the length of the prompt sent; the detail files read it without
    rendering any prompt again, and tables judged before rows recorded it (no
    ``prompt_chars``) get the same lengths rendered again."""
    tables, openai_server, anthropic_server = two_llm_judges_and_a_dead_one
    judged = {name: t for name, t in tables.items() if name.startswith("judgments__")}
    sent = sorted(n for server in (openai_server, anthropic_server)
                  for n in _prompt_lengths(server))
    recorded = sorted(n for t in judged.values()
                      for n in t.loc[t["status"] == "ok", "prompt_chars"])
    assert recorded == sent
    assert all(t["prompt_chars"].gt(1000).all() for t in judged.values())  # failed rows too

    clips, trajectories = tables["clips"], tables["preprocessed_trajectories"]
    older = {name: t.drop(columns=["prompt_chars"]) if name in judged else t
             for name, t in tables.items()}
    rendered = judge_detail_files(judgment_tables(older), clips, trajectories)

    def no_rendering(*_args, **_kwargs):
        raise AssertionError("a prompt was rendered again")

    monkeypatch.setattr("eval_pipeline.exports.judge_details.clip_tasks", no_rendering)
    read = judge_detail_files(judgment_tables(tables), clips, trajectories)
    assert {n: f.model_dump() for n, f in read.items()} == {
        n: f.model_dump() for n, f in rendered.items()}
    lengths = [e.evaluation_input.prompt_length for f in read.values()
               for e in f.evaluations + f.react_evaluations + f.assessments]
    assert lengths and all(isinstance(n, int) and n > 1000 for n in lengths)
