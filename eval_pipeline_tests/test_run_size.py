"""#12.3: without --batches-per-run the CLI's runs are bounded by the bytes of their batches."""

from __future__ import annotations

from pathlib import Path

from eval_pipeline.local_run import batch_sizes, plan_runs
from eval_pipeline.splitting import split_drop


def test_runs_hold_batches_up_to_the_byte_limit(tmp_path: Path) -> None:
    drop = tmp_path / "drop.jsonl"
    drop.write_text("".join(f'{{"task_id": "t{i}", "raw_response": "{"x" * 1000}"}}\n'
                            for i in range(100)), "utf-8")
    keys = [m.partition_key for m in split_drop(drop, tmp_path / "batches", 10)]
    assert len(keys) == 10
    size = (tmp_path / "batches" / "drop" / "drop01.jsonl").stat().st_size
    sizes = batch_sizes(tmp_path / "batches", keys)
    assert list(sizes) == keys and sizes["drop01"] == size
    assert plan_runs([keys], sizes, 1, 100 * size) == [keys]  # all fit: one run
    runs = plan_runs([keys], sizes, 1, int(3.5 * size))
    assert [k for run in runs for k in run] == keys
    assert max(len(run) for run in runs) == 3
    assert plan_runs([keys], sizes, 1, size // 2) == [[k] for k in keys]  # one batch a run
