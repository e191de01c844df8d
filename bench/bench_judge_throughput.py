"""Judging throughput against a provider with 200 ms latency: how close the judge layer (and
the whole CLI) comes to a bare client sending the same number of requests.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_judge_throughput.py [--repeats 3]
[--concurrency 16 64 256] [--cli]``

A local OpenAI-compatible fake server (the test suite's, in its own process so it does not
compete with the client for the GIL; 200 ms per request, a listen backlog for hundreds of
connections) answers every request. Interleaved, each repeat runs at each concurrency:

(a) a bare client: asyncio + AsyncOpenAI + a semaphore, sending as many requests as (b);
(b) the judge layer alone: ``run_judges`` on the clip tasks of the XML corpora
    (../shared/corpora/dataeva and agent_data_platform) parsed by eval_pipeline's own
    ingest, preprocess and clip functions, all four evaluation kinds;
(c) with ``--cli``: ``eval-pipeline run <drop> --judges <one LLM judge>`` minus the same run
    with the heuristic judge (the pipeline's own cost), requests / that difference.

At 256 the drop is the corpora copied with new task ids to at least 3,000 trajectories,
where chains are not the critical path. Printed per concurrency: medians of requests/s,
the ratio to (a), the server's time-weighted mean requests in flight, and the chain-aware
bound: max(longest chain x latency, requests x latency / concurrency), the least wall time
any scheduler could reach; and the client's CPU per request (this process's for (a) and
(b), the CLI process's for (c), its heuristic run's CPU subtracted) with the bare client's
divided by it: at 256 on 2 cores the client is CPU-bound, so that ratio is what the
throughput ratio tends to on a quiet machine, and it holds still while other work shares
the cores. Then prompt tokens per clip against clip index with the chain unbounded and
bounded (``context_budget_chars``). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eval_pipeline import ingest  # noqa: E402
from eval_pipeline.judges import make_judge  # noqa: E402
from eval_pipeline.judges.base import ClipTask  # noqa: E402
from eval_pipeline.judges.config import JudgeConfig  # noqa: E402
from eval_pipeline.judges.requests import build_react_requests, build_request  # noqa: E402
from eval_pipeline.judges.runner import JudgeJob, JudgeRuntime, run_judges  # noqa: E402
from eval_pipeline.judges.schema import wire_schema  # noqa: E402
from eval_pipeline.preprocess import PreprocessConfig  # noqa: E402
from eval_pipeline.rubrics import ALL_EVALUATIONS  # noqa: E402
from eval_pipeline.tool_registry import default_registry  # noqa: E402

CORPORA = Path(os.environ.get("EVAL_PIPELINE_CORPORA", ROOT.parent / "shared" / "corpora"))
LATENCY_S = 0.2
KEY_ENV = "BENCH_JUDGE_KEY"

# The fake server in its own process: "new" starts a fresh server and prints its URL,
# "stats" prints its calls and in-flight figures and stops it.
_SERVER = """
import json, sys
sys.path.insert(0, {root!r})
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer
server = None
for line in sys.stdin:
    if line.strip() == "new":
        server = FakeLLMServer("openai", latency_s={latency}).start()
        print(server.base_url, flush=True)
    elif line.strip() == "stats":
        print(json.dumps({{"calls": server.calls, "mean": server.mean_in_flight,
                          "max": server.max_in_flight}}), flush=True)
        server.stop()
"""


class ServerProcess:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER.format(root=str(ROOT), latency=LATENCY_S)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _ask(self, command: str) -> str:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def new(self) -> str:
        return self._ask("new")

    def stats(self) -> dict[str, Any]:
        return json.loads(self._ask("stats"))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def corpus_files() -> list[Path]:
    files = [*sorted((CORPORA / "dataeva").glob("*.jsonl")),
             *sorted((CORPORA / "agent_data_platform").glob("*.jsonl"))]
    # only XML-format trajectory drops (not the judge-prompt or evaluated exports)
    return [f for f in files if not any(s in f.name for s in ("finetune", "evaluated"))]


def clip_tasks(paths: list[Path]) -> list[ClipTask]:
    registry = default_registry()
    tasks: list[ClipTask] = []
    for path in paths:
        raw, _ = ingest.read_batch(path, None, path.stem)
        kept, _, _ = ingest.preprocess_batch(raw, PreprocessConfig(), registry)
        tasks += ingest.clip_tasks(ingest.clips_table(kept), kept)
    return tasks


def copies(tasks: list[ClipTask], at_least: int) -> list[ClipTask]:
    """The corpora's trajectories again under new ids until there are ``at_least``."""
    out: list[ClipTask] = []
    n = 0
    while len({t.trajectory_id for t in out}) < at_least:
        out += [t.model_copy(update={"trajectory_id": f"{t.trajectory_id}~{n}"})
                for t in tasks]
        n += 1
    return out


def judge_config(url: str, concurrency: int, **extra: Any) -> JudgeConfig:
    return JudgeConfig(name="bench", provider="openai_compatible", model="bench-model",
                       base_url=url, api_key_env=KEY_ENV, concurrency=concurrency,
                       output_mode="json_schema", max_retries=2, timeout_s=120, **extra)


async def judge_layer(url: str, tasks: list[ClipTask], concurrency: int) -> int:
    config = judge_config(url, concurrency)
    job = JudgeJob(make_judge(config, "bench-key"), JudgeRuntime.from_config(config),
                   ALL_EVALUATIONS)
    result = (await run_judges([job], tasks))["bench"]
    assert result.summary.ok == result.summary.rows, result.rows[0].error
    return result.summary.calls


def all_requests(tasks: list[ClipTask]) -> list[tuple[str, str, dict[str, Any]]]:
    """The requests the judge layer sends: both prompts and the reply schema of each."""
    by: dict[str, list[ClipTask]] = defaultdict(list)
    for task in tasks:
        by[task.trajectory_id].append(task)
    requests = []
    for trajectory in by.values():
        requests += [(r.system_prompt, r.user_prompt, wire_schema(r.metrics, r.labels))
                     for r in [build_request(t, "") for t in trajectory]
                     + build_react_requests(trajectory)]
    return requests


async def bare_client(url: str, requests: list[tuple[str, str, dict[str, Any]]],
                      concurrency: int) -> int:
    """The same requests (prompts and schema, temperature, max_tokens) through the same SDK
    with a semaphore: what a script of a dozen lines gets from the provider."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url, api_key="bench-key", max_retries=0, timeout=120)
    gate = asyncio.Semaphore(concurrency)

    async def one(system: str, user: str, schema: dict[str, Any]) -> None:
        async with gate:
            reply = await client.chat.completions.create(
                model="bench-model", temperature=0.1, max_tokens=2000,
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": user}],
                response_format={"type": "json_schema", "json_schema": {
                    "name": "clip_evaluation", "schema": schema, "strict": True}})
            json.loads(reply.choices[0].message.content or "{}")

    await asyncio.gather(*(one(*request) for request in requests))
    await client.close()
    return len(requests)


def chain_bound(tasks: list[ClipTask], requests: int, concurrency: int) -> float:
    longest = max(sum(1 for t in tasks if t.trajectory_id == tid)
                  for tid in {t.trajectory_id for t in tasks})
    return max(longest * LATENCY_S, requests * LATENCY_S / concurrency)


def phase(server: ServerProcess, run: Callable[[str], Coroutine[Any, Any, int]]
          ) -> tuple[float, float, int, float]:
    """(requests/s, the server's mean in flight, requests, ms of CPU per request) of one
    run on a fresh server. The CPU is this process's (the server runs in its own)."""
    url = server.new()
    start, cpu = time.perf_counter(), time.process_time()
    requests = asyncio.run(run(url))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return requests / seconds, server.stats()["mean"], requests, cpu * 1000 / requests


def cli_drop(folder: Path, files: list[Path], at_least: int | None) -> Path:
    """The drop (c) evaluates: the corpora files as they are, or at 256 one JSONL of their
    records copied under new task ids until there are ``at_least``."""
    drop = folder / "drop"
    drop.mkdir()
    if at_least is None:
        for path in files:
            (drop / path.name).write_bytes(path.read_bytes())
        return drop
    lines = [line for path in files
             for line in path.read_text("utf-8").splitlines() if line.strip()]
    with (drop / "big.jsonl").open("w", encoding="utf-8") as out:
        written = copy = 0
        while written < at_least:
            for line in lines:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                record["task_id"] = f"{record.get('task_id', written)}~{copy}"
                distinct(record, copy)
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += 1
            copy += 1
    return drop


def distinct(record: dict[str, Any], copy: int) -> None:
    """Make a copied record's task text its own, so every prompt of the copy differs from
    the original's: the CLI's judgment cache answers identical prompts without a request,
    and a drop of copies that differ only in task ids would measure the cache."""
    if copy == 0:
        return
    if isinstance(record.get("task_description"), str):
        record["task_description"] += f" (copy {copy})"
    sft = record.get("sft_data")
    if isinstance(sft, dict) and isinstance(sft.get("instruction"), str):
        sft["instruction"] += f" (copy {copy})"


def cli_seconds(drop: Path, judges_yaml: str | None) -> tuple[float, float]:
    """Wall time and CPU seconds of ``eval-pipeline run`` on ``drop`` (default split size
    and batches per run), in a fresh process, instance and cache."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "eval_pipeline.cli", "run", str(drop),
                   "--output", str(Path(tmp) / "out")]
        if judges_yaml:
            judges = Path(tmp) / "judges.yaml"
            judges.write_text(judges_yaml)
            command += ["--judges", str(judges)]
        env = {**os.environ, KEY_ENV: "bench-key", "PYTHONPATH": str(ROOT),
               "DAGSTER_HOME": tmp, "EVAL_PIPELINE_STORE": str(Path(tmp) / "store")}
        start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, env=env, check=False, capture_output=True, cwd=tmp,
                              text=True)
        seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"CLI exited {done.returncode}:\n{done.stdout[-2000:]}"
                             f"\n{done.stderr[-2000:]}")
        return seconds, cpu


def cli_phase(server: ServerProcess, drop: Path, concurrency: int
              ) -> tuple[float, float, int, float, float]:
    """(judging requests/s, the server's mean in flight, requests, LLM run's seconds, ms
    of CPU per request): the CLI with one LLM judge minus the same CLI with the heuristic
    judge."""
    own, own_cpu = cli_seconds(drop, None)
    url = server.new()
    config = judge_config(url, concurrency)
    fields = ["name", "provider", "model", "base_url", "api_key_env", "concurrency",
              "output_mode", "max_retries", "timeout_s"]
    judges_yaml = "judges:\n" + "".join(
        f"  {'- ' if i == 0 else '  '}{f}: {getattr(config, f)}\n"
        for i, f in enumerate(fields))
    seconds, cpu = cli_seconds(drop, judges_yaml)
    stats = server.stats()
    calls = max(stats["calls"], 1)
    return (stats["calls"] / max(seconds - own, 1e-9), stats["mean"], stats["calls"], seconds,
            (cpu - own_cpu) * 1000 / calls)


def token_curve(tasks: list[ClipTask], budget: int) -> list[list[object]]:
    """Mean estimated prompt tokens per clip index, chain unbounded vs bounded, with a
    typical 140-character summary per earlier clip."""
    from eval_pipeline.judges._common import estimate_tokens as tokens
    from eval_pipeline.judges.requests import chain_context

    by: dict[str, list[ClipTask]] = defaultdict(list)
    for task in tasks:
        by[task.trajectory_id].append(task)
    sums: dict[int, list[list[int]]] = defaultdict(lambda: [[], []])
    for trajectory in by.values():
        summaries: list[str] = []
        for task in sorted(trajectory, key=lambda t: t.clip_index):
            for which, limit in ((0, None), (1, budget)):
                request = build_request(task, chain_context(summaries, limit)[0])
                sums[task.clip_index][which].append(
                    tokens(request.system_prompt, request.user_prompt))
            summaries.append("x" * 140)
    return [[i, len(u), round(statistics.mean(u)), round(statistics.mean(b))]
            for i, (u, b) in sorted(sums.items()) if i < 20]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--big", type=int, default=3000,
                        help="trajectories in the generated drop used at 256")
    parser.add_argument("--cli", action="store_true", help="also time the whole CLI (c)")
    args = parser.parse_args()

    files = corpus_files()
    if not files:
        sys.exit(f"no XML corpora under {CORPORA}")
    tasks = clip_tasks(files)
    big = copies(tasks, args.big) if any(c >= 256 for c in args.concurrency) else tasks
    print(f"corpora: {len(files)} files, {len({t.trajectory_id for t in tasks})} "
          f"trajectories, {len(tasks)} clips; at 256: "
          f"{len({t.trajectory_id for t in big})} trajectories; latency {LATENCY_S}s; "
          f"{os.cpu_count()} cores")
    server = ServerProcess()
    figures: dict[tuple[int, str], list[tuple[float, float, int, float]]] = (
        defaultdict(list))
    with tempfile.TemporaryDirectory() as drops_dir:
        drops: dict[int, Path] = {}
        if args.cli:
            for concurrency in args.concurrency:
                if concurrency not in drops:
                    folder = Path(drops_dir) / str(concurrency)
                    folder.mkdir()
                    drops[concurrency] = cli_drop(
                        folder, files, args.big if concurrency >= 256 else None)
        try:
            for _ in range(args.repeats):
                for concurrency in args.concurrency:
                    work = big if concurrency >= 256 else tasks
                    layer = phase(server, partial(judge_layer, tasks=work,
                                                  concurrency=concurrency))
                    figures[(concurrency, "b")].append(layer)
                    prompts = all_requests(work)[:layer[2]]
                    figures[(concurrency, "a")].append(phase(server, partial(
                        bare_client, requests=prompts, concurrency=concurrency)))
                    if args.cli:
                        rate, mean, calls, seconds, cpu = cli_phase(
                            server, drops[concurrency], concurrency)
                        figures[(concurrency, "c")].append((rate, mean, calls, cpu))
                        print(f"  c={concurrency}: CLI {calls} requests in {seconds:.1f}s, "
                              f"{rate:.1f}/s judging", flush=True)
        finally:
            server.close()

    table = []
    for concurrency in args.concurrency:
        work = big if concurrency >= 256 else tasks
        bare = statistics.median(f[0] for f in figures[(concurrency, "a")])
        bare_cpu = statistics.median(f[3] for f in figures[(concurrency, "a")])
        for which, label in (("a", "bare client"), ("b", "judge layer (run_judges)"),
                             ("c", "whole CLI minus heuristic run")):
            runs = figures[(concurrency, which)]
            if not runs:
                continue
            rate = statistics.median(f[0] for f in runs)
            calls = runs[0][2]
            cpu = statistics.median(f[3] for f in runs)
            table.append([concurrency, label, calls, f"{rate:.1f}", f"{rate / bare:.2f}",
                          f"{statistics.median(f[1] for f in runs):.1f}",
                          f"{chain_bound(work, calls, concurrency):.1f}",
                          f"{cpu:.2f}", f"{bare_cpu / cpu:.2f}"])
    print(tabulate(table, headers=["concurrency", "what", "requests", "requests/s",
                                   "ratio to (a)", "server mean in flight",
                                   "chain-aware bound (s)", "client CPU ms/request",
                                   "CPU ratio (a)/x"]))
    print()
    print("prompt tokens per clip by clip index (mean over trajectories; 140-char summaries)")
    print(tabulate(token_curve(tasks, 600), headers=[
        "clip index", "clips", "unbounded", "context_budget_chars=600"]))


if __name__ == "__main__":
    main()
