"""Wall time of the whole CLI with every batch in one Dagster run against one run per batch.

Run: ``.venv/bin/python bench/bench_batches_per_run.py [DROP] [--repeats N]``
(default: dataeva/demo02.jsonl in ../shared/corpora or $EVAL_PIPELINE_CORPORA, else data/).
Heuristic judge, each configuration a fresh CLI process and a fresh DAGSTER_HOME, the two
interleaved; prints the median of the repeats and the ratio. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
CORPORA = Path(os.environ.get("EVAL_PIPELINE_CORPORA", ROOT.parent / "shared" / "corpora"))
DEFAULT_DROP = CORPORA / "dataeva" / "demo02.jsonl"
CONFIGS = {"one run per batch": ["--batches-per-run", "1"], "all batches in one run": []}


def cli_seconds(drop: Path, extra: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DAGSTER_HOME": str(Path(tmp) / "home")}
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "eval_pipeline.cli", "run", str(drop),
                        "--output", str(Path(tmp) / "out"), *extra],
                       env=env, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drop", type=Path, nargs="?",
                        default=DEFAULT_DROP if DEFAULT_DROP.exists() else ROOT / "data")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(args.repeats):
        for name, extra in CONFIGS.items():
            times[name].append(cli_seconds(args.drop, extra))
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["one run per batch"]
    print(f"{args.drop} (heuristic judge, {os.cpu_count()} cores, median of {args.repeats})")
    print(tabulate([[name, f"{m:.1f} s", f"{base / m:.2f} x"] for name, m in medians.items()],
                   headers=["CLI", "wall time", "speed-up"], tablefmt="github"))


if __name__ == "__main__":
    main()
