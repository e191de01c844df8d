"""New complete traces of a Phoenix project, read once each, as span drops.

**A complete trace** is one whose root span (the span with no parent) has reached the server
and ended at least ``settle_s`` seconds ago. OpenTelemetry exports a span when it ends and a
parent ends after its children, so the root arrives last; the settle time covers children
exported in a later batch than their root. A trace whose root never arrives (a crashed agent)
is never read; a span that arrives after its trace was read is not read either (the
trajectory stays as it was judged).

**Incremental.** The cursor holds the *watermark* (the latest root start time taken, held
back to the oldest root still waiting) and the ids of the traces taken whose roots started
within ``lookback_s`` of it. Each pull lists the root spans that started since
``watermark - lookback_s`` (a query of one span per trace), skips the traces taken, and
reads every span of the complete ones, a trace at a time, once. The look-back is how a
long-running trace (its root started before shorter traces that finished first) is still
found when it ends: a trace running longer than ``lookback_s`` after newer traces were taken
is missed, so set it above your longest agent run.

The spans are written as JSON lines in the shape Phoenix's REST API returns them
(``context.trace_id``, ``context.span_id``, ``parent_id``, ``span_kind``, ``start_time``,
flattened ``attributes``), which :mod:`eval_pipeline.formats.spans` parses like any span
export: the Phoenix trace and span ids stay on the trajectory (``extra.trace_id``,
``extra.root_span_id``, ``extra.step_span_ids``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from pydantic import BaseModel, Field

from eval_pipeline.atomic import write_atomic
from eval_pipeline.phoenix.connection import PhoenixConnection, PhoenixError

ROOT_QUERY_LIMIT = 100_000
"""Root spans listed per pull at most; more means a look-back far too long for the project."""
TRACES_PER_QUERY = 20
SPANS_PER_TRACE_LIMIT = 100_000


class SpansApi(Protocol):
    """The part of ``phoenix.client``'s ``client.spans`` read here."""

    def get_spans(self, *, project_identifier: str, start_time: datetime | None = None,
                  trace_ids: Sequence[str] | None = None, parent_id: str | None = None,
                  limit: int = 100) -> Any: ...


class PhoenixCursor(BaseModel):
    """A Phoenix sensor's state between ticks (stored as its Dagster cursor, JSON)."""

    watermark: datetime | None = None
    taken: dict[str, datetime] = Field(default_factory=dict)
    """Trace id -> its root's start, for the traces read within the look-back window."""
    batches: int = 0
    """Batches written so far: the next batch's number."""


@dataclass
class PulledTrace:
    trace_id: str
    root_start: datetime
    spans: list[dict[str, Any]]


@dataclass
class Pull:
    traces: list[PulledTrace]
    cursor: PhoenixCursor
    waiting: int
    """Traces whose root has ended less than the settle time ago (read on a later pull)."""
    deferred: int
    """Complete traces beyond ``max_traces`` (read on the next pull)."""


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _trace_id(span: dict[str, Any]) -> str:
    return str((span.get("context") or {}).get("trace_id") or "")


def pull_complete_traces(connection: PhoenixConnection, spans: SpansApi,
                         cursor: PhoenixCursor, *, now: datetime, settle_s: float,
                         lookback_s: float, max_traces: int) -> Pull:
    """The complete traces not read before (oldest first, at most ``max_traces``) with
    their spans, and the cursor to store once they are safely written."""
    lookback = timedelta(seconds=lookback_s)
    since = cursor.watermark - lookback if cursor.watermark else None
    roots = connection.call("listing root spans", lambda: spans.get_spans(
        project_identifier=connection.project, start_time=since, parent_id="null",
        limit=ROOT_QUERY_LIMIT))
    if len(roots) >= ROOT_QUERY_LIMIT:
        raise PhoenixError(
            f"{connection.describe()}: {len(roots)} root spans since {since}: shorten the "
            f"look-back ({lookback_s} s)")
    candidates: list[tuple[datetime, str, datetime | None]] = []
    starts: list[datetime] = []
    for root in roots:
        start, trace = _time(root.get("start_time")), _trace_id(root)
        if start is None or not trace:
            continue
        starts.append(start)
        if trace not in cursor.taken:
            candidates.append((start, trace, _time(root.get("end_time"))))
    settled_before = now - timedelta(seconds=settle_s)
    settled = sorted(c for c in candidates if c[2] is not None and c[2] <= settled_before)
    waiting = [c for c in candidates if c[2] is None or c[2] > settled_before]
    chosen, deferred = settled[:max_traces], settled[max_traces:]
    by_trace: dict[str, list[dict[str, Any]]] = {trace: [] for _, trace, _ in chosen}
    ids = list(by_trace)
    for i in range(0, len(ids), TRACES_PER_QUERY):
        part = ids[i:i + TRACES_PER_QUERY]
        with connection.errors("reading the spans of new traces"):
            found = spans.get_spans(project_identifier=connection.project, trace_ids=part,
                                    limit=SPANS_PER_TRACE_LIMIT)
        for span in found:
            if _trace_id(span) in by_trace:
                by_trace[_trace_id(span)].append(span)
    traces = [PulledTrace(trace, start, sorted(
        by_trace[trace], key=lambda s: (_time(s.get("start_time")) or start, str(
            (s.get("context") or {}).get("span_id")))))
        for start, trace, _ in chosen]
    held = [c[0] for c in (*waiting, *deferred)]
    watermark = cursor.watermark
    if starts:
        latest = max(starts)
        watermark = min([latest, *held])
    taken = {**cursor.taken, **{t.trace_id: t.root_start for t in traces}}
    if watermark is not None:
        taken = {t: s for t, s in taken.items() if s >= watermark - lookback}
    return Pull(traces=traces, cursor=PhoenixCursor(
        watermark=watermark, taken=taken, batches=cursor.batches),
        waiting=len(waiting), deferred=len(deferred))


def write_span_drop(path: Path, traces: Sequence[PulledTrace]) -> int:
    """The traces' spans as one JSONL span drop (whole, or not at all); the span count."""
    lines = [json.dumps(span, default=str, ensure_ascii=False)
             for trace in traces for span in trace.spans]

    def write(fh: BinaryIO) -> None:
        fh.write(("\n".join(lines) + "\n").encode("utf-8"))

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, write)
    return len(lines)


def batch_key(project: str, number: int) -> str:
    """``phoenix_<project>_00001``: a partition key safe for files and asset paths."""
    from eval_pipeline.splitting import partition_key_for

    return partition_key_for(f"phoenix_{project}_{number:05d}")


def chunks(traces: Sequence[PulledTrace], size: int) -> list[list[PulledTrace]]:
    """Batches of ``size`` traces (the pipeline's split size), oldest first."""
    return [list(traces[i:i + size]) for i in range(0, len(traces), max(1, size))]


def utc_now() -> datetime:
    return datetime.now(UTC)
