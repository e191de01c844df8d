"""Phoenix / OpenInference span exports, as JSONL and as Parquet.

There is no public span corpus, so the fixtures follow the OpenInference semantic
conventions (openinference.span.kind, llm.output_messages.N.message.content, tool.name,
input.value, output.value, context.trace_id, start_time) in the two shapes exporters
write: Phoenix's spans dataframe (``attributes.*`` columns, messages as lists of dicts)
and OTLP-style JSON with flattened attribute keys. Rows are shuffled on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from eval_pipeline.formats import detect_format, parse_file
from eval_pipeline_tests.formats.helpers import assert_result_ok, calls

REACT_1 = ("Thought: The current language of the user is English. I need to use a tool to "
           "help me answer the question.\nAction: get_weather\n"
           'Action Input: {"city": "Paris"}')
REACT_2 = ("Thought: I can answer without using any more tools.\n"
           "Answer: It is 18C and sunny in Paris.")


def phoenix_rows() -> list[dict[str, Any]]:
    """Rows as in ``px.Client().get_spans_dataframe()`` (LlamaIndex ReAct agent)."""
    trace = "7f3a1c0de5b94f0e8f1a2b3c4d5e6f70"

    def row(span_id: str, parent: str | None, name: str, kind: str, start: str,
            **attrs: Any) -> dict[str, Any]:
        out = {"name": name, "span_kind": kind, "parent_id": parent,
               "start_time": start, "end_time": start, "status_code": "OK",
               "context.span_id": span_id, "context.trace_id": trace,
               "attributes.openinference.span.kind": kind}
        out.update({f"attributes.{k}": v for k, v in attrs.items()})
        return out

    return [
        row("s3", "s1", "FunctionTool.call", "TOOL", "2025-03-01T10:00:02.000+00:00",
            **{"tool.name": "get_weather", "input.value": '{"city": "Paris"}',
               "output.value": "18C and sunny"}),
        row("s1", None, "ReActAgent.chat", "AGENT", "2025-03-01T10:00:00.000+00:00",
            **{"input.value": "What's the weather in Paris?",
               "output.value": "It is 18C and sunny in Paris."}),
        row("s4", "s1", "OpenAI.chat", "LLM", "2025-03-01T10:00:03.000+00:00",
            **{"llm.model_name": "gpt-4o-mini",
               "llm.output_messages": [{"message.role": "assistant",
                                        "message.content": REACT_2}]}),
        row("s2", "s1", "OpenAI.chat", "LLM", "2025-03-01T10:00:01.000+00:00",
            **{"llm.model_name": "gpt-4o-mini",
               "llm.output_messages": [{"message.role": "assistant",
                                        "message.content": REACT_1}]}),
    ]


def otlp_rows() -> list[dict[str, Any]]:
    """OTLP-style spans with flattened attributes (OpenAI function calling)."""
    trace = "0af7651916cd43dd8448eb211c80319c"
    base = {"context": {"trace_id": trace}}
    return [
        {**base, "name": "agent", "parent_id": None, "start_time": 1_740_823_200_000_000_000,
         "attributes": {"openinference.span.kind": "CHAIN",
                        "input.value": "Search for the Rust borrow checker"}},
        {**base, "name": "ChatCompletion", "parent_id": "a",
         "start_time": 1_740_823_201_000_000_000,
         "attributes": {
             "openinference.span.kind": "LLM",
             "llm.output_messages.0.message.role": "assistant",
             "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_1",
             "llm.output_messages.0.message.tool_calls.0.tool_call.function.name":
                 "tavily-search",
             "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments":
                 '{"query": "rust borrow checker"}'}},
        {**base, "name": "tavily-search", "parent_id": "a",
         "start_time": 1_740_823_202_000_000_000,
         "attributes": {"openinference.span.kind": "TOOL", "tool.name": "tavily-search",
                        "input.value": '{"query": "rust borrow checker"}',
                        "output.value": "The borrow checker enforces ownership."}},
        {**base, "name": "ChatCompletion", "parent_id": "a",
         "start_time": 1_740_823_203_000_000_000,
         "attributes": {"openinference.span.kind": "LLM",
                        "llm.output_messages.0.message.role": "assistant",
                        "llm.output_messages.0.message.content": "It enforces ownership."}},
    ]


def _check_react_trace(traj) -> None:
    assert traj.task_description == "What's the weather in Paris?"
    assert [s.kind for s in traj.steps] == [
        "user", "thought", "tool_call", "tool_result", "thought", "answer"]
    (call,) = calls(traj)
    assert call.tool_name == "get_weather" and call.tool_input == '{"city": "Paris"}'
    assert traj.steps[3].content == "18C and sunny"
    assert traj.final_result == "It is 18C and sunny in Paris."
    assert traj.agent_version == "gpt-4o-mini" and traj.extra["span_count"] == 4


def test_phoenix_jsonl_one_trajectory_per_trace_in_time_order(tmp_path: Path):
    path = tmp_path / "spans.jsonl"
    rows = phoenix_rows() + otlp_rows()
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert detect_format(path) == "openinference_spans"
    result = parse_file(path, "b")
    assert_result_ok(result)
    assert not result.quarantined and len(result.trajectories) == 2
    react, fc = result.trajectories
    _check_react_trace(react)
    assert [s.kind for s in fc.steps] == ["user", "tool_call", "tool_result", "answer"]
    assert fc.final_result == "It enforces ownership."
    (call,) = calls(fc)
    assert (call.tool_name, call.tool_type, call.tool_call_id) == (
        "tavily-search", "tavily", "call_1")
    assert sum(t.extra["span_count"] for t in result.trajectories) == len(rows)


def test_phoenix_parquet_export(tmp_path: Path):
    path = tmp_path / "spans.parquet"
    rows = phoenix_rows()
    columns = sorted({k for r in rows for k in r})
    # A dataframe export has every column on every row (None where a span lacks it).
    pq.write_table(pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows]), path)
    assert detect_format(path) == "openinference_spans"
    result = parse_file(path, "b")
    assert_result_ok(result)
    (traj,) = result.trajectories
    _check_react_trace(traj)


def test_bad_span_rows_are_quarantined_and_counted(tmp_path: Path):
    path = tmp_path / "spans.jsonl"
    rows = [json.dumps(r) for r in phoenix_rows()]
    rows += ['{"name": "orphan", "attributes": {"openinference.span.kind": "LLM"}}',
             "{not json", "[1, 2]"]
    path.write_text("\n".join(rows) + "\n")
    result = parse_file(path, "b")
    assert [q.reason for q in result.quarantined] == [
        "missing_field", "invalid_json", "not_an_object"]
    assert [q.source_line for q in result.quarantined] == [5, 6, 7]
    assert sum(t.extra["span_count"] for t in result.trajectories) + len(
        result.quarantined) == 7


def test_unreadable_parquet_is_one_quarantined_record(tmp_path: Path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    result = parse_file(path, "b")
    assert not result.trajectories
    assert [(q.source_line, q.reason) for q in result.quarantined] == [(1, "invalid_parquet")]


def test_each_step_keeps_the_span_it_came_from(tmp_path: Path):
    """(#8.3) Evaluations go back onto the span they judge: the LLM span that chose the
    tool, the TOOL span that ran it, the root span for the task."""
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in phoenix_rows() + otlp_rows()) + "\n")
    react, fc = parse_file(path, "b").trajectories
    kinds_and_spans = list(zip([s.kind for s in react.steps], react.extra["step_span_ids"],
                               strict=True))
    assert kinds_and_spans == [("user", "s1"), ("thought", "s2"), ("tool_call", "s2"),
                               ("tool_result", "s3"), ("thought", "s4"), ("answer", "s4")]
    assert react.extra["trace_id"] == "7f3a1c0de5b94f0e8f1a2b3c4d5e6f70"
    # The OTLP rows carry no span ids: nothing is made up for them.
    assert "step_span_ids" not in fc.extra
