"""#8.4: evaluated.jsonl carries the original tool's multi-model keys beside ours."""

from __future__ import annotations

import json

from eval_pipeline.local_run import write_evaluated
from eval_pipeline_tests.exports.helpers import run_tables


def _written(tables, tmp_path) -> list[dict]:
    path = tmp_path / "evaluated.jsonl"
    write_evaluated(tables["trajectory_summaries"], path)
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_both_response_keys_and_num_clips(small_drop, tmp_path):
    tables = run_tables(small_drop)
    records = _written(tables, tmp_path)
    assert len(records) == len(tables["trajectory_summaries"])
    for record, row in zip(records, tables["trajectory_summaries"].to_dict("records"),
                           strict=True):
        assert record["full_response_with_evaluation"] == \
            record["full_response_with_evaluations"] == row["full_response_with_evaluations"]
        meta = record["evaluation_metadata"]
        assert meta["num_clips"] == meta["total_clips"] == row["total_clips"]
        assert list(meta)[:4] == ["num_clips", "num_models", "model_names", "total_clips"]
        assert meta["num_models"] == 1 and meta["model_names"] == ["heuristic_heuristic-v1"]
        # The rest of the metadata is the summary's, unchanged.
        assert {k: v for k, v in meta.items() if k != "num_clips"} == \
            json.loads(row["evaluation_metadata"])


def test_a_reader_of_the_originals_real_files_finds_every_key(small_drop, tmp_path,
                                                             corpora_dir):
    """The real evaluated output of the original tool (corpora/dataeva): every key it has,
    at the top and in evaluation_metadata (and in each tool average), is in ours too, and
    the metadata keys come in its order."""
    real_path = corpora_dir / "dataeva" / "example_0721_evaluated.jsonl"
    real = [json.loads(line) for line in real_path.read_text("utf-8").splitlines()]
    ours = _written(run_tables(small_drop), tmp_path)
    real_top = set().union(*(r.keys() for r in real))
    real_meta = [list(r["evaluation_metadata"]) for r in real]
    real_tool = set().union(*(t.keys() for r in real
                              for t in r["evaluation_metadata"]["tool_averages"].values()))
    for record in ours:
        assert real_top <= set(record), real_top - set(record)
        meta = record["evaluation_metadata"]
        for keys in real_meta:
            assert [k for k in meta if k in keys] == keys
        for average in meta["tool_averages"].values():
            assert real_tool <= set(average)
