"""Live against batch mode on the same drop: cost, provider requests, waves (#18).

Run: ``.venv/bin/python bench/bench_batch_mode.py [INPUT]`` (default: the sample drop).
For each provider path (OpenAI, Anthropic), runs the whole pipeline through the CLI with
one judge in ``mode: live``, then ``mode: batch`` with the full context chain, bounded to
two waves, and off, each in a fresh instance and store, against the test suite's fake
servers on 127.0.0.1 (no network, no key; every answer costs 1,000 input and 200 output
tokens, priced at the model's list and batch prices). Prints, per run: judgments, cost,
HTTP requests to the provider, the requests answered inside batches, the provider batches
(waves) and the CLI's wall time. Wall time here is the fake's 0.3 s per batch; against a
real provider each wave takes minutes to 24 hours, which is what the waves column costs.
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
from eval_pipeline_tests.judges.fake_batches import FakeBatches  # noqa: E402
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer  # noqa: E402

MODES = [("live", ""), ("batch, full chain", "    mode: batch\n"),
         ("batch, bounded to 2", "    mode: batch\n    batch_waves: 2\n"),
         ("batch, chain off", "    mode: batch\n    batch_waves: 1\n")]


def one(kind: str, label: str, extra: str, drop: Path, work: Path) -> list[object]:
    server = FakeLLMServer(kind).start()
    batches = FakeBatches(server, delay_s=0.3)
    try:
        provider = "openai" if kind == "openai" else "anthropic"
        model = "gpt-4.1-mini" if kind == "openai" else "claude-sonnet-4-5"
        judges = work / "judges.yaml"
        judges.write_text(
            f"judges:\n  - name: j\n    provider: {provider}\n    model: {model}\n"
            f"    base_url: {server.base_url}\n    api_key_env: BENCH_KEY\n"
            f"    batch_poll_s: 0.1\n{extra}", "utf-8")
        os.environ.update({"DAGSTER_HOME": str(work / "home"), "BENCH_KEY": "sk-bench-0",
                           "EVAL_PIPELINE_STORE": str(work / "store")})
        started = time.perf_counter()
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            code = main(["run", str(drop), "--output", str(work / "out"), "--judges",
                         str(judges), "--quiet"])
        seconds = time.perf_counter() - started
        assert code == 0, f"{kind} {label}: exit {code}"
        table = pd.read_parquet(work / "out" / "judgments__j.parquet")
        live_calls = sum(not r.path.startswith("batch:") for r in server.requests)
        return [kind, label, len(table), int((table["status"] == "ok").sum()),
                f"${table['cost_usd'].sum():.4f}", live_calls + batches.requests,
                batches.lines, batches.created, f"{seconds:.1f}"]
    finally:
        server.stop()


def main_bench() -> None:
    drop = Path(sys.argv[1]) if len(sys.argv) > 1 else (
        ROOT / "data" / "incoming" / "sample_agent_runs.jsonl")
    rows = []
    for kind in ("openai", "anthropic"):
        for label, extra in MODES:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(one(kind, label, extra, drop, Path(tmp)))
    print(f"drop: {drop.name}")
    print(tabulate(rows, headers=["provider", "mode", "judgments", "ok", "cost",
                                  "HTTP requests", "answered in batches", "batches (waves)",
                                  "wall s"], tablefmt="github"))


if __name__ == "__main__":
    main_bench()
