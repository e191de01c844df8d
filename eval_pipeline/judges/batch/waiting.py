"""Waiting for provider batches from the command line (the UI has a sensor instead).

The CLI's run ends like any other with a batch-mode judge pending; it then polls the
provider every ``batch_poll_s`` seconds, printing one progress line, until a batch it waits
for has ended, and runs the pipeline again to collect it (and submit the next wave).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

from eval_pipeline.judges import make_judge
from eval_pipeline.judges.batch.engine import poll
from eval_pipeline.judges.batch.ledger import BatchLedger, ledger_path_for
from eval_pipeline.judges.cache import default_cache_path
from eval_pipeline.judges.config import JudgeConfig


class PendingJob(BaseModel):
    """One batch-mode judge's open job on this run's batches, as the ledger has it."""

    judge: str
    job: str
    waves: int
    in_flight: list[str]
    lines: int
    done: int


def ledger_path() -> Path:
    """Where the CLI's judges keep their ledger: beside the default judge cache."""
    return ledger_path_for(default_cache_path())


def pending_jobs(judges: Sequence[JudgeConfig], partitions: Sequence[str],
                 path: Path | None = None) -> list[PendingJob]:
    """The open jobs of the batch-mode judges on any of ``partitions``."""
    path = path or ledger_path()
    wanted = {c.name for c in judges if c.mode == "batch"}
    if not wanted or not path.exists():
        return []
    ours = set(partitions)
    out: list[PendingJob] = []
    with BatchLedger(path) as ledger:
        for job in ledger.open_jobs():
            if job.judge not in wanted or not ours & set(job.partitions):
                continue
            batches = [b for b in ledger.batches(job.job) if b.status != "not submitted"]
            flying = [b for b in batches if not b.collected]
            out.append(PendingJob(judge=job.judge, job=job.job, waves=len(batches),
                                  in_flight=[b.batch_id for b in flying],
                                  lines=sum(b.lines for b in flying),
                                  done=sum(b.done for b in flying)))
    return out


def _api_key(config: JudgeConfig) -> str | None:
    variable = config.key_env()
    return os.environ.get(variable) if variable else None


async def _poll_once(judges: Sequence[JudgeConfig], jobs: Sequence[PendingJob],
                     path: Path) -> bool:
    """Ask each provider once; whether any awaited batch has ended."""
    ended = False
    with BatchLedger(path) as ledger:
        for config in judges:
            names = [j.job for j in jobs if j.judge == config.name]
            if not names:
                continue
            judge = make_judge(config, _api_key(config))
            try:
                ended |= bool(await poll(judge, ledger, jobs=names))
            finally:
                await judge.aclose()
    return ended


def wait_for_batches(judges: Sequence[JudgeConfig], partitions: Sequence[str],
                     note: Callable[[str], None], *, path: Path | None = None,
                     sleep: Callable[[float], None] = time.sleep) -> None:
    """Poll until a batch of an open job on ``partitions`` has ended (or none is in
    flight: the next run has work to submit); one progress line per look."""
    path = path or ledger_path()
    started = time.monotonic()
    interval = min((c.batch_poll_s for c in judges if c.mode == "batch"), default=30.0)
    while True:
        jobs = pending_jobs(judges, partitions, path)
        if not jobs or any(not j.in_flight for j in jobs):
            return
        if asyncio.run(_poll_once(judges, jobs, path)):
            return
        jobs = pending_jobs(judges, partitions, path)
        waited = int(time.monotonic() - started)
        note("; ".join(f"judge {j.judge!r}: wave {j.waves}, {j.done}/{j.lines} requests "
                       f"done ({', '.join(j.in_flight)})" for j in jobs)
             + f"; waiting {waited} s, next look in {interval:g} s")
        sleep(interval)
