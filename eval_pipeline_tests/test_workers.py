"""#12.4: the CLI's worker processes: how many by default, how the runs are cut for them,
an LLM judge's limits shared between them, their progress shown by the parent, and the
same results as one process."""

from __future__ import annotations

import filecmp
import queue
import threading
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline import local_run, progress
from eval_pipeline.cli import main
from eval_pipeline.defs.pipeline.assets.judging import judge_code_version
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.local_run import (
    AUTO_WORKERS_MIN_BYTES,
    BATCH_WEIGHT_BYTES,
    RUNS_PER_WORKER,
    TAIL_SHARES,
    QueueReporter,
    _show_worker_progress,
    auto_workers,
    max_workers_for,
    plan_runs,
    worker_judges,
)

HEURISTIC = JudgeConfig(name="heuristic")
LLM = JudgeConfig(name="gpt", provider="openai", model="gpt-4o-mini", concurrency=8,
                  requests_per_minute=600, tokens_per_minute=100_000, budget_usd=5.0)


def _bytes(run: list[str], sizes: dict[str, int]) -> int:
    return sum(sizes[k] for k in run)


def test_runs_stay_within_the_cap_and_weigh_alike() -> None:
    keys = [f"b{i:03d}" for i in range(120)]
    # uneven batches: the first forty ten times the others, as the corpora's drops differ
    sizes = {k: 100_000 if i < 40 else 10_000 for i, k in enumerate(keys)}
    total = sum(sizes.values())  # 4.8 MB
    assert plan_runs([keys], sizes, 1, 10 * total) == [keys]  # all fit: one run
    for workers, limit in ((1, 1_000_000), (2, 1_000_000), (2, 4_000_000), (3, 600_000)):
        runs = plan_runs([keys], sizes, workers, limit)
        assert [k for run in runs for k in run] == keys  # every batch once, in order
        assert all(_bytes(run, sizes) <= limit for run in runs)
        assert len(runs) >= -(-total // limit)
        if workers == 1:
            continue
        # enough runs to deal out as workers free up: full rounds, then a light tail
        assert len(runs) >= (RUNS_PER_WORKER - 1 + len(TAIL_SHARES)) * workers
        weights = [_bytes(run, sizes) + BATCH_WEIGHT_BYTES * len(run) for run in runs]
        # none over about a full share (the most a share weighs: the fewest runs) ...
        share = sum(weights) / (workers * (RUNS_PER_WORKER - 1 + sum(TAIL_SHARES)))
        assert max(weights) <= 1.1 * share, (workers, limit, weights)
        # ... and the last round (dealt out last, heaviest first) a fraction of the heaviest
        assert max(weights[-workers:]) <= 0.5 * max(weights), (workers, limit, weights)
    # a batch over the cap runs alone; runs never span two segments
    assert plan_runs([["a", "b"], ["c"]], {"a": 50, "b": 500, "c": 5}, 1, 100) == \
        [["a"], ["b"], ["c"]]
    assert plan_runs([], {}, 2, 100) == []


def test_two_workers_by_default_only_for_an_offline_judge_on_enough_batches() -> None:
    big = AUTO_WORKERS_MIN_BYTES
    assert auto_workers([HEURISTIC], big, 2) == 2
    assert auto_workers([HEURISTIC], big, 8) == 2  # at most two: measured on two cores
    assert auto_workers([HEURISTIC], big, 1) == 1
    assert auto_workers([HEURISTIC], big, None) == 1
    assert auto_workers([HEURISTIC], big - 1, 2) == 1  # a worker's start would not pay
    assert auto_workers([HEURISTIC, LLM], big, 2) == 1  # the provider is the limit
    assert auto_workers([], big, 2) == 1


def test_an_llm_judges_limits_are_shared_not_multiplied() -> None:
    for workers in (2, 3, 8):
        shared = worker_judges([HEURISTIC, LLM], workers)
        assert shared[0] == HEURISTIC
        judge = shared[1]
        assert judge.concurrency * workers <= LLM.concurrency
        assert judge.requests_per_minute * workers == pytest.approx(600)
        assert judge.tokens_per_minute * workers == pytest.approx(100_000)
        assert judge.budget_usd * workers == pytest.approx(5.0)
        # nothing that shapes an answer changed: same code version, same cache entries
        assert judge_code_version(judge) == judge_code_version(LLM)
        assert judge.model_dump(exclude={"concurrency", "requests_per_minute",
                                         "tokens_per_minute", "budget_usd"}) == \
            LLM.model_dump(exclude={"concurrency", "requests_per_minute",
                                    "tokens_per_minute", "budget_usd"})
    assert worker_judges([LLM], 1) == (LLM,)
    # one call at a time per worker at least: never more workers than calls allowed
    assert max_workers_for([HEURISTIC, LLM]) == 8
    assert max_workers_for([HEURISTIC, LLM.model_copy(update={"concurrency": 1})]) == 1
    assert max_workers_for([HEURISTIC]) > 64


def test_run_pipeline_gives_the_workers_their_share_of_the_judge(
        project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "not-used")
    seen = {}

    class Stop(Exception):
        pass

    def capture(spec, runs, workers):
        seen["judges"], seen["runs"], seen["workers"] = spec.judges, runs, workers
        raise Stop

    monkeypatch.setattr(local_run, "_run_in_workers", capture)
    with pytest.raises(Stop):
        local_run.run_pipeline(project_root / "data" / "incoming" / "sample_agent_runs.jsonl",
                               tmp_path / "out", [LLM], split_size=8, workers=2,
                               store=tmp_path / "store")
    assert [j.concurrency for j in seen["judges"]] == [4]
    assert [j.requests_per_minute for j in seen["judges"]] == [300]
    assert seen["workers"] == 2 and len(seen["runs"]) == 3  # 3 batches: a run each


def test_the_workers_together_hold_no_more_batches_than_one_process(
        project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of two workers' runs holds at most half the run cap of batch files."""
    seen = {}

    class Stop(Exception):
        pass

    def capture(spec, runs, workers):
        seen["runs"], seen["workers"] = runs, workers
        raise Stop

    monkeypatch.setattr(local_run, "_run_in_workers", capture)
    monkeypatch.setattr(local_run, "RUN_BATCH_BYTES", 40_000)
    with pytest.raises(Stop):
        local_run.run_pipeline(project_root / "data" / "incoming" / "sample_agent_runs.jsonl",
                               tmp_path / "out", [HEURISTIC], split_size=4, workers=2,
                               store=tmp_path / "store")
    runs = seen["runs"]
    assert seen["workers"] == 2 and len(runs) >= 3
    for run in runs:
        sizes = local_run.batch_sizes(tmp_path / "store" / "batches", run)
        assert len(sizes) == len(run) and sum(sizes.values()) <= 20_000


def _relay(parent: progress.Reporter, send) -> None:
    channel: queue.Queue = queue.Queue()
    relay = threading.Thread(target=_show_worker_progress, args=(channel, parent))
    relay.start()
    send(QueueReporter(channel, parent.judgment_callback() is not None))
    channel.put(None)
    relay.join()


class Recorder(progress.Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.batch_counts: list[tuple[int, int]] = []
        self.judged = [0, 0]

    def note(self, text: str) -> None:
        self.notes.append(text)

    def batches(self, planned: int = 0, done: int = 0) -> None:
        self.batch_counts.append((planned, done))

    def judgment_callback(self):
        def count(done: int, planned: int) -> None:
            self.judged[0] += done
            self.judged[1] += planned
        return count


def test_a_workers_progress_reaches_the_parents_reporter() -> None:
    parent = Recorder()

    def work(worker: QueueReporter) -> None:
        worker.batches(planned=3)
        worker.note("evaluating 3 batch(es) a...c")
        callback = worker.judgment_callback()
        assert callback is not None
        callback(0, 50)
        for _ in range(50):
            callback(1, 0)
        worker.batches(done=3)
        worker.close()

    _relay(parent, work)
    assert parent.notes == ["evaluating 3 batch(es) a...c"]
    assert parent.batch_counts == [(3, 0), (0, 3)]
    assert parent.judged == [50, 50]  # every judgment counted, in fewer messages


def test_a_parent_that_counts_no_judgments_is_sent_none() -> None:
    parent = progress.QuietReporter()
    sent = []
    _relay(parent, lambda worker: sent.append(worker.judgment_callback()))
    assert sent == [None]


VOLATILE = ["latency_s"]
"""Measured per call: differs between any two runs."""


def _exports(out: Path) -> dict[str, Path]:
    return {str(p.relative_to(out)): p for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_two_workers_export_what_one_does_and_keep_quiet(
        project_root: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    for workers in ("1", "2"):
        # the same output folder name: the report is titled after it
        assert main(["run", str(drop), "--output", str(tmp_path / workers / "out"),
                     "--split-size", "8", "--store", str(tmp_path / workers / "store"),
                     "--workers", workers, "--quiet"]) == 0
    assert "evaluating" not in capfd.readouterr().err  # --quiet holds in the workers too
    one, two = _exports(tmp_path / "1" / "out"), _exports(tmp_path / "2" / "out")
    assert one.keys() == two.keys() and len(one) > 5
    differ = []
    for name, path in one.items():
        if name.endswith(".parquet"):
            left, right = (pd.read_parquet(p).drop(columns=VOLATILE, errors="ignore")
                           for p in (path, two[name]))
            pd.testing.assert_frame_equal(left, right)
        elif not filecmp.cmp(path, two[name], shallow=False):
            differ.append(name)
    assert differ == []


def test_a_worker_builds_the_heuristic_pipeline_without_the_provider_sdks() -> None:
    """Importing anthropic and openai was a second of CPU and 60 MB in every process that
    loads the definitions (each worker); only an LLM judge's endpoint check needs them."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from eval_pipeline.local_run import BatchRunSpec\n"
            "from eval_pipeline.judges.config import JudgeConfig\n"
            "spec = BatchRunSpec((JudgeConfig(name='heuristic'),), {}, '/tmp/unused', 'INFO')\n"
            "spec.definitions().resolve_job_def('evaluate_batch')\n"
            "print(sorted(m for m in ('anthropic', 'openai') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_a_failed_run_in_a_worker_is_reported_and_no_further_run_starts(
        tmp_path: Path) -> None:
    import dagster as dg

    from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION
    from eval_pipeline.local_run import BatchRunSpec, _run_in_workers

    keys = [f"gone{i}" for i in range(10)]  # registered, but no batch file: ingest fails
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(BATCHES_PARTITION, keys)
    spec = BatchRunSpec((HEURISTIC,), {"batches_dir": str(tmp_path / "batches"),
                                       "incoming_dir": str(tmp_path / "incoming")},
                        str(tmp_path / "assets"), "WARNING")
    failures = _run_in_workers(spec, [[k] for k in keys], 2)
    failed = [f for f in failures if f]
    assert failed and all(label in keys and "no batch file" in error
                          for label, error in failed)
    assert len(failures) < len(keys)  # the runs not started were not started


def test_no_automatic_full_collection_during_runs_one_after_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's collector makes no full collection of its own while the runs execute; one
    is made after each run (also a failed one), and the thresholds come back after."""
    import gc

    from eval_pipeline.local_run import (
        NO_AUTOMATIC_FULL_COLLECTIONS,
        BatchRunSpec,
        _run_batches_in_worker,
    )

    seen: list[tuple[str, object]] = []
    monkeypatch.setattr(local_run, "_job", lambda spec: "job")

    def execute(job, instance, run_config, batches):
        seen.append(("run", gc.get_threshold()[2]))
        return "broken" if batches == ["c"] else None

    monkeypatch.setattr(local_run, "_execute", execute)
    monkeypatch.setattr(local_run.gc, "collect", lambda *a: seen.append(("collect", a)) or 0)
    before = gc.get_threshold()
    spec = BatchRunSpec((HEURISTIC,), {}, str(tmp_path / "assets"), "WARNING")
    assert _run_batches_in_worker(spec, [["a"], ["b"]]) is None
    assert _run_batches_in_worker(spec, [["c"], ["d"]]) == ("c", "broken")
    assert seen == [("run", NO_AUTOMATIC_FULL_COLLECTIONS), ("collect", ()),
                    ("run", NO_AUTOMATIC_FULL_COLLECTIONS), ("collect", ()),
                    ("run", NO_AUTOMATIC_FULL_COLLECTIONS), ("collect", ())]
    assert gc.get_threshold() == before
