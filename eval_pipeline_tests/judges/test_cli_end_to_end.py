"""The issue's demonstration: ``eval-pipeline run`` with LLM judges on fake servers.

Through the whole Dagster graph: both providers score every clip, a rerun of the same
input makes no call (every row cached), nor does the UI's code location re-materializing a
batch on the same instance, and the key is nowhere in the outputs, the store's Parquet or
the Dagster instance.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline.definitions import defs
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION

KEY = "sk-e2e-OPENAI-0a1b2c3d4e5f"
ANT_KEY = "sk-ant-e2e-9f8e7d6c5b4a"


def _all_bytes_contain(root: Path, needle: str) -> list[Path]:
    data = needle.encode()
    return [p for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


@pytest.mark.slow
def test_cli_run_with_llm_judges_rerun_costs_nothing(openai_server, anthropic_server, tmp_path,
                                                     monkeypatch, capsys, project_root,
                                                     isolated_store):
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
                      "sequence_optimality": clips["trajectory_id"].nunique(),
                      "category_assessment": len(tool_clips[["trajectory_id", "tool_type"]]
                                                 .drop_duplicates()),
                      "trajectory_assessment": clips["trajectory_id"].nunique()}
    rubric = averaged[averaged["evaluation_kind"] == "clip_rubric"]
    row = rubric.iloc[0]
    key = (row["trajectory_id"], row["clip_index"])
    pair = [json.loads(t[t["evaluation_kind"] == "clip_rubric"]
                       .set_index(["trajectory_id", "clip_index"]).loc[key, "scores"])
            for t in (gpt, claude)]
    expected = {m: (pair[0][m] + pair[1][m]) / 2 for m in pair[0]}
    assert json.loads(row["scores"]) == pytest.approx(expected)
    # Both fakes answer every ReAct prompt with the positive label: full agreement.
    react = averaged[averaged["evaluation_kind"].isin(
        ["thought_to_tool", "query_to_thought", "sequence_optimality"])]
    assert set(react["label"]) == {"correct", "optimal"} and (react["mean_score"] == 1.0).all()
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    assert (summaries["sequence_optimality"] == 1.0).all()

    assert main(args) == 0
    assert (openai_server.calls, anthropic_server.calls) == first, "rerun must not call"
    gpt = pd.read_parquet(out / "judgments__gpt.parquet")
    assert gpt["cached"].all() and gpt["cost_usd"].sum() == 0.0
    capsys.readouterr()

    # The UI's code location on the same instance and store, with the same judges file,
    # re-materializes a batch's judgments from the shared judge cache: no call either.
    monkeypatch.setenv("EVAL_PIPELINE_JUDGES", str(judges))
    location = defs()
    with dg.DagsterInstance.get() as instance:
        batch = instance.get_dynamic_partitions(BATCHES_PARTITION)[0]
        result = location.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, partition_key=batch,
            asset_selection=[dg.AssetKey(["judgments", "gpt"]),
                             dg.AssetKey(["judgments", "claude"])])
    assert result.success
    # The UI's resource setup checks each endpoint once (a 1-token request, #10.7); no
    # judgment is asked again.
    assert (openai_server.calls, anthropic_server.calls) == (first[0] + 1, first[1] + 1)
    for server in (openai_server, anthropic_server):
        check = server.requests[-1].body
        assert check.get("max_tokens", check.get("max_completion_tokens")) == 1

    for secret in (KEY, ANT_KEY):
        for folder in (out, tmp_path / "home", isolated_store):
            assert not _all_bytes_contain(folder, secret), folder


@pytest.mark.slow
def test_cli_run_against_servers_without_structured_output(tmp_path, monkeypatch, capsys,
                                                           project_root):
    """Issue 7/15 as a new user met it: llama-cpp-python's server refuses json_schema (this
    opened the breaker and failed the batch) and an Anthropic-compatible server without tool
    calling (0 of 5 rows). Both judges now fall back once and every row is ok."""
    from eval_pipeline_tests.judges.fake_servers import FakeLLMServer

    full = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    if not full.is_file():
        pytest.skip("sample drop not present")
    sample = tmp_path / "four_runs.jsonl"  # one batch: one run, one judge object
    sample.write_text("".join(full.read_text("utf-8").splitlines(keepends=True)[:4]), "utf-8")
    refusing = FakeLLMServer("openai", structured="json_object_only").start()
    no_tools = FakeLLMServer("anthropic", tools=False).start()
    try:
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
        judges = tmp_path / "judges.yaml"
        judges.write_text(
            "judges:\n"
            "  - name: local\n    provider: openai_compatible\n    model: m\n"
            f"    base_url: {refusing.base_url}\n"
            "  - name: claude\n    provider: anthropic\n    api_key_env: E2E_ANTHROPIC_KEY\n"
            f"    base_url: {no_tools.base_url}\n", "utf-8")
        monkeypatch.setenv("E2E_ANTHROPIC_KEY", ANT_KEY)
        out = tmp_path / "out"
        assert main(["run", str(sample), "--output", str(out), "--judges", str(judges)]) == 0
        capsys.readouterr()
        for name in ("local", "claude"):
            rows = pd.read_parquet(out / f"judgments__{name}.parquet")
            assert (rows["status"] == "ok").all(), rows["error"].dropna().head().tolist()
            assert len(rows) > 10 and rows["evaluation_kind"].nunique() == 6  # assessments too
        # one refused request in the whole run, and one forced tool use answered as text
        assert refusing.refused == 1
        assert refusing.calls == 1 + len(pd.read_parquet(out / "judgments__local.parquet"))
        assert sum("tools" in r.body for r in no_tools.requests) == 1
    finally:
        refusing.stop()
        no_tools.stop()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_a_dead_judge_beside_a_live_one_costs_it_nothing(tmp_path, monkeypatch, capsys,
                                                          project_root):
    sample = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("E2E_OPENAI_KEY", KEY)
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        "judges:\n"
        "  - name: rules\n    provider: heuristic\n"
        "  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
        f"    base_url: http://127.0.0.1:{_closed_port()}/v1\n"
        "    api_key_env: E2E_OPENAI_KEY\n    max_retries: 0\n    timeout_s: 5\n",
        "utf-8")
    out = tmp_path / "out"
    code = main(["run", str(sample), "--output", str(out), "--judges", str(judges)])
    printed = capsys.readouterr()
    assert code == 3
    assert "judge 'gpt' failed: 0 of" in printed.err and "rules" not in printed.err
    assert "JUDGES FAILED" in printed.out
    gpt = pd.read_parquet(out / "judgments__gpt.parquet")
    rules = pd.read_parquet(out / "judgments__rules.parquet")
    # Every judgment of the dead judge accounted for, failed with its error, no score.
    assert len(gpt) == len(rules) and (gpt["status"] == "failed").all()
    assert gpt["error"].str.len().gt(0).all() and (gpt["scores"] == "{}").all()
    assert (rules["status"] == "ok").all()
    averaged = pd.read_parquet(out / "averaged_scores.parquet")
    assert (averaged["n_judges_succeeded"] == 1).all() and (averaged["status"] == "ok").all()
    kept = pd.read_parquet(out / "preprocessed_trajectories.parquet")
    evaluated = (out / "evaluated.jsonl").read_text("utf-8").splitlines()
    assert len(evaluated) == len(kept) > 0
    assert (out / "evaluation_report.parquet").exists()


@pytest.mark.slow
def test_the_judges_of_a_run_call_their_providers_at_the_same_time(
        tmp_path, monkeypatch, project_root):
    from eval_pipeline_tests.judges.fake_servers import FakeLLMServer

    servers = [FakeLLMServer("openai", latency_s=0.1).start(),
               FakeLLMServer("anthropic", latency_s=0.1).start()]
    try:
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("E2E_OPENAI_KEY", KEY)
        monkeypatch.setenv("E2E_ANTHROPIC_KEY", ANT_KEY)
        judges = tmp_path / "judges.yaml"
        judges.write_text(
            "judges:\n"
            "  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
            f"    base_url: {servers[0].base_url}\n    api_key_env: E2E_OPENAI_KEY\n"
            "  - name: claude\n    provider: anthropic\n"
            f"    base_url: {servers[1].base_url}\n    api_key_env: E2E_ANTHROPIC_KEY\n",
            "utf-8")
        sample = project_root / "data" / "incoming" / "sample_malformed.jsonl"
        assert main(["run", str(sample), "--output", str(tmp_path / "out"),
                     "--judges", str(judges)]) == 0
        # Each provider was busy while the other was: their busy spans overlap.
        spans = [(s._first_at, s._changed_at) for s in servers]
        assert all(s.calls > 0 for s in servers)
        assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]
    finally:
        for server in servers:
            server.stop()
