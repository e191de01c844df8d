"""``eval-pipeline run`` with a batch-mode judge (#18.2, #18.4): it waits by default, polling
with a progress line; ``--no-wait`` submits and exits saying how to pick the results up; a
CLI killed while it waits is resumed by the same command on the same batch ids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline.judges.batch.ledger import BatchLedger
from eval_pipeline_tests.judges.fake_batches import FakeBatches
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer

KEY_ENV = "BATCH_CLI_KEY"


def _judges(path: Path, server: FakeLLMServer, waves: int | None = 2) -> Path:
    provider = "openai" if server.kind == "openai" else "anthropic"
    bounded = f"    batch_waves: {waves}\n" if waves else ""
    path.write_text(
        f"judges:\n  - name: gpt\n    provider: {provider}\n"
        f"    base_url: {server.base_url}\n    api_key_env: {KEY_ENV}\n"
        "    mode: batch\n    batch_poll_s: 0.2\n" + bounded, "utf-8")
    return path


@pytest.fixture(params=["openai", "anthropic"])
def fake(request):
    server = FakeLLMServer(request.param).start()
    yield server, FakeBatches(server, delay_s=0.3)
    server.stop()


@pytest.mark.slow
def test_cli_waits_for_the_batches_then_no_wait_and_resume(fake, tmp_path, monkeypatch,
                                                          capsys, project_root):
    server, batches = fake
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(KEY_ENV, "sk-batch-cli-0123456789abcdef")
    sample = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    judges = _judges(tmp_path / "judges.yaml", server)
    out = tmp_path / "out"

    # The first batch stays in progress until the CLI has looked at it twice (one
    # progress line), however slow the machine.
    batches.hold = True
    looks = "batches.retrieve" if server.kind == "openai" else "messages.batches.retrieve"

    def release_after_two_looks() -> None:
        while batches.http[looks] < 2:
            time.sleep(0.02)
        batches.release()

    threading.Thread(target=release_after_two_looks, daemon=True).start()
    assert main(["run", str(sample), "--output", str(out), "--judges", str(judges)]) == 0
    captured = capsys.readouterr()
    assert "wave 1" in captured.err and "requests done" in captured.err  # the progress line
    table = pd.read_parquet(out / "judgments__gpt.parquet")
    assert (table["status"] == "ok").all() and not table["cached"].any()
    # two waves of clips (bounded to 2), then one of category and one of trajectory
    # assessments; each line once
    assert batches.created == 4 and batches.lines == len(table)
    assert "batch mode)" in captured.out  # the summary says which mode ran, and its cost
    assert (pd.read_parquet(out / "averaged_scores.parquet")["status"] == "ok").all()

    # --no-wait on new data: submitted, the run exits saying how to pick the results up.
    batches.hold = True
    other = tmp_path / "other.jsonl"
    records = [json.loads(line) for line in sample.read_text("utf-8").splitlines()[:6]]
    for record in records:  # new tasks: prompts the cache has never seen
        record["task_description"] = "Again, differently: " + record["task_description"]
    other.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    args = ["run", str(other), "--output", str(tmp_path / "out2"), "--judges", str(judges)]
    assert main([*args, "--no-wait"]) == 0
    printed = capsys.readouterr().out
    assert "BATCHES PENDING" in printed and "wave 1 submitted" in printed
    assert "eval-pipeline run" in printed and "--no-wait" not in printed.split("later")[1]
    assert "batch_results_sensor" in printed
    assert batches.created == 5
    # The same command later: the same batch is picked up, nothing resubmitted for wave 1.
    batches.release()
    assert main(args) == 0
    assert batches.created == 8  # the three later waves only
    assert (pd.read_parquet(tmp_path / "out2" / "judgments__gpt.parquet")["status"]
            == "ok").all()


@pytest.mark.slow
def test_a_cli_killed_while_waiting_resumes_the_same_batch(tmp_path, project_root):
    server = FakeLLMServer("openai").start()
    batches = FakeBatches(server, delay_s=0.3)
    try:
        batches.hold = True
        judges = _judges(tmp_path / "judges.yaml", server, waves=1)
        env = {**os.environ, KEY_ENV: "sk-batch-kill-0123456789", "PYTHONPATH":
               str(project_root), "DAGSTER_HOME": str(tmp_path / "home"),
               "EVAL_PIPELINE_STORE": str(tmp_path / "store")}
        command = [sys.executable, "-m", "eval_pipeline.cli", "run",
                   str(project_root / "data" / "incoming" / "sample_agent_runs.jsonl"),
                   "--output", str(tmp_path / "out"), "--judges", str(judges)]
        victim = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while batches.http["batches.retrieve"] < 2:  # submitted, and waiting on it
            assert victim.poll() is None, victim.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        assert batches.created == 1
        with BatchLedger(tmp_path / "home" / "storage" / "judge_batches.sqlite") as ledger:
            (job,) = ledger.open_jobs()
            assert [b.batch_id for b in ledger.uncollected(job.job)] == ["batch_0001"]

        batches.release()
        rerun = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True,
                               text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stderr
        # the same batch id picked up (nothing paid twice), then the two assessment waves
        assert batches.created == 3
        table = pd.read_parquet(tmp_path / "out" / "judgments__gpt.parquet")
        assert (table["status"] == "ok").all() and batches.lines == len(table)
    finally:
        server.stop()
