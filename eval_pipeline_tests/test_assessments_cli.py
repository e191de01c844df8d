"""The category and trajectory assessments through the whole graph (issue #8 item 1): the
CLI on data/ with the heuristic and two fake-server judges, a run with --no-assessments,
and samples of the public corpora."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline_tests.judges import fake_servers as fs
from eval_pipeline_tests.judges.conftest import SECRET
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer

KINDS = {"category_assessment", "trajectory_assessment"}


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def tool_types_by_trajectory(out: Path) -> dict[str, set[str]]:
    clips = pd.read_parquet(out / "clips.parquet")
    found: dict[str, set[str]] = defaultdict(set)
    for tid, tool in zip(clips["trajectory_id"], clips["tool_type"], strict=True):
        found[str(tid)]  # every trajectory, with or without a tool clip
        if tool != "final":
            found[str(tid)].add(str(tool))
    return found


def check_outputs(out: Path, judges_assessing: int) -> None:
    """What every run with assessments writes: rows, metadata blocks, text, report."""
    categories = tool_types_by_trajectory(out)
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    assert set(summaries["trajectory_id"]) == set(categories)
    for tid, meta_text, full in zip(summaries["trajectory_id"],
                                    summaries["evaluation_metadata"],
                                    summaries["full_response_with_evaluations"], strict=True):
        meta = json.loads(meta_text)
        # one category assessment per tool type the trajectory used, none from nothing
        assert set(meta.get("category_assessments", {})) == categories[tid]
        final = meta["final_trajectory_assessment"]
        assert final["status"] == "ok" and final["num_models"] == judges_assessing
        assert 0.0 <= final["overall_average"] <= 1.0
        for category, block in meta.get("category_assessments", {}).items():
            assert block["num_models"] == judges_assessing
            # every clip was scored in these runs, so the two counts agree
            assert block["clip_count"] == meta["tool_averages"][category]["clip_count"]
            assert f'<category_assessment category="{category}">' in full
        assert full.count("<final_trajectory_assessment>") == 1
    assert summaries["trajectory_assessment_score"].notna().all()

    records = [json.loads(line) for line in
               (out / "evaluated.jsonl").read_text("utf-8").splitlines()]
    assert len(records) == len(summaries)
    for record in records:
        meta = record["evaluation_metadata"]
        assert list(meta)[-1] == "final_trajectory_assessment"
        assert "<final_trajectory_assessment>" in record["full_response_with_evaluation"]

    report = pd.read_parquet(out / "evaluation_report.parquet").set_index("batch")
    assert report.loc["ALL", "trajectory_assessment_mean"] == pytest.approx(
        summaries["trajectory_assessment_score"].mean())
    assert json.loads(report.loc["ALL", "category_assessment_means"])
    text = (out / "report.md").read_text("utf-8")
    assert "## Category and trajectory assessments" in text
    for category in set().union(*categories.values()):
        assert f"Category {category}: assessed in " in text
    assert "Category and trajectory assessments" in (out / "report.html").read_text("utf-8")


@pytest.mark.slow
def test_cli_on_data_writes_the_assessments_of_two_judges_and_not_of_the_third(
        project_root, tmp_path, dagster_home, monkeypatch, capsys):
    openai_server = FakeLLMServer("openai").start()
    anthropic_server = FakeLLMServer("anthropic").start()
    try:
        monkeypatch.setenv("FAKE_OPENAI_KEY", SECRET)
        monkeypatch.setenv("FAKE_ANTHROPIC_KEY", SECRET)
        judges = tmp_path / "judges.yaml"
        judges.write_text(
            "judges:\n  - name: heuristic\n    provider: heuristic\n"
            "  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
            f"    base_url: {openai_server.base_url}\n    api_key_env: FAKE_OPENAI_KEY\n"
            "  - name: claude\n    provider: anthropic\n"
            f"    base_url: {anthropic_server.base_url}\n    api_key_env: FAKE_ANTHROPIC_KEY\n"
            "    assessments: false\n", "utf-8")
        out = tmp_path / "out"
        assert main(["run", str(project_root / "data"), "--output", str(out),
                     "--judges", str(judges)]) == 0
        printed = capsys.readouterr().out
        trajectory_prompts = [fs._user_prompt(r.body) for r in openai_server.requests
                              if "whole trajectory" in fs._user_prompt(r.body)]
        claude_assessed = [r for r in anthropic_server.requests
                           if "whole trajectory" in fs._user_prompt(r.body)]
    finally:
        openai_server.stop()
        anthropic_server.stop()

    gpt = pd.read_parquet(out / "judgments__gpt.parquet")
    heuristic = pd.read_parquet(out / "judgments__heuristic.parquet")
    claude = pd.read_parquet(out / "judgments__claude.parquet")
    assert not KINDS & set(claude["evaluation_kind"]) and not claude_assessed
    for table in (gpt, heuristic):
        counts = table["evaluation_kind"].value_counts()
        assert counts["trajectory_assessment"] == 27 and counts["category_assessment"] == 32
        assessed = table[table["evaluation_kind"].isin(KINDS)]
        assert (assessed["status"] == "ok").all() and (assessed["clip_index"] == -1).all()
    # every gpt trajectory prompt carried its clips and its categories' answers
    assert len(trajectory_prompts) == 27
    assert all("Category assessments:" in p and "Evaluation: scores" in p
               for p in trajectory_prompts)

    averaged = pd.read_parquet(out / "averaged_scores.parquet")
    assessed = averaged[averaged["evaluation_kind"].isin(KINDS)]
    assert (assessed["n_judges_succeeded"] == 2).all() and len(assessed) == 27 + 32
    check_outputs(out, judges_assessing=2)
    assert "trajectory assessment" in printed
    details = json.loads(next((out / "judge_details").glob("openai_*_eva.json"))
                         .read_text("utf-8"))
    assert {a["evaluation_kind"] for a in details["assessments"]} == KINDS
    assert all(isinstance(a["evaluation_input"]["prompt_length"], int)
               for a in details["assessments"])


@pytest.mark.slow
def test_no_assessments_flag_turns_them_off_for_one_run(project_root, tmp_path,
                                                        dagster_home, capsys):
    out = tmp_path / "out"
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    assert main(["run", str(drop), "--output", str(out), "--no-assessments"]) == 0
    assert "trajectory assessment" not in capsys.readouterr().out
    judged = pd.read_parquet(out / "judgments__heuristic.parquet")
    assert not KINDS & set(judged["evaluation_kind"])
    assert "clip_rubric" in set(judged["evaluation_kind"])
    for line in (out / "evaluated.jsonl").read_text("utf-8").splitlines():
        record = json.loads(line)
        assert "final_trajectory_assessment" not in record["evaluation_metadata"]
        assert "<final_trajectory_assessment>" not in record["full_response_with_evaluations"]
    assert "Category and trajectory assessments" not in (out / "report.md").read_text("utf-8")


@pytest.mark.slow
def test_corpora_samples_get_their_assessments(corpora_dir, tmp_path, dagster_home):
    """The original tool's own demo file, NewEva's tavily trajectories and the agent data
    platform's browser trajectories (a few records each, read in place)."""
    drops = tmp_path / "drops"
    drops.mkdir()
    for name, source, lines in (
            ("demo01", corpora_dir / "dataeva" / "demo01.jsonl", 3),
            ("nq_hotpot", corpora_dir / "dataeva" / "nq_hotpot_qa_cleaned.first50.jsonl", 5),
            ("adp_lite", corpora_dir / "agent_data_platform"
             / "trajectories-lite_2025-07-12.jsonl", 3)):
        head = source.read_text("utf-8").splitlines()[:lines]
        (drops / f"{name}.jsonl").write_text("\n".join(head) + "\n", "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(drops), "--output", str(out)]) == 0
    check_outputs(out, judges_assessing=1)
    categories = set().union(*tool_types_by_trajectory(out).values())
    assert {"microsandbox", "tavily", "browser_use"} <= categories
