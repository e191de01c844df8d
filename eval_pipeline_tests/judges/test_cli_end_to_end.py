"""The issue's demonstration: ``eval-pipeline run`` with LLM judges on fake servers.

Through the whole Dagster graph: both providers score every clip, a rerun of the same
input makes no call (every row cached), and the key is nowhere in the outputs, the Parquet
tables or the Dagster instance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.cli import main

KEY = "sk-e2e-OPENAI-0a1b2c3d4e5f"
ANT_KEY = "sk-ant-e2e-9f8e7d6c5b4a"


def _all_bytes_contain(root: Path, needle: str) -> list[Path]:
    data = needle.encode()
    return [p for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


def test_cli_run_with_llm_judges_rerun_costs_nothing(openai_server, anthropic_server, tmp_path,
                                                     monkeypatch, capsys, project_root):
    sample = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    if not sample.is_file():
        pytest.skip("sample drop not present")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("E2E_OPENAI_KEY", KEY)
    monkeypatch.setenv("E2E_ANTHROPIC_KEY", ANT_KEY)
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        "judges:\n"
        "  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
        f"    base_url: {openai_server.base_url}\n    api_key_env: E2E_OPENAI_KEY\n"
        "  - name: claude\n    provider: anthropic\n"
        f"    base_url: {anthropic_server.base_url}\n    api_key_env: E2E_ANTHROPIC_KEY\n",
        "utf-8")
    out = tmp_path / "out"
    args = ["run", str(sample), "--output", str(out), "--judges", str(judges)]

    assert main(args) == 0
    first = (openai_server.calls, anthropic_server.calls)
    assert first[0] > 0 and first[0] == first[1]
    gpt = pd.read_parquet(out / "judgments__gpt.parquet")
    claude = pd.read_parquet(out / "judgments__claude.parquet")
    assert (gpt["status"] == "ok").all() and (claude["status"] == "ok").all()
    assert len(gpt) == len(claude) == first[0]
    assert set(claude["model"]) == {"claude-sonnet-4-5"}  # the preset's default model
    # The average is over both judges, metric by metric.
    averaged = pd.read_parquet(out / "averaged_scores.parquet")
    assert (averaged["n_judges_succeeded"] == 2).all() and len(averaged) == len(gpt)
    # Default evaluations: the rubric per clip plus the three ReAct kinds.
    clips = pd.read_parquet(out / "clips.parquet")
    tool_clips = clips[clips["tool_type"] != "final"]
    counts = gpt["evaluation_kind"].value_counts().to_dict()
    assert counts == {"clip_rubric": len(clips), "thought_to_tool": len(tool_clips),
                      "query_to_thought": int((tool_clips["thought"].str.strip() != "").sum()),
                      "sequence_optimality": clips["trajectory_id"].nunique()}
    rubric = averaged[averaged["evaluation_kind"] == "clip_rubric"]
    row = rubric.iloc[0]
    key = (row["trajectory_id"], row["clip_index"])
    pair = [json.loads(t[t["evaluation_kind"] == "clip_rubric"]
                       .set_index(["trajectory_id", "clip_index"]).loc[key, "scores"])
            for t in (gpt, claude)]
    expected = {m: (pair[0][m] + pair[1][m]) / 2 for m in pair[0]}
    assert json.loads(row["scores"]) == pytest.approx(expected)
    # Both fakes answer every ReAct prompt with the positive label: full agreement.
    react = averaged[averaged["evaluation_kind"] != "clip_rubric"]
    assert set(react["label"]) == {"correct", "optimal"} and (react["mean_score"] == 1.0).all()
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    assert (summaries["sequence_optimality"] == 1.0).all()

    assert main(args) == 0
    assert (openai_server.calls, anthropic_server.calls) == first, "rerun must not call"
    gpt = pd.read_parquet(out / "judgments__gpt.parquet")
    assert gpt["cached"].all() and gpt["cost_usd"].sum() == 0.0
    capsys.readouterr()

    for secret in (KEY, ANT_KEY):
        assert not _all_bytes_contain(out, secret)
        assert not _all_bytes_contain(tmp_path / "home", secret)
