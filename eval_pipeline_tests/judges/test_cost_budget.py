"""Token and cost accounting per row, totals, and the budget cap."""

from __future__ import annotations

import pytest

from eval_pipeline.judges.runner import JudgeRuntime, summarize_rows
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run


def test_cost_per_row_and_totals_use_default_prices(openai_server, anthropic_server, tasks):
    rows = run(openai_config(openai_server), tasks)  # gpt-4.1-mini: $0.40 / $1.60 per Mtok
    per_call = (1000 * 0.40 + 200 * 1.60) / 1e6
    assert all(r.cost_usd == pytest.approx(per_call) for r in rows)
    total = summarize_rows(rows)
    assert total.cost_usd == pytest.approx(per_call * len(tasks))
    assert (total.tokens_in, total.tokens_out) == (1000 * len(tasks), 200 * len(tasks))

    claude = run(anthropic_config(anthropic_server), tasks)  # sonnet 4.5: $3 / $15
    assert summarize_rows(claude).cost_usd == pytest.approx(
        len(tasks) * (1000 * 3.0 + 200 * 15.0) / 1e6)


def test_configured_prices_override_defaults(openai_server, tasks):
    rows = run(openai_config(openai_server, input_price_per_mtok=1.0,
                             output_price_per_mtok=2.0), tasks)
    assert rows[0].cost_usd == pytest.approx((1000 * 1.0 + 200 * 2.0) / 1e6)


def test_repair_attempt_is_billed_too(openai_server, tasks):
    from eval_pipeline_tests.judges.fake_servers import text

    openai_server.push(text("not json"))
    rows = run(openai_config(openai_server, concurrency=1), tasks[:1])
    assert rows[0].repaired and rows[0].cost_usd == pytest.approx(
        2 * (1000 * 0.40 + 200 * 1.60) / 1e6)


def _budget_config(server, budget: float, concurrency: int = 1):
    # worst case per call: $10/Mtok x 1000 max tokens = $0.01; actual: 200 tokens = $0.002
    return openai_config(server, input_price_per_mtok=0.0, output_price_per_mtok=10.0,
                         max_tokens=1000, budget_usd=budget, concurrency=concurrency)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_budget_cap_skips_remaining_rows_and_is_never_exceeded(openai_server, tasks,
                                                               concurrency):
    rows = run(_budget_config(openai_server, 0.015, concurrency), tasks)
    ok = [r for r in rows if r.status == "ok"]
    skipped = [r for r in rows if r.status == "skipped"]
    # spent + worst case must stay <= 0.015: 0.002*(k-1) + 0.01 <= 0.015 -> k = 3
    assert len(ok) == 3 and openai_server.calls == 3
    assert len(skipped) == len(tasks) - 3 and len(rows) == len(tasks)
    assert all(r.scores == "{}" and not r.success and "budget cap reached" in r.error
               for r in skipped)
    assert summarize_rows(rows).cost_usd <= 0.015


def test_budget_needs_a_price(openai_server):
    config = openai_config(openai_server, model="some-unknown-model", budget_usd=1.0)
    with pytest.raises(ValueError, match="no known price"):
        JudgeRuntime.from_config(config)


def test_cache_hits_are_free_even_past_the_budget(openai_server, tasks, tmp_path):
    from eval_pipeline.judges.cache import JudgeCache

    cache = JudgeCache(tmp_path / "c.sqlite")
    run(openai_config(openai_server, input_price_per_mtok=0.0, output_price_per_mtok=10.0,
                      max_tokens=1000), tasks, cache=cache)
    rows = run(_budget_config(openai_server, 0.0001), tasks, cache=cache)
    assert all(r.status == "ok" and r.cached for r in rows)
    cache.close()
