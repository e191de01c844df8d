"""What the ``steps`` column costs the IO manager and its consumers, Python lists against
Arrow (#12.1, the Arrow steps contract). A child-free, one-process measurement.

Every corpora file (or the files given) is parsed and preprocessed once, cut into batches
of ``--batch`` trajectories like the CLI's; then, per batch and interleaved, each operation
is timed in CPU seconds (``time.process_time``) for the previous tables (``steps`` an object
column of step dicts) and for the contract's (``STEPS_DTYPE``), medians of ``--repeats``
of the totals over all batches:

- ``to_arrow``: the IO manager converting the preprocessed table for its Parquet write
  (Python: ``pa.array`` infers the steps' type from the dicts; Arrow: the column's own
  buffers);
- ``with_arrow_steps``: what the assets pay today to turn a stage's Python steps into Arrow
  (until the producers make Arrow steps themselves);
- ``read``: the table read back for a consumer, as the IO manager and its table cache
  convert it (Python: ``pd.read_parquet``'s conversion, each step a dict again; Arrow:
  ``frame_from_arrow``, the steps left in Arrow);
- ``to_python``: a consumer taking the steps as Python lists (what clips and preprocess do
  today; Python: ``list(cell)`` of each read cell, Arrow: ``Series.tolist()``);
- ``parquet``: writing the Arrow table to Parquet (in memory, the IO manager's options).

Usage: ``PYTHONPATH=. python bench/steps_io.py [FILES...] [--repeats 5] [--batch 10]``.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from eval_pipeline import ingest
from eval_pipeline.defs.pipeline.io_manager import PARQUET_OPTIONS, to_arrow
from eval_pipeline.defs.pipeline.table_cache import arrow_table_to_pandas, frame_from_arrow
from eval_pipeline.formats import discover_files
from eval_pipeline.ingest import ReadOptions
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.steps_column import with_arrow_steps

CORPORA = Path(os.environ.get("EVAL_PIPELINE_CORPORA", "/work/shared/corpora"))


def batches(files: list[Path], size: int) -> list[pd.DataFrame]:
    """Every file's kept trajectories, in batches of ``size`` rows (Python steps)."""
    registry = ReadOptions().registry()
    out = []
    for path in files:
        try:
            raw, _ = ingest.read_batch(path, None, path.stem)
        except Exception:  # a file no format reads is not a batch
            continue
        kept, _, _ = ingest.preprocess_batch(raw, PreprocessConfig(), registry)
        out += [kept.iloc[i:i + size].reset_index(drop=True) for i in range(0, len(kept), size)]
    return [b for b in out if len(b)]


def timed(fn: Callable[[Any], Any], items: list[Any]) -> tuple[float, list[Any]]:
    start = time.process_time()
    results = [fn(item) for item in items]
    return time.process_time() - start, results


def parquet_bytes(table: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **PARQUET_OPTIONS)
    return sink.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    files = args.files or discover_files(CORPORA)
    python = batches(files, args.batch)
    arrow = [with_arrow_steps(b) for b in python]
    old_tables = [to_arrow(b) for b in python]
    new_tables = [to_arrow(b) for b in arrow]
    assert all(a["steps"].tolist() == [list(map(dict, c)) for c in b["steps"]]
               for a, b in zip(arrow, python, strict=True))
    read_old = [arrow_table_to_pandas(t) for t in old_tables]
    read_new = [frame_from_arrow(t) for t in new_tables]
    figures: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, fn, items in (
            ("to_arrow, Python steps", to_arrow, python),
            ("to_arrow, Arrow steps", to_arrow, arrow),
            ("with_arrow_steps (Python to Arrow)", with_arrow_steps, python),
            ("read, Python steps", arrow_table_to_pandas, old_tables),
            ("read, Arrow steps", frame_from_arrow, new_tables),
            ("to_python, Python steps", lambda f: [list(c) for c in f["steps"]], read_old),
            ("to_python, Arrow steps", lambda f: f["steps"].tolist(), read_new),
            ("parquet write, Python steps' table", parquet_bytes, old_tables),
            ("parquet write, Arrow steps' table", parquet_bytes, new_tables),
        ):
            figures.setdefault(name, []).append(timed(fn, items)[0])
    rows = sum(len(b) for b in python)
    steps = sum(len(c) for b in python for c in b["steps"])
    print(f"{len(files)} files, {len(python)} batches of <= {args.batch}, {rows} trajectories, "
          f"{steps} steps; load average {os.getloadavg()[0]:.2f}; CPU s, medians of "
          f"{args.repeats}")
    for name, values in figures.items():
        print(f"{name:40s} {statistics.median(values):8.3f}")


if __name__ == "__main__":
    main()
