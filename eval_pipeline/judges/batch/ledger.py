"""The batch ledger: what was sent to a provider's batch API, under which id, and what came
back, durable across processes (SQLite in WAL mode, next to the judge cache).

A batch answers within 24 hours, long after the process that submitted it may be gone (a
Dagster run ends once it has submitted; a CLI can be killed while it waits). The ledger is
what lets the next process pick the same batch up instead of paying for it twice:

- a **job** is one judge's work on one set of batch partitions (``scope``), open until the
  judgments are materialized; a run on the same scope finds the open job again;
- a **batch** is one provider batch of the job (one wave, or a resubmission), with its
  provider id and last known status;
- a **line** is one request in a batch: its ``custom_id``, the request itself (so results
  can be read without rebuilding it), the request key (the judge cache key of the request
  sent) and the cache key a valid answer is stored under (a repair's answer goes under the
  original question's key, as in live mode), and once the batch has ended, its outcome.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from eval_pipeline.judges.base import JudgeReply, JudgeRequest

LEDGER_FILENAME = "judge_batches.sqlite"
_BUSY_SECONDS = 30.0

LineState = Literal["pending", "answered", "unreadable", "errored"]


class LedgerLine(BaseModel):
    """One request of a provider batch, and its outcome once the batch has ended."""

    batch_id: str
    custom_id: str
    request_key: str
    cache_key: str
    request: JudgeRequest
    state: LineState = "pending"
    reply: JudgeReply | None = None
    error: str | None = None
    raw: str = ""
    retryable: bool = False
    tokens_in: int = 0
    tokens_out: int = 0


class LedgerBatch(BaseModel):
    """One provider batch of a job."""

    batch_id: str
    job: str
    wave: int
    status: str
    ended: bool
    collected: bool
    lines: int
    done: int = 0
    submitted_at: float
    ended_at: float | None = None


class LedgerJob(BaseModel):
    job: str
    judge: str
    scope: str
    partitions: list[str]
    created_at: float
    closed_at: float | None = None


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, judge TEXT NOT NULL,"
    " scope TEXT NOT NULL, partitions TEXT NOT NULL, created_at REAL NOT NULL,"
    " closed_at REAL)",
    "CREATE INDEX IF NOT EXISTS jobs_scope ON jobs (scope, closed_at)",
    "CREATE TABLE IF NOT EXISTS batches (batch_id TEXT PRIMARY KEY, job TEXT NOT NULL,"
    " wave INTEGER NOT NULL, status TEXT NOT NULL, ended INTEGER NOT NULL,"
    " collected INTEGER NOT NULL, lines INTEGER NOT NULL, done INTEGER NOT NULL,"
    " submitted_at REAL NOT NULL, ended_at REAL)",
    "CREATE TABLE IF NOT EXISTS lines (batch_id TEXT NOT NULL, custom_id TEXT NOT NULL,"
    " job TEXT NOT NULL, request_key TEXT NOT NULL, cache_key TEXT NOT NULL,"
    " request TEXT NOT NULL, state TEXT NOT NULL, reply TEXT, error TEXT, raw TEXT,"
    " retryable INTEGER NOT NULL DEFAULT 0, tokens_in INTEGER NOT NULL DEFAULT 0,"
    " tokens_out INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (batch_id, custom_id))",
    "CREATE INDEX IF NOT EXISTS lines_job ON lines (job)",
)


def ledger_path_for(cache_path: Path) -> Path:
    """The ledger lives beside the judge cache ($DAGSTER_HOME/storage by default)."""
    return cache_path.with_name(LEDGER_FILENAME)


class BatchLedger:
    """Jobs, batches and lines; safe to share between processes (WAL, busy timeout)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=_BUSY_SECONDS, isolation_level=None,
                                     check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout={int(_BUSY_SECONDS * 1000)}")
        deadline = time.monotonic() + _BUSY_SECONDS
        while True:  # two processes converting a new file to WAL at once: retry (see cache)
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                for statement in _SCHEMA:
                    self._conn.execute(statement)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> BatchLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs ------------------------------------------------------------------------
    def open_job(self, judge: str, scope: str, partitions: Sequence[str]) -> LedgerJob:
        """The open job of this scope, or a new one: a rerun (after a kill too) resumes."""
        with self._lock:
            row = self._conn.execute(
                "SELECT job, judge, scope, partitions, created_at, closed_at FROM jobs"
                " WHERE scope = ? AND closed_at IS NULL ORDER BY created_at DESC LIMIT 1",
                (scope,)).fetchone()
            if row is None:
                now = time.time()
                job = f"{judge}-{scope[-12:]}-{int(now * 1000)}"
                self._conn.execute(
                    "INSERT INTO jobs (job, judge, scope, partitions, created_at)"
                    " VALUES (?, ?, ?, ?, ?)", (job, judge, scope, json.dumps(list(partitions)),
                                               now))
                row = (job, judge, scope, json.dumps(list(partitions)), now, None)
        return _job(row)

    def close_job(self, job: str) -> None:
        with self._lock:
            self._conn.execute("UPDATE jobs SET closed_at = ? WHERE job = ?", (time.time(), job))

    def open_jobs(self, judge: str | None = None) -> list[LedgerJob]:
        query = ("SELECT job, judge, scope, partitions, created_at, closed_at FROM jobs"
                 " WHERE closed_at IS NULL")
        args: tuple[str, ...] = ()
        if judge is not None:
            query += " AND judge = ?"
            args = (judge,)
        with self._lock:
            return [_job(r) for r in self._conn.execute(query + " ORDER BY created_at", args)]

    # -- batches ---------------------------------------------------------------------
    def add_batch(self, job: str, batch_id: str, status: str, lines: Sequence[LedgerLine],
                  *, ended: bool = False) -> LedgerBatch:
        """Record a submitted batch and its lines in one transaction, the moment the
        provider has given its id."""
        with self._lock:
            wave = 1 + int(self._conn.execute(
                "SELECT COUNT(*) FROM batches WHERE job = ?", (job,)).fetchone()[0])
            now = time.time()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    "INSERT INTO batches (batch_id, job, wave, status, ended, collected, lines,"
                    " done, submitted_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
                    (batch_id, job, wave, status, int(ended), int(ended), len(lines), now,
                     now if ended else None))
                self._conn.executemany(
                    "INSERT INTO lines (batch_id, custom_id, job, request_key, cache_key,"
                    " request, state, reply, error, raw, retryable, tokens_in, tokens_out)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(batch_id, line.custom_id, job, line.request_key, line.cache_key,
                      line.request.model_dump_json(), line.state,
                      line.reply.model_dump_json() if line.reply else None, line.error,
                      line.raw, int(line.retryable), line.tokens_in, line.tokens_out)
                     for line in lines])
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return self.batch(batch_id)

    def batch(self, batch_id: str) -> LedgerBatch:
        with self._lock:
            row = self._conn.execute(
                "SELECT batch_id, job, wave, status, ended, collected, lines, done,"
                " submitted_at, ended_at FROM batches WHERE batch_id = ?",
                (batch_id,)).fetchone()
        if row is None:
            raise KeyError(batch_id)
        return _batch(row)

    def batches(self, job: str) -> list[LedgerBatch]:
        with self._lock:
            return [_batch(r) for r in self._conn.execute(
                "SELECT batch_id, job, wave, status, ended, collected, lines, done,"
                " submitted_at, ended_at FROM batches WHERE job = ? ORDER BY wave", (job,))]

    def uncollected(self, job: str) -> list[LedgerBatch]:
        return [b for b in self.batches(job) if not b.collected]

    def set_status(self, batch_id: str, status: str, done: int, ended: bool) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE batches SET status = ?, done = ?, ended = ?,"
                " ended_at = CASE WHEN ? THEN COALESCE(ended_at, ?) ELSE ended_at END"
                " WHERE batch_id = ?", (status, done, int(ended), int(ended), time.time(),
                                        batch_id))

    # -- lines -----------------------------------------------------------------------
    def lines(self, job: str | None = None, batch_id: str | None = None) -> list[LedgerLine]:
        if batch_id is not None:
            where, arg = "batch_id = ?", batch_id
        elif job is not None:
            where, arg = "job = ?", job
        else:
            raise ValueError("lines of a job or of a batch")
        with self._lock:
            rows = self._conn.execute(
                "SELECT l.batch_id, custom_id, request_key, cache_key, request, state, reply,"
                " error, raw, retryable, tokens_in, tokens_out FROM lines l JOIN batches b"
                f" ON b.batch_id = l.batch_id WHERE l.{where} ORDER BY b.wave, l.rowid",
                (arg,)).fetchall()
        return [LedgerLine(
            batch_id=r[0], custom_id=r[1], request_key=r[2], cache_key=r[3],
            request=JudgeRequest.model_validate_json(r[4]), state=r[5],
            reply=JudgeReply.model_validate_json(r[6]) if r[6] else None, error=r[7],
            raw=r[8] or "", retryable=bool(r[9]), tokens_in=r[10], tokens_out=r[11])
            for r in rows]

    def record_outcomes(self, batch_id: str, outcomes: Iterable[LedgerLine], status: str
                        ) -> None:
        """The ended batch's results, and the batch marked collected, in one transaction:
        a process killed while collecting collects again, never half."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "UPDATE lines SET state = ?, reply = ?, error = ?, raw = ?, retryable = ?,"
                    " tokens_in = ?, tokens_out = ? WHERE batch_id = ? AND custom_id = ?",
                    [(o.state, o.reply.model_dump_json() if o.reply else None, o.error, o.raw,
                      int(o.retryable), o.tokens_in, o.tokens_out, batch_id, o.custom_id)
                     for o in outcomes])
                self._conn.execute(
                    "UPDATE batches SET collected = 1, ended = 1, status = ?,"
                    " ended_at = COALESCE(ended_at, ?) WHERE batch_id = ?",
                    (status, time.time(), batch_id))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise


def _job(row: tuple) -> LedgerJob:
    return LedgerJob(job=row[0], judge=row[1], scope=row[2], partitions=json.loads(row[3]),
                     created_at=row[4], closed_at=row[5])


def _batch(row: tuple) -> LedgerBatch:
    return LedgerBatch(batch_id=row[0], job=row[1], wave=row[2], status=row[3],
                       ended=bool(row[4]), collected=bool(row[5]), lines=row[6], done=row[7],
                       submitted_at=row[8], ended_at=row[9])
