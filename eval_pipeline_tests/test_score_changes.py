"""The plain computations behind "why did this score change?"."""

import json

import pandas as pd

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.score_changes import (
    compare_scores,
    content_hash,
    failure_rate,
    judge_versions,
    metric_stats,
    row_scores,
    version_changes,
)


def _table(scores, status=None):
    return pd.DataFrame({
        "trajectory_id": [f"t{i}" for i in range(len(scores))],
        "clip_index": list(range(len(scores))),
        "status": status or ["ok"] * len(scores),
        "scores": [json.dumps(s) if s is not None else "{}" for s in scores],
    })


def test_movers_are_the_rows_that_moved_most_and_failures_are_not_zeros():
    before = _table([{"a": 0.2, "b": 0.4}, {"a": 0.5}, {"a": 0.9}, {"a": 0.1}])
    after = _table([{"a": 0.2, "b": 0.4}, {"a": 0.75}, {"a": 0.3}, None],
                   status=["ok", "ok", "ok", "failed"])
    keys = ["trajectory_id", "clip_index"]
    delta = compare_scores(row_scores(before, keys, "scores"), row_scores(after, keys, "scores"))
    assert delta is not None
    # t3 failed: it left the comparison rather than scoring 0
    assert (delta.compared, delta.removed, delta.added) == (3, 1, 0)
    assert delta.moved == 2
    assert [m["key"] for m in delta.movers] == ["t2/2", "t1/1"]
    assert delta.movers[0]["change"] == -0.6 and delta.movers[1]["change"] == 0.25
    assert delta.mean_change == round((0.3 + 0.75 + 0.3) / 3 - (0.3 + 0.5 + 0.9 + 0.1) / 4, 4)
    # a move of exactly the threshold is not a move
    same = row_scores(before, keys, "scores")
    assert compare_scores(same, same + 0.1, threshold=0.1).moved == 0
    assert compare_scores(None, same) is None


def test_metric_stats_and_failure_rate_count_only_what_was_scored():
    assert metric_stats(['{"a": 0.5, "b": 1.0}', '{"a": 0.0}', "{}"]) == {
        "a": (0.25, 2), "b": (1.0, 1)}
    assert failure_rate(pd.Series(["ok", "failed", "skipped", "ok"])) == round(1 / 3, 4)
    assert failure_rate(pd.Series(["skipped"])) is None


def test_version_changes_name_the_field_that_changed():
    old = judge_versions(JudgeConfig(name="j", temperature=0.1))
    new = judge_versions(JudgeConfig(name="j", temperature=0.7))
    assert version_changes(old, new) == ["judge.j.temperature: 0.1 -> 0.7"]
    assert version_changes(None, new) == []
    assert version_changes({"batch_data": "x"}, {"batch_data": "y", "parser_version": "p"}) \
        == ["batch_data: x -> y", "parser_version: (none) -> p"]


def test_content_hash_follows_bytes_not_the_file_time(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b'{"x": 1}\n')
    b.write_bytes(b'{"x": 1}\n')
    assert content_hash(a) == content_hash(b)
    b.write_bytes(b'{"x": 2}\n')
    assert content_hash(a) != content_hash(b)


def test_metric_stats_are_the_per_metric_means_and_counts_bit_for_bit():
    """One reduction over the frame (#12.4) gives what a mean and a count per metric gave,
    on scores with gaps, many metrics and values whose sums round differently by order."""
    import random

    rng = random.Random(7)
    for _ in range(50):
        rows = [json.dumps({f"m{k}": rng.choice([rng.random(), 1 / 3, 0.1, 0.7])
                            for k in range(40) if rng.random() < 0.6})
                for _ in range(rng.randint(1, 300))]
        frame = pd.DataFrame([json.loads(r) for r in rows if r != "{}"])
        expected = {str(m): (round(float(frame[m].mean()), 4), int(frame[m].notna().sum()))
                    for m in sorted(frame.columns) if frame[m].notna().any()}
        assert metric_stats(rows) == expected
