"""The dry run estimates calls, tokens and cost and contacts nobody."""

from __future__ import annotations

import pytest

from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.estimate import TYPICAL_OUTPUT_TOKENS, estimate_cost
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run


def test_dry_run_counts_calls_and_cost_without_calling(openai_server, anthropic_server, tasks):
    configs = [openai_config(openai_server), anthropic_config(anthropic_server),
               JudgeConfig(name="heuristic"),
               JudgeConfig(name="local", provider="openai_compatible", preset="ollama")]
    estimate = estimate_cost(tasks, configs)
    assert openai_server.calls == anthropic_server.calls == 0

    gpt, claude, heuristic, local = estimate.judges
    assert gpt.calls == claude.calls == len(tasks) and heuristic.calls == 0
    assert gpt.est_tokens_out == len(tasks) * TYPICAL_OUTPUT_TOKENS
    assert 100 * len(tasks) < gpt.est_tokens_in < 2000 * len(tasks)
    assert gpt.est_cost_usd == pytest.approx(
        (gpt.est_tokens_in * 0.40 + gpt.est_tokens_out * 1.60) / 1e6)
    assert claude.est_cost_usd > gpt.est_cost_usd
    assert gpt.max_cost_usd > gpt.est_cost_usd
    assert local.est_cost_usd == 0.0 and local.model == "qwen2.5:7b"
    # local keeps the default evaluations: besides one rubric call per clip, one
    # thought_to_tool call per tool clip (all 6 here), no query_to_thought (the fixture's
    # clips state no thought), one sequence_optimality call per trajectory (2), and the
    # assessments: one per tool category used in each trajectory (3 each) and one per
    # trajectory.
    trajectories = len({t.trajectory_id for t in tasks})
    categories = len({(t.trajectory_id, t.tool_type) for t in tasks})
    assert categories == 6
    assert local.calls == len(tasks) + len(tasks) + trajectories + categories + trajectories
    assert estimate.calls == 2 * len(tasks) + local.calls

    table = estimate.to_table()
    for needle in ("gpt", "claude", "heuristic", "total", "est. cost"):
        assert needle in table


def test_dry_run_follows_the_cache(openai_server, tasks, tmp_path):
    cache = JudgeCache(tmp_path / "c.sqlite")
    config = openai_config(openai_server)
    run(config, tasks[:2], cache=cache)  # first two clips of t0 are judged
    estimate = estimate_cost(tasks, [config], cache=cache).judges[0]
    assert (estimate.cached, estimate.calls) == (2, len(tasks) - 2)

    run(config, tasks, cache=cache)
    assert estimate_cost(tasks, [config], cache=cache).judges[0].calls == 0
    # another model shares nothing
    other = estimate_cost(tasks, [openai_config(openai_server, model="gpt-4o")], cache=cache)
    assert other.judges[0].calls == len(tasks)
    cache.close()


def test_unpriced_model_is_reported_not_called_free(openai_server, tasks):
    estimate = estimate_cost(tasks, [openai_config(openai_server, model="mystery-model")])
    assert estimate.judges[0].est_cost_usd is None
    assert "unpriced" in estimate.to_table()


def test_budget_is_flagged_when_the_estimate_exceeds_it(openai_server, tasks):
    estimate = estimate_cost(tasks, [openai_config(openai_server, budget_usd=0.000001)])
    assert estimate.judges[0].over_budget and "(over)" in estimate.to_table()


def test_cli_dry_run_prints_the_estimate_and_calls_nothing(openai_server, tmp_path, monkeypatch,
                                                           capsys, project_root):
    from eval_pipeline.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        "judges:\n"
        "  - name: gpt\n"
        "    provider: openai_compatible\n"
        f"    base_url: {openai_server.base_url}\n"
        "    model: gpt-4.1-mini\n"
        "    api_key_env: FAKE_OPENAI_KEY\n", "utf-8")
    sample = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    if not sample.is_file():
        pytest.skip("sample drop not present")
    code = main(["run", str(sample), "--output", str(tmp_path / "out"), "--judges", str(judges),
                 "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and openai_server.calls == 0
    assert "gpt" in out and "est. cost" in out and "total" in out
    assert not (tmp_path / "out").exists()
