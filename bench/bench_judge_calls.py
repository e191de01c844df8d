"""Provider calls per rerun: what the judge cache saves, measured against a local server.

Run: ``.venv/bin/python bench/bench_judge_calls.py [INPUT]`` (default: data/incoming).
Starts the test suite's fake OpenAI-compatible server on 127.0.0.1 (no network, no key),
runs the whole pipeline three times through the CLI — first run, unchanged rerun, rerun
with one judge's model changed — and prints calls, cached rows and seconds per run.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eval_pipeline.cli import main  # noqa: E402
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer  # noqa: E402

JUDGES = """judges:
  - name: a
    provider: openai
    model: {model_a}
    base_url: {url}
    api_key_env: BENCH_KEY
    concurrency: 8
  - name: b
    provider: openai
    model: gpt-4.1
    base_url: {url}
    api_key_env: BENCH_KEY
    concurrency: 8
"""


def run_once(input_path: Path, out: Path, judges: Path) -> float:
    start = time.perf_counter()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        code = main(["run", str(input_path), "--output", str(out), "--judges", str(judges)])
    if code != 0:
        raise SystemExit(f"pipeline failed with exit code {code}")
    return time.perf_counter() - start


def main_bench() -> None:
    input_path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "data" / "incoming"
    server = FakeLLMServer("openai").start()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["DAGSTER_HOME"] = str(Path(tmp) / "home")
            os.environ["BENCH_KEY"] = "bench-not-a-secret"
            judges = Path(tmp) / "judges.yaml"
            out = Path(tmp) / "out"
            for label, model_a in [("first run", "gpt-4.1-mini"),
                                   ("unchanged rerun", "gpt-4.1-mini"),
                                   ("judge a: new model", "gpt-4.1-nano")]:
                judges.write_text(JUDGES.format(model_a=model_a, url=server.base_url), "utf-8")
                before = server.calls
                seconds = run_once(input_path, out, judges)
                cached = {j: int(pd.read_parquet(out / f"judgments__{j}.parquet")["cached"].sum())
                          for j in ("a", "b")}
                total = len(pd.read_parquet(out / "judgments__a.parquet"))
                rows.append([label, server.calls - before, f"{cached['a']}/{total}",
                             f"{cached['b']}/{total}", f"{seconds:.1f}"])
    finally:
        server.stop()
    print(tabulate(rows, headers=["run", "provider calls", "judge a cached", "judge b cached",
                                  "seconds"]))


if __name__ == "__main__":
    main_bench()
