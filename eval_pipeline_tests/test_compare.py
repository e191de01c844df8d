"""Comparing two runs: pairing by task, paired bootstrap, verdicts, movers, the CLI verb."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from eval_pipeline import compare
from eval_pipeline.cli import main
from eval_pipeline.compare import (
    bootstrap_interval,
    compare_tables,
    metric_table,
    verdict,
)


def _summaries(task_ids, scores, tools=None, versions=None, prefix="t"):
    """A trajectory_summaries-shaped table: the columns compare reads."""
    tools = tools or [None] * len(scores)
    meta = [json.dumps({"tool_averages": {} if v is None else
                        {"microsandbox": {"overall_average": v, "clip_count": 1}}})
            for v in tools]
    table = pd.DataFrame({
        "trajectory_id": [f"{prefix}{i}" for i in range(len(scores))],
        "task_id": task_ids,
        "overall_trajectory_score": scores,
        "evaluation_metadata": meta,
    })
    if versions is not None:
        table["agent_version"] = versions
    return table


def _shifted_pair(shift, n=60, noise=0.05, seed=7):
    """A and B on the same n tasks; B = A + shift + noise (noise re-centred to mean 0, so
    the true mean difference is exactly ``shift``)."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.3, 0.7, n)
    eps = rng.normal(0, noise, n)
    eps -= eps.mean()
    tasks = [f"task_{i:03d}" for i in range(n)]
    return (_summaries(tasks, base, prefix="a"),
            _summaries(tasks, base + shift + eps, prefix="b"))


def _overall(result):
    return next(m for m in result.metrics if m.metric == "overall_trajectory_score")


def _normal_half_width(a, b):
    d = b["overall_trajectory_score"] - a["overall_trajectory_score"]
    return 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d))


def test_known_positive_shift_is_better_and_the_interval_holds_it():
    a, b = _shifted_pair(0.1)
    m = _overall(compare_tables(a, b, seed=1))
    assert m.verdict == "better" and m.pairs == 60 and m.missing == 0
    assert m.difference == pytest.approx(0.1, abs=1e-6)
    assert m.ci_low < 0.1 < m.ci_high
    # The percentile interval agrees with the normal approximation's width (within 20%):
    # the resampling is over the paired differences, not the raw scores.
    half = _normal_half_width(a, b)
    assert (m.ci_high - m.ci_low) / 2 == pytest.approx(half, rel=0.2)
    # An unpaired interval would be ~ the spread of the scores (0.3..0.7): far wider.
    assert m.ci_high - m.ci_low < 0.05


def test_no_shift_is_no_evidence_and_negative_shift_is_worse():
    a, b = _shifted_pair(0.0)
    m = _overall(compare_tables(a, b))
    assert m.verdict == "no evidence" and m.ci_low < 0 < m.ci_high
    assert m.difference == pytest.approx(0.0, abs=1e-6)
    a, b = _shifted_pair(-0.1)
    m = _overall(compare_tables(a, b))
    assert m.verdict == "worse" and m.ci_high < 0 and m.ci_low < -0.1 < m.ci_high


def test_a_small_shift_under_the_noise_is_no_evidence():
    # 0.005 against a standard error of ~0.0065: the interval must straddle 0.
    a, b = _shifted_pair(0.005)
    m = _overall(compare_tables(a, b))
    assert m.verdict == "no evidence"
    assert m.difference == pytest.approx(0.005, abs=1e-6)


def test_tiny_case_by_hand_pairing_duplicates_and_unpaired():
    # A: t1 0.5; t2 twice (0.2, 0.4 -> 0.3); t3 only in A; one row without a task id.
    a = _summaries(["t1", "t2", "t2", "t3", None], [0.5, 0.2, 0.4, 0.9, 0.8])
    # B: t1 0.7; t2 0.6; t4 only in B.
    b = _summaries(["t1", "t2", "t4"], [0.7, 0.6, 0.1])
    result = compare_tables(a, b, metrics=["overall_trajectory_score"])
    p = result.pairing
    assert (p.rows_a, p.rows_b, p.paired_tasks) == (5, 3, 2)
    assert p.unpaired_a == ["t3"] and p.unpaired_b == ["t4"]
    assert p.duplicates_a == {"t2": 2} and p.duplicates_b == {}
    assert p.missing_task_id_a == 1 and p.missing_task_id_b == 0
    m = result.metrics[0]
    # changes: t1 0.7 - 0.5 = 0.2, t2 0.6 - 0.3 = 0.3; mean 0.25
    assert m.pairs == 2
    assert (m.mean_a, m.mean_b, m.difference) == pytest.approx((0.4, 0.65, 0.25))
    # two tasks are below MIN_PAIRS: no interval, no verdict
    assert m.ci_low is None and m.ci_high is None and m.verdict == "no evidence"
    assert [(v.task_id, v.change) for v in m.movers] == [("t2", pytest.approx(0.3)),
                                                       ("t1", pytest.approx(0.2))]
    assert m.movers[0].trajectories_a == ["t1", "t2"]  # both of A's t2 rows named
    assert (m.movers[0].a, m.movers[0].b) == pytest.approx((0.3, 0.6))
    text = compare.render_text(result)
    assert "only in A (not compared): 1 tasks: t3" in text
    assert "duplicate task ids in A (averaged per task): 1: t2 x2" in text
    assert "rows without a task id in A (not compared): 1" in text


def test_a_missing_value_is_left_out_of_that_metric_only_and_counted():
    tasks = [f"t{i}" for i in range(6)]
    a = _summaries(tasks, [0.5] * 6, tools=[0.4, 0.4, 0.4, 0.4, 0.4, None])
    b = _summaries(tasks, [0.6, 0.6, 0.6, 0.6, 0.6, math.nan],
                   tools=[0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    result = compare_tables(a, b)
    by = {m.metric: m for m in result.metrics}
    assert set(by) == {"overall_trajectory_score", "tool:microsandbox"}
    for name in by:
        assert (by[name].pairs, by[name].missing) == (5, 1)
        assert by[name].difference == pytest.approx(0.1)
        # every difference is exactly 0.1: every resample's mean is 0.1
        assert (by[name].ci_low, by[name].ci_high) == pytest.approx((0.1, 0.1))
        assert by[name].verdict == "better"


def test_metric_table_reads_routing_and_tool_averages():
    table = _summaries(["t1", "t2"], [0.5, None], tools=[0.25, None])
    table["routing_passed"] = pd.Series([True, None], dtype=object)
    values = metric_table(table)
    assert values["routing_passed"].tolist()[0] == 1.0 and math.isnan(
        values["routing_passed"].tolist()[1])
    assert values["tool:microsandbox"].tolist()[0] == 0.25
    assert math.isnan(values["overall_trajectory_score"].tolist()[1])


def test_bootstrap_by_hand_and_seeded():
    # Differences [0, 0, 3]: a resample's mean is 0 with p 8/27 and 3 with p 1/27 (> 2.5%),
    # so the 95% percentile interval is exactly [0, 3].
    assert bootstrap_interval(np.array([0.0, 0.0, 3.0]), seed=0) == (0.0, 3.0)
    d = np.random.default_rng(3).normal(0.1, 0.2, 40)
    first = bootstrap_interval(d, seed=5)
    assert bootstrap_interval(d, seed=5) == first
    assert bootstrap_interval(d, seed=6) != first


def test_bootstrap_chunking_does_not_change_the_draws(monkeypatch):
    d = np.random.default_rng(4).normal(0.0, 1.0, 30)
    whole = bootstrap_interval(d, seed=9, resamples=1000)
    monkeypatch.setattr(compare, "_CHUNK_CELLS", 30 * 7)  # 7 resamples per chunk
    assert bootstrap_interval(d, seed=9, resamples=1000) == whole


def test_verdict_needs_the_whole_interval_on_one_side():
    assert verdict(0.01, 0.2) == "better"
    assert verdict(-0.2, -0.01) == "worse"
    assert verdict(0.0, 0.2) == "no evidence"  # touching 0 is not evidence
    assert verdict(-0.1, 0.1) == "no evidence"
    assert verdict(None, None) == "no evidence"


def test_a_metric_result_does_not_depend_on_the_other_metrics_asked():
    a, b = _shifted_pair(0.05)
    a["success_rate"] = 1.0
    b["success_rate"] = 1.0
    alone = _overall(compare_tables(a, b, metrics=["overall_trajectory_score"]))
    together = _overall(compare_tables(a, b))
    assert (alone.ci_low, alone.ci_high) == (together.ci_low, together.ci_high)


def test_unknown_metric_or_non_summaries_table_is_an_error():
    a, b = _shifted_pair(0.1)
    with pytest.raises(compare.CompareError, match="unknown metric nope; known: overall"):
        compare_tables(a, b, metrics=["nope"])
    with pytest.raises(compare.CompareError, match="no task_id column"):
        compare_tables(a.drop(columns="task_id"), b)


def test_cli_compare_two_parquet_files(tmp_path, capsys):
    a, b = _shifted_pair(0.1)
    a.to_parquet(tmp_path / "a.parquet")
    b.to_parquet(tmp_path / "b.parquet")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"),
                 "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    row = next(line for line in printed.splitlines()
               if line.startswith("overall_trajectory_score"))
    assert row.split()[1] == "60" and row.rstrip().endswith("better")
    assert "moved most: overall_trajectory_score" in printed

    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"),
                 "--seed", "3", "--metric", "overall_trajectory_score", "--top", "2",
                 "--output", str(out)]) == 0
    written = json.loads((out / "compare.json").read_text("utf-8"))
    expected = compare_tables(a, b, seed=3, top=2, metrics=["overall_trajectory_score"])
    assert [m["metric"] for m in written["metrics"]] == ["overall_trajectory_score"]
    m = written["metrics"][0]
    assert m["verdict"] == "better" and m["ci_low"] < 0.1 < m["ci_high"]
    assert (m["ci_low"], m["ci_high"]) == (expected.metrics[0].ci_low,
                                           expected.metrics[0].ci_high)
    assert len(m["movers"]) == 2 and written["seed"] == 3
    assert "| overall_trajectory_score |" in (out / "compare.md").read_text("utf-8")


def test_cli_compare_by_agent_version_takes_versions_from_the_run(tmp_path, capsys):
    tasks = [f"t{i}" for i in range(8)]
    scores = [0.2, 0.3, 0.4, 0.5, 0.6, 0.5, 0.4, 0.3]
    both = _summaries(tasks * 2, scores + [s - 0.2 for s in scores])
    both.to_parquet(tmp_path / "trajectory_summaries.parquet")  # no agent_version column
    pd.DataFrame({"trajectory_id": both["trajectory_id"],
                  "agent_version": ["v1"] * 8 + ["v2"] * 8}
                 ).to_parquet(tmp_path / "preprocessed_trajectories.parquet")
    assert main(["compare", str(tmp_path), "--by-agent-version", "v1", "v2"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("overall_trajectory_score"))
    assert row.split()[1:5] == ["8", "0.4000", "0.2000", "-0.2000"]
    assert row.rstrip().endswith("worse")
    assert main(["compare", str(tmp_path), "--by-agent-version", "v1", "v9"]) == 1
    assert "agent version 'v9' not in" in capsys.readouterr().err


def test_cli_compare_errors_in_one_line(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nowhere"), str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("eval-pipeline: error: no trajectory summaries at")
    assert main(["compare", str(tmp_path)]) == 1
    assert "compare takes two runs" in capsys.readouterr().err


def test_cli_compare_warns_when_no_task_is_in_both(tmp_path, capsys):
    _summaries(["x1", "x2"], [0.1, 0.2]).to_parquet(tmp_path / "a.parquet")
    _summaries(["y1"], [0.3]).to_parquet(tmp_path / "b.parquet")
    assert main(["compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]) == 0
    captured = capsys.readouterr()
    assert "no task id is in both runs" in captured.err
    assert "only in A (not compared): 2 tasks: x1, x2" in captured.out
    assert "only in B (not compared): 1 tasks: y1" in captured.out


@pytest.mark.slow
def test_two_identical_runs_on_the_sample_data_show_no_difference(project_root, tmp_path,
                                                                  monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    runs = [tmp_path / "run_a", tmp_path / "run_b"]
    for out in runs:
        assert main(["run", str(project_root / "data"), "--output", str(out),
                     "--store", str(tmp_path / "store"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", *map(str, runs), "--output", str(tmp_path / "cmp")]) == 0
    written = json.loads((tmp_path / "cmp" / "compare.json").read_text("utf-8"))
    kept = pd.read_parquet(runs[0] / "trajectory_summaries.parquet")
    assert written["pairing"]["paired_tasks"] == kept["task_id"].nunique() > 0
    assert written["pairing"]["unpaired_a"] == written["pairing"]["unpaired_b"] == []
    assert {m["metric"] for m in written["metrics"]} >= {"overall_trajectory_score",
                                                          "tool:microsandbox"}
    for m in written["metrics"]:
        assert m["verdict"] == "no evidence", m
        if m["pairs"]:
            assert m["difference"] == 0 and m["movers"] == []


def test_fail_on_worse_gates_a_regression_and_nothing_else(tmp_path, capsys):
    for shift, code in ((-0.1, compare.EXIT_WORSE), (0.1, 0), (0.0, 0)):
        a, b = _shifted_pair(shift)
        a.to_parquet(tmp_path / "a.parquet")
        b.to_parquet(tmp_path / "b.parquet")
        args = ["compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
        assert main([*args, "--fail-on-worse"]) == code, shift
        assert main(args) == 0  # without the flag a verdict is information, not failure
        err = capsys.readouterr().err
        assert ("worse in B: overall_trajectory_score" in err) == (code != 0)


def test_a_run_is_read_without_its_responses_and_compares_the_same(tmp_path):
    """#12.3: a big run's summaries are compared without loading the responses (nearly all
    of the file): the same comparison as on the whole table."""
    a, b = _shifted_pair(0.05)
    for table in (a, b):
        table["full_response_with_evaluations"] = "<clip_evaluation>x</clip_evaluation>" * 50
        table["raw_response"] = "r" * 500
        table["sequence_optimality"] = np.where(np.arange(len(table)) % 2, 1.0, np.nan)
    for name, table in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        table.to_parquet(tmp_path / name / compare.SUMMARIES_FILE)
    read_a, read_b = (compare.read_summaries(tmp_path / n) for n in ("a", "b"))
    assert "full_response_with_evaluations" not in read_a.columns
    assert "raw_response" not in read_b.columns
    assert {"task_id", "overall_trajectory_score", "sequence_optimality"} <= set(read_a)
    assert (compare_tables(read_a, read_b).model_dump()
            == compare_tables(a, b).model_dump())
