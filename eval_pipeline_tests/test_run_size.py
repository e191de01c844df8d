"""#12.3: without --batches-per-run the CLI's runs are bounded by the bytes of their batches."""

from __future__ import annotations

from pathlib import Path

from eval_pipeline.local_run import batches_within
from eval_pipeline.splitting import split_drop


def test_runs_hold_batches_up_to_the_byte_limit(tmp_path: Path) -> None:
    drop = tmp_path / "drop.jsonl"
    drop.write_text("".join(f'{{"task_id": "t{i}", "raw_response": "{"x" * 1000}"}}\n'
                            for i in range(100)), "utf-8")
    keys = [m.partition_key for m in split_drop(drop, tmp_path / "batches", 10)]
    assert len(keys) == 10
    size = (tmp_path / "batches" / "drop" / "drop01.jsonl").stat().st_size
    assert batches_within(tmp_path / "batches", keys, 100 * size) is None  # all fit: one run
    assert batches_within(tmp_path / "batches", keys, int(3.5 * size)) == 3
    assert batches_within(tmp_path / "batches", keys, size // 2) == 1
