"""Judge stability (``repeats``): N asks per judgment through the real SDKs, one row each
with the mean over the ok repeats, their spread, and whether they straddle the threshold."""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence

import pandas as pd
import pytest

from eval_pipeline.defs.pipeline.assets.judging import (
    judge_code_version,
    judgment_metadata,
    judgment_table,
)
from eval_pipeline.defs.pipeline.resources import JudgeOutcome
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.cache import CACHE_FORMAT, JudgeCache
from eval_pipeline.judges.config import JudgesFileError, parse_judges
from eval_pipeline.judges.estimate import estimate_cost
from eval_pipeline.judges.repeats import mean_per_clip_std, straddling
from eval_pipeline.judges.requests import build_request
from eval_pipeline.judges.runner import JudgmentRow
from eval_pipeline.judges.schema import schema_version
from eval_pipeline.rubrics import REACT_EVALUATIONS
from eval_pipeline_tests.judges import fake_servers as fs
from eval_pipeline_tests.judges.conftest import SECRET, make_tasks
from eval_pipeline_tests.judges.helpers import openai_config, run, scores_of

# Trajectory 0's answers fall on both sides of 0.5, trajectory 1's never do.
STRADDLING = (0.2, 0.6, 0.9)
STEADY = (0.6, 0.7, 0.9)


def per_prompt(values_of: Callable[[str], Sequence[float]]) -> Callable[[str], float]:
    """A ``score_of`` whose k-th answer to one prompt is ``values_of(prompt)[k]``: the same
    question asked again gets a different score, as from a model sampled at temperature."""
    seen: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def score_of(prompt: str) -> float:
        with lock:
            k = seen[prompt]
            seen[prompt] += 1
        values = values_of(prompt)
        return values[k % len(values)]

    return score_of


def by_trajectory(prompt: str) -> Sequence[float]:
    return STRADDLING if "Task 0:" in prompt else STEADY


def hand_std(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


@pytest.fixture
def varying_server():
    server = fs.FakeLLMServer("openai", score_of=per_prompt(by_trajectory)).start()
    yield server
    server.stop()


@pytest.fixture
def cache(tmp_path):
    c = JudgeCache(tmp_path / "judge_cache.sqlite")
    yield c
    c.close()


def cache_keys(cache: JudgeCache) -> set[str]:
    with sqlite3.connect(cache.path) as conn:
        return {k for (k,) in conn.execute("SELECT key FROM judge_calls")}


def test_three_repeats_store_the_mean_the_spread_and_the_straddle(varying_server, tasks):
    rows = run(openai_config(varying_server, repeats=3), tasks)

    assert varying_server.calls == 3 * len(tasks)
    assert len(rows) == len(tasks), "one row per judgment, whatever the repeats"
    for row in rows:
        values = STRADDLING if row.trajectory_id == "t0" else STEADY
        assert row.status == "ok" and row.repeats_ok == 3 and row.attempts == 3
        std = json.loads(row.score_std)
        assert set(std) == set(scores_of(row)) and std
        for metric, score in scores_of(row).items():
            assert score == pytest.approx(sum(values) / 3)
            assert std[metric] == pytest.approx(hand_std(values))
        assert row.straddles is (row.trajectory_id == "t0")
    assert straddling(rows) == 3
    assert mean_per_clip_std(rows) == pytest.approx(
        (hand_std(STRADDLING) + hand_std(STEADY)) / 2)

    config = openai_config(varying_server, repeats=3)
    meta = judgment_metadata(config, rows, judgment_table(rows),
                             JudgeOutcome("gpt", rows, "json_schema", None))
    assert meta["straddling_clips"] == 3 and meta["repeats"] == 3
    assert meta["mean_per_clip_std"].value == pytest.approx(  # type: ignore[attr-defined]
        (hand_std(STRADDLING) + hand_std(STEADY)) / 2)
    assert {"repeats_ok", "score_std", "straddles"} <= set(judgment_table(rows).columns)


def test_the_context_chain_carries_repeat_zeros_summary(varying_server):
    tasks = make_tasks(1, 2)
    rows = run(openai_config(varying_server, repeats=3, concurrency=1), tasks)
    # One at a time, repeat 0 of clip 0 is the first request: its summary is "clip summary 1".
    assert rows[0].summary == "clip summary 1"
    assert rows[1].previous_context == "[Previous: clip summary 1]"
    sent = [r.body["messages"][-1]["content"] for r in varying_server.requests[3:]]
    assert all("clip summary 1" in p and "clip summary 2" not in p for p in sent)


def test_a_rerun_makes_no_call_and_a_third_repeat_makes_one_call_each(varying_server, tasks,
                                                                    cache):
    first = run(openai_config(varying_server, repeats=2), tasks, cache=cache)
    assert varying_server.calls == 2 * len(tasks)

    again = run(openai_config(varying_server, repeats=2), tasks, cache=cache)
    assert varying_server.calls == 2 * len(tasks), "a rerun of unchanged work must not call"
    assert all(r.cached and r.cost_usd == 0.0 and r.attempts == 0 for r in again)
    assert [(r.scores, r.score_std, r.straddles) for r in again] == \
        [(r.scores, r.score_std, r.straddles) for r in first]

    third = run(openai_config(varying_server, repeats=3), tasks, cache=cache)
    assert varying_server.calls == 3 * len(tasks), "exactly one new call per judgment"
    assert all(r.repeats_ok == 3 and not r.cached and r.attempts == 1 for r in third)
    # the two cached answers plus the server's third answer to that prompt
    for row in third:
        values = STRADDLING if row.trajectory_id == "t0" else STEADY
        assert all(v == pytest.approx(sum(values) / 3) for v in scores_of(row).values())
        assert all(v == pytest.approx(hand_std(values))
                   for v in json.loads(row.score_std).values())


def _old_cache_key(identity: dict[str, object], request) -> str:  # type: ignore[no-untyped-def]
    """The key as it was before ``repeats`` existed."""
    material = {
        "format": CACHE_FORMAT, "identity": identity,
        "evaluation_kind": request.evaluation_kind, "system": request.system_prompt,
        "user": request.user_prompt, "metrics": request.metrics,
        "schema": schema_version(request.metrics, request.labels),
        "template_version": request.template_version,
    }
    blob = json.dumps(material, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def test_one_repeat_is_todays_judge_and_keeps_its_cache_keys(openai_server, tasks, cache):
    config = openai_config(openai_server)
    assert config.repeats == 1
    rows = run(config, tasks, cache=cache)
    assert openai_server.calls == len(tasks) and len(rows) == len(tasks)
    assert all(r.status == "ok" and r.repeats_ok == 1 and r.score_std == "{}"
               and not r.straddles and r.attempts == 1 for r in rows)
    assert all(v == 0.8 for r in rows for v in scores_of(r).values())

    identity = make_judge(config, SECRET).cache_identity()  # type: ignore[attr-defined]
    by_clip = {(t.trajectory_id, t.clip_index): t for t in tasks}
    expected = {_old_cache_key(identity, build_request(by_clip[(r.trajectory_id,
                                                                r.clip_index)],
                                                       r.previous_context))
                for r in rows}
    assert cache_keys(cache) == expected, "repeat 0 keeps the key it has always had"

    # that cache answers repeat 0 of a judge asking three times
    rows3 = run(openai_config(openai_server, repeats=3), tasks, cache=cache)
    assert openai_server.calls == len(tasks) + 2 * len(tasks)
    assert [r.previous_context for r in rows3] == [r.previous_context for r in rows]
    # and its code version is the one it had (no "repeats" in it), unlike at 3
    assert judge_code_version(config) == judge_code_version(
        config.model_copy(update={"repeats": 1}))
    assert judge_code_version(config) != judge_code_version(
        config.model_copy(update={"repeats": 3}))


def test_a_failed_repeat_is_left_out_not_scored():
    server = fs.FakeLLMServer("openai", score_of=per_prompt(lambda _: (0.3, 0.7))).start()
    try:
        server.push(fs.status(400))  # not retried: the first repeat fails
        [row] = run(openai_config(server, repeats=3, concurrency=1), make_tasks(1, 1),
                    breaker_threshold=10)
    finally:
        server.stop()
    assert server.calls == 3
    assert row.status == "ok" and row.repeats_ok == 2 and row.error is None
    assert all(v == pytest.approx(0.5) for v in scores_of(row).values())
    assert all(v == pytest.approx(0.2) for v in json.loads(row.score_std).values())
    assert row.straddles


def test_all_repeats_failing_is_a_failed_row(openai_server):
    openai_server.push(fs.status(400), fs.status(400))
    [row] = run(openai_config(openai_server, repeats=2, concurrency=1), make_tasks(1, 1),
                breaker_threshold=10)
    assert row.status == "failed" and not row.success and row.scores == "{}"
    assert row.repeats_ok == 0 and row.score_std == "{}" and not row.straddles
    assert row.error is not None and row.error.startswith("all 2 repeats failed: ")
    assert row.attempts == 2


def test_react_labels_that_disagree_straddle():
    labels: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def label_of(prompt: str, allowed: list[str]) -> str:
        with lock:
            k = labels[prompt]
            labels[prompt] += 1
        return allowed[1] if k == 1 else allowed[0]  # positive, negative, positive

    server = fs.FakeLLMServer("openai", label_of=label_of).start()
    try:
        rows: list[JudgmentRow] = run(
            openai_config(server, repeats=3, evaluations=["thought_to_tool"]), make_tasks(1, 2))
    finally:
        server.stop()
    assert rows and all(r.evaluation_kind == "thought_to_tool" for r in rows)
    for row in rows:
        assert row.straddles and row.repeats_ok == 3
        assert row.label == REACT_EVALUATIONS["thought_to_tool"].labels[0]  # 2 of 3
        assert list(scores_of(row).values()) == [pytest.approx(2 / 3)]


def test_dry_run_counts_each_repeat(varying_server, tasks, cache):
    assert estimate_cost(tasks, [openai_config(varying_server, repeats=3)]).calls == \
        3 * len(tasks)
    run(openai_config(varying_server, repeats=2), tasks, cache=cache)
    [estimate] = estimate_cost(tasks, [openai_config(varying_server, repeats=3)],
                               cache=cache).judges
    assert estimate.calls == len(tasks) and estimate.cached == 2 * len(tasks)


@pytest.mark.parametrize("value, message", [
    (0, "judge 'gpt', field repeats: must be at least 1, got 0"),
    ("3", "judge 'gpt', field repeats: must be a whole number, got '3'"),
])
def test_repeats_is_validated(value: object, message: str) -> None:
    with pytest.raises(JudgesFileError) as info:
        parse_judges({"judges": [{"name": "gpt", "provider": "heuristic", "repeats": value}]})
    assert str(info.value) == message


@pytest.mark.slow
def test_cli_run_with_repeats_writes_the_spread(varying_server, tmp_path, monkeypatch,
                                                project_root, isolated_store):
    """Through the whole Dagster graph: each judgment asked twice, one Parquet row with its
    spread; raising repeats to 3 asks once more per judgment and no more."""
    from eval_pipeline.cli import main

    sample = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    if not sample.is_file():
        pytest.skip("sample drop not present")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("E2E_OPENAI_KEY", SECRET)
    judges = tmp_path / "judges.yaml"
    out = tmp_path / "out"

    def run_cli(repeats: int) -> pd.DataFrame:
        judges.write_text(
            "judges:\n  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
            f"    base_url: {varying_server.base_url}\n    api_key_env: E2E_OPENAI_KEY\n"
            f"    repeats: {repeats}\n    evaluations: [clip_rubric]\n", "utf-8")
        assert main(["run", str(sample), "--output", str(out), "--judges", str(judges)]) == 0
        return pd.read_parquet(out / "judgments__gpt.parquet")

    table = run_cli(2)
    assert (table["status"] == "ok").all() and (table["repeats_ok"] == 2).all()
    assert varying_server.calls == 2 * len(table)
    assert all(json.loads(s) for s in table["score_std"])
    assert table["straddles"].dtype == bool

    calls = varying_server.calls
    table = run_cli(3)
    assert varying_server.calls == calls + len(table)
    assert (table["repeats_ok"] == 3).all()
