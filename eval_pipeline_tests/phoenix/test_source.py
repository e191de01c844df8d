"""The Phoenix source's cursor: complete traces only, each read once, long runs found.

The server side here is an in-memory list of spans answering ``get_spans`` with the REST
API's filters (start time, root spans, trace ids); the real server is in
``test_round_trip.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from eval_pipeline.phoenix.connection import PhoenixConnection, PhoenixUnreachable
from eval_pipeline.phoenix.source import PhoenixCursor, pull_complete_traces

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
CONNECTION = PhoenixConnection(base_url="http://127.0.0.1:9", project="agents")


class Spans:
    """Spans as Phoenix's REST API filters them."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.trace_reads: list[str] = []

    def add_trace(self, trace: str, start: datetime, seconds: float, children: int = 2,
                  root: bool = True) -> None:
        for i in range(children):
            self.spans.append(self._span(trace, f"{trace}-c{i}", f"{trace}-root",
                                         start + timedelta(seconds=i + 0.1),
                                         start + timedelta(seconds=i + 0.5)))
        if root:
            self.spans.append(self._span(trace, f"{trace}-root", None, start,
                                         start + timedelta(seconds=seconds)))

    @staticmethod
    def _span(trace: str, span: str, parent: str | None, start: datetime, end: datetime
              ) -> dict[str, Any]:
        return {"context": {"trace_id": trace, "span_id": span}, "parent_id": parent,
                "span_kind": "AGENT" if parent is None else "LLM",
                "start_time": start.isoformat(), "end_time": end.isoformat(),
                "attributes": {"input.value": "q"} if parent is None else {}}

    def get_spans(self, *, project_identifier: str, start_time: datetime | None = None,
                  trace_ids: Any = None, parent_id: str | None = None,
                  limit: int = 100) -> list[dict[str, Any]]:
        assert project_identifier == "agents"
        out = [s for s in self.spans
               if (start_time is None or datetime.fromisoformat(s["start_time"]) >= start_time)
               and (parent_id != "null" or s["parent_id"] is None)
               and (trace_ids is None or s["context"]["trace_id"] in trace_ids)]
        if trace_ids is not None:
            self.trace_reads += list(trace_ids)
        return out[:limit]


def pull(spans: Spans, cursor: PhoenixCursor, now: datetime, **options: Any):
    settings = {"settle_s": 10.0, "lookback_s": 3600.0, "max_traces": 100} | options
    return pull_complete_traces(CONNECTION, spans, cursor, now=now, **settings)


def test_complete_traces_are_read_once_with_all_their_spans():
    spans = Spans()
    spans.add_trace("a", T0, 5)
    spans.add_trace("b", T0 + timedelta(seconds=60), 5, children=3)
    first = pull(spans, PhoenixCursor(), T0 + timedelta(minutes=5))
    assert [t.trace_id for t in first.traces] == ["a", "b"]
    assert [len(t.spans) for t in first.traces] == [3, 4]
    assert first.traces[0].spans[0]["parent_id"] is None  # ordered by start time
    again = pull(spans, first.cursor, T0 + timedelta(minutes=6))
    assert again.traces == [] and spans.trace_reads == ["a", "b"]  # nothing read twice
    assert again.cursor.watermark == T0 + timedelta(seconds=60)


def test_a_trace_waits_until_its_root_has_settled_and_holds_the_watermark():
    spans = Spans()
    spans.add_trace("old", T0, 5)
    spans.add_trace("fresh", T0 + timedelta(seconds=100), 5)  # root ended at +105 s
    now = T0 + timedelta(seconds=110)  # 5 s after: not settled (10 s)
    first = pull(spans, PhoenixCursor(), now)
    assert [t.trace_id for t in first.traces] == ["old"] and first.waiting == 1
    assert first.cursor.watermark == T0 + timedelta(seconds=100)
    second = pull(spans, first.cursor, now + timedelta(seconds=10))
    assert [t.trace_id for t in second.traces] == ["fresh"] and second.waiting == 0


def test_a_long_running_trace_is_found_when_it_ends_within_the_lookback():
    spans = Spans()
    spans.add_trace("short", T0 + timedelta(seconds=30), 5)
    first = pull(spans, PhoenixCursor(), T0 + timedelta(minutes=2))
    assert [t.trace_id for t in first.traces] == ["short"]
    # Started before the short one, ended (and exported its root) 20 minutes later.
    spans.add_trace("long", T0, 20 * 60)
    later = T0 + timedelta(minutes=25)
    assert [t.trace_id for t in pull(spans, first.cursor, later).traces] == ["long"]
    # With a look-back shorter than its head start, it would be missed: say so in docs.
    missed = pull(spans, first.cursor, later, lookback_s=10)
    assert missed.traces == []


def test_a_trace_without_a_root_span_is_not_read():
    spans = Spans()
    spans.add_trace("orphan", T0, 5, root=False)
    assert pull(spans, PhoenixCursor(), T0 + timedelta(hours=1)).traces == []


def test_max_traces_defers_the_rest_to_the_next_pull_oldest_first():
    spans = Spans()
    for i in range(5):
        spans.add_trace(f"t{i}", T0 + timedelta(seconds=i), 1)
    now = T0 + timedelta(minutes=5)
    first = pull(spans, PhoenixCursor(), now, max_traces=2)
    assert [t.trace_id for t in first.traces] == ["t0", "t1"] and first.deferred == 3
    second = pull(spans, first.cursor, now, max_traces=2)
    third = pull(spans, second.cursor, now, max_traces=2)
    assert [t.trace_id for t in second.traces + third.traces] == ["t2", "t3", "t4"]
    assert pull(spans, third.cursor, now).traces == []


def test_cursor_round_trips_as_json():
    spans = Spans()
    spans.add_trace("a", T0, 1)
    cursor = pull(spans, PhoenixCursor(), T0 + timedelta(minutes=1)).cursor
    assert PhoenixCursor.model_validate_json(cursor.model_dump_json()) == cursor


def test_unreachable_server_is_one_line_naming_it():
    from phoenix.client import Client

    with pytest.raises(PhoenixUnreachable) as caught:
        pull(Client(base_url=CONNECTION.base_url).spans, PhoenixCursor(), T0)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message and "http://127.0.0.1:9" in message and "unreachable" in message
