"""Phoenix / OpenInference span exports (JSONL or Parquet), one trajectory per trace.

A row is one span. Three shapes are read, because exporters differ:

- Phoenix's spans dataframe: columns ``context.trace_id``, ``start_time``, ``span_kind``,
  ``attributes.openinference.span.kind``, ``attributes.llm.output_messages`` (a list of
  ``{"message.role", "message.content"}``), ``attributes.tool.name``,
  ``attributes.input.value``, ``attributes.output.value``;
- OTLP-style JSON: ``{"context": {"trace_id", "span_id"}, "attributes": {...}}`` with
  attributes either flattened (``llm.output_messages.0.message.content``) or nested;
- any mix of the two. Every row is flattened to dotted keys and looked up with and
  without the ``attributes.`` prefix (OpenInference semantic conventions).

Spans are grouped by trace id and ordered by start time. The root span's ``input.value``
is the task. An LLM span's output message is the agent's text: ReAct text is located step
by step (its ``Action`` lines are the tool calls), other text becomes a thought, and native
``message.tool_calls`` become tool calls. A TOOL span supplies the result of the pending
call with the same name, or is rendered as call plus result when no LLM text announced it.
A record here is a trace: ``extra["span_count"]`` says how many rows it consumed, so
``sum(span_count) + quarantined == rows read``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord, iter_jsonl_bytes, trajectory_id
from eval_pipeline.formats.react import looks_like_react, parse_react_text
from eval_pipeline.formats.records import finish
from eval_pipeline.formats.render import Transcript, as_text
from eval_pipeline.formats.xml_tags import analyze_xml_response
from eval_pipeline.models import ParseResult, Trajectory

FORMAT_NAME = "openinference_spans"
_MAX_DEPTH = 12


def flatten(value: Any, prefix: str = "", out: dict[str, Any] | None = None,
            depth: int = 0) -> dict[str, Any]:
    """Nested dicts/lists -> dotted keys with list indices, as OpenInference flattens them."""
    out = {} if out is None else out
    if depth > _MAX_DEPTH:
        out[prefix] = value
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
    elif isinstance(value, list | tuple) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            flatten(v, f"{prefix}.{i}", out, depth + 1)
    else:
        out[prefix] = value
    return out


class Span:
    """One span row with OpenInference lookups that ignore the ``attributes.`` prefix."""

    def __init__(self, row: dict[str, Any], line: int, text: str) -> None:
        self.line = line
        self.text = text
        flat = flatten(row)
        self.attrs: dict[str, Any] = {}
        for k, v in flat.items():
            self.attrs[k[len("attributes."):] if k.startswith("attributes.") else k] = v

    def get(self, *keys: str) -> Any:
        for k in keys:
            v = self.attrs.get(k)
            if v is not None and v != "":
                return v
        return None

    @property
    def trace_id(self) -> str | None:
        v = self.get("context.trace_id", "trace_id", "traceId", "context.traceId")
        return None if v is None else str(v)

    @property
    def span_id(self) -> str | None:
        v = self.get("context.span_id", "span_id", "spanId", "context.spanId")
        return None if v is None else str(v)

    @property
    def kind(self) -> str:
        v = self.get("openinference.span.kind", "span_kind", "kind")
        return str(v).upper() if v is not None else ""

    @property
    def parent_id(self) -> str | None:
        v = self.get("parent_id", "parent_span_id", "parentSpanId", "context.parent_id")
        return None if v is None else str(v)

    def start_key(self) -> float | None:
        v = self.get("start_time", "startTime", "start_time_unix_nano", "startTimeUnixNano")
        if isinstance(v, datetime):
            return v.timestamp()
        if isinstance(v, bool):
            return None
        if isinstance(v, int | float):
            return v / 1e9 if v > 1e14 else float(v)
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                try:
                    return float(v)
                except ValueError:
                    return None
        if hasattr(v, "timestamp"):
            return float(v.timestamp())
        return None

    def messages(self, which: str) -> list[dict[str, Any]]:
        """``llm.<which>_messages`` as ``{role, content, tool_calls[]}``."""
        prefix = f"llm.{which}_messages."
        by_index: dict[int, dict[str, Any]] = defaultdict(dict)
        for k, v in self.attrs.items():
            if not k.startswith(prefix):
                continue
            rest = k[len(prefix):]
            idx, _, field = rest.partition(".")
            if not idx.isdigit():
                continue
            by_index[int(idx)][field] = v
        out = []
        for i in sorted(by_index):
            f = by_index[i]
            calls = []
            j = 0
            while f.get(f"message.tool_calls.{j}.tool_call.function.name") is not None:
                calls.append({
                    "id": f.get(f"message.tool_calls.{j}.tool_call.id"),
                    "name": f.get(f"message.tool_calls.{j}.tool_call.function.name"),
                    "arguments": f.get(f"message.tool_calls.{j}.tool_call.function.arguments"),
                })
                j += 1
            out.append({"role": f.get("message.role"), "content": f.get("message.content"),
                        "tool_calls": calls})
        return out


def read_rows(path: Path) -> list[RawRecord]:
    """Span rows from Parquet or JSONL; an unreadable Parquet file is one bad record."""
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except Exception as exc:
            return [RawRecord(1, path.read_bytes()[:2000].decode("utf-8", "replace"), None,
                              f"unreadable Parquet: {type(exc).__name__}: {exc}",
                              "invalid_parquet")]
        return [RawRecord(i + 1, json.dumps(r, default=str)[:5000], r)
                for i, r in enumerate(rows)]
    return list(iter_jsonl_bytes(path.read_bytes()))


class OpenInferenceSpanParser:
    name: ClassVar[str] = FORMAT_NAME

    def sniff(self, path: Path, head: str) -> float:
        if path.suffix.lower() in (".parquet", ".pq"):
            return 0.9
        if "openinference.span.kind" in head or (
            "trace_id" in head and "span_id" in head
        ):
            return 0.95
        return 0.0

    def parse(self, path: Path, ctx: ParseContext) -> ParseResult:
        result = ParseResult()
        traces: dict[str, list[Span]] = defaultdict(list)
        for rec in read_rows(path):
            if rec.error or rec.value is None:
                result.quarantined.append(ctx.quarantine(
                    rec.line, rec.reason or "unreadable", rec.error or "", rec.text, self.name))
                continue
            try:
                span = Span(rec.value, rec.line, rec.text)
            except RecursionError:
                result.quarantined.append(ctx.quarantine(
                    rec.line, "too_deep", "span nested too deeply", rec.text, self.name))
                continue
            if span.trace_id is None:
                result.quarantined.append(ctx.quarantine(
                    rec.line, "missing_field", "span has no context.trace_id", rec.text,
                    self.name))
                continue
            traces[span.trace_id].append(span)
        first_by_task: dict[str, str] = {}
        for index, (trace, spans) in enumerate(traces.items()):
            traj = self._trajectory(trace, spans, ctx, index)
            finish(traj, (), first_by_task)
            result.trajectories.append(traj)
        return result

    def _trajectory(self, trace: str, spans: list[Span], ctx: ParseContext,
                    index: int) -> Trajectory:
        notes: list[str] = []
        keyed = [(s.start_key(), i, s) for i, s in enumerate(spans)]
        if any(k is None for k, _, _ in keyed):
            notes.append("some spans have no readable start_time; file order used for them")
        ordered = [s for _, _, s in sorted(keyed, key=lambda t: (t[0] is None, t[0] or 0, t[1]))]
        root = next((s for s in ordered if s.parent_id is None), ordered[0])
        task = as_text(root.get("input.value"))
        if not task:
            llm = next((s for s in ordered if s.kind == "LLM"), None)
            users = [m for m in (llm.messages("input") if llm else []) if m["role"] == "user"]
            task = as_text(users[0]["content"]) if users else ""
        out = Transcript()
        if task:
            out.element("user", task)
        # The span each step came from, so evaluations can go back onto the span they judge
        # (Phoenix's span evaluations are keyed by span id).
        step_spans: list[str | None] = [root.span_id] * len(out.steps)
        pending: list[str] = []
        for span in ordered:
            if span.kind == "LLM":
                self._llm(span, out, ctx, pending)
            elif span.kind == "TOOL":
                name = as_text(span.get("tool.name", "name")) or "unknown"
                if name.lower() in pending:
                    pending.remove(name.lower())
                else:
                    args = as_text(span.get("tool.parameters", "input.value"))
                    out.element("tool_call", args, attrs={"name": name}, tool_name=name,
                                tool_type=ctx.registry.tool_type_for_name(name),
                                tool_input=args)
                out.element("tool_result", as_text(span.get("output.value")),
                            attrs={"name": name}, tool_name=name)
            step_spans += [span.span_id] * (len(out.steps) - len(step_spans))
        steps = out.steps
        if not any(s.kind == "answer" for s in steps) and steps and steps[-1].kind == "text":
            # The model's last words with no call after them are its answer.
            steps[-1] = steps[-1].model_copy(update={"kind": "answer"})
        final = root.get("output.value") if root.kind in ("AGENT", "CHAIN") else None
        if final is not None and not any(s.kind == "answer" for s in steps):
            out.element("answer", as_text(final))
        step_spans += [root.span_id] * (len(out.steps) - len(step_spans))
        extra: dict[str, Any] = {
            "trace_id": trace,
            # Trace-level results (sequence optimality, the trajectory score) go back to
            # Phoenix as annotations on this span.
            "root_span_id": root.span_id,
            "span_count": len(spans),
            "span_lines": [s.line for s in spans],
        }
        if any(step_spans):
            extra["step_span_ids"] = step_spans
        model = next((s.get("llm.model_name") for s in ordered if s.get("llm.model_name")), None)
        if notes:
            extra["parse_notes"] = notes
        answer = next((s.content for s in reversed(out.steps) if s.kind == "answer"), None)
        return Trajectory(
            trajectory_id=trajectory_id(ctx.source_file, index, trace),
            batch=ctx.batch, source_file=ctx.source_file, source_line=min(s.line for s in spans),
            source_format=self.name, task_id=trace, task_description=task,
            raw_response=out.text(), steps=out.steps, final_result=answer,
            agent_version=as_text(model) if model else None, extra=extra,
        )

    def _llm(self, span: Span, out: Transcript, ctx: ParseContext, pending: list[str]) -> None:
        messages = span.messages("output")
        if not messages and span.get("output.value") is not None:
            messages = [{"role": "assistant", "content": span.get("output.value"),
                         "tool_calls": []}]
        for m in messages:
            text = as_text(m["content"]).strip()
            if text:
                if looks_like_react(text):
                    steps = parse_react_text(text, ctx.registry)
                    out.embed(text, steps)
                    pending.extend((s.tool_name or "").lower() for s in steps
                                   if s.kind == "tool_call")
                elif "<think>" in text or "<tool_call>" in text:
                    analysis = analyze_xml_response(text, ctx.registry)
                    out.embed(text, analysis.steps)
                    pending.extend((s.tool_name or "").lower() for s in analysis.steps
                                   if s.kind == "tool_call")
                elif m["tool_calls"]:
                    out.element("thought", text)
                else:
                    out.text_block("text", text)
            for call in m["tool_calls"]:
                name = as_text(call["name"])
                args = as_text(call["arguments"])
                out.element("tool_call", args, attrs={"name": name, "id": call["id"]},
                            tool_name=name, tool_type=ctx.registry.tool_type_for_name(name),
                            tool_input=args, tool_call_id=as_text(call["id"]) or None)
                pending.append(name.lower())
