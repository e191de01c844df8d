"""Generic chat-log records: any JSON object that carries a list of messages.

Covers OpenAI/Anthropic logs, AgentProcessBench (``step_labels`` keyed by the index of an
assistant message, ``final_label``), ShareGPT ``conversations`` (DataEva's judge prompts)
and tau-bench's flattened ``messages_display`` transcripts. Labels the source carries land
in canonical columns (``Step.label``, ``final_label``, ``reward``, ``success``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord
from eval_pipeline.formats.chat import loads_lenient, render_messages
from eval_pipeline.formats.records import (
    JsonRecordsParser,
    RecordError,
    as_bool,
    as_float,
    as_str,
)
from eval_pipeline.formats.render import as_text
from eval_pipeline.formats.routing import expectations_from
from eval_pipeline.models import Step, Trajectory
from eval_pipeline.routing import RULE_KEYS

FORMAT_NAME = "chat"
MESSAGE_KEYS = ("messages", "conversations", "conversation", "traj", "dialog", "turns",
                "chat", "history")
TASK_ID_KEYS = ("task_id", "id", "instance_id", "conversation_id", "total_index")
QUESTION_KEYS = ("question", "instruction", "query", "prompt", "task", "task_description")
_DISPLAY_TURN = re.compile(r"^(user|assistant|tool|system): ?", re.MULTILINE)


def messages_from_display(text: str) -> list[dict[str, Any]]:
    """tau-bench's ``user: ..\\nassistant: None\\ntool: ..`` transcript as messages.

    The flattening dropped the call itself (``assistant: None`` before a ``tool:`` line),
    so such a turn becomes a call named ``unknown`` rather than vanishing.
    """
    marks = list(_DISPLAY_TURN.finditer(text))
    messages: list[dict[str, Any]] = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        content = text[m.end():end].rstrip("\n")
        role = m.group(1)
        nxt = marks[i + 1].group(1) if i + 1 < len(marks) else None
        if role == "assistant" and content.strip() == "None" and nxt == "tool":
            messages.append({"role": "assistant", "content": "",
                             "tool_calls": [{"id": None,
                                             "function": {"name": "unknown", "arguments": ""}}]})
        else:
            messages.append({"role": role, "content": content})
    return messages


def find_messages(value: dict[str, Any]) -> tuple[str, list[Any]] | None:
    for key in MESSAGE_KEYS:
        got = loads_lenient(value.get(key))
        if isinstance(got, list) and got and any(
            isinstance(m, dict) and ("role" in m or "from" in m) for m in got
        ):
            return key, got
    display = value.get("messages_display")
    if isinstance(display, str):
        return "messages_display", messages_from_display(display)
    return None


def first_user_text(messages: list[Any]) -> str:
    for m in messages:
        if isinstance(m, dict) and str(m.get("role", m.get("from", ""))).lower() in (
            "user", "human"
        ):
            content = m.get("content", m.get("value"))
            if isinstance(content, list):
                return "\n".join(as_text(b.get("text")) for b in content
                                 if isinstance(b, dict) and b.get("type") == "text")
            return as_text(content)
    return ""


def apply_step_labels(steps: list[Step], message_steps: list[list[int]],
                      labels: Any) -> tuple[list[Step], list[str]]:
    """``{"2": 1, "8": -1}`` (assistant message index -> label) onto that message's steps."""
    notes: list[str] = []
    labels = loads_lenient(labels)
    if not isinstance(labels, dict):
        return steps, ([f"step_labels is a {type(labels).__name__}, ignored"]
                       if labels is not None else [])
    steps = list(steps)
    for key, label in labels.items():
        try:
            msg_index = int(key)
            value = float(label)
        except (TypeError, ValueError):
            notes.append(f"step label {key!r}: {label!r} is not index: number")
            continue
        if not 0 <= msg_index < len(message_steps) or not message_steps[msg_index]:
            notes.append(f"step label for message {msg_index} matches no step")
            continue
        for i in message_steps[msg_index]:
            steps[i] = steps[i].model_copy(update={"label": value})
    return steps, notes


class ChatParser(JsonRecordsParser):
    """JSONL or a JSON list of records with a message list."""

    name: ClassVar[str] = FORMAT_NAME
    #: Only a record that carries ``expected_tools: []`` has an empty expectation: a case
    #: written to say "call nothing".
    empty_expectation_means_no_call: ClassVar[bool] = True

    def sniff(self, path: Path, head: str) -> float:
        if '"messages_display"' in head or '"step_labels"' in head:
            return 0.9
        if any(f'"{k}"' in head for k in MESSAGE_KEYS) and (
            '"role"' in head or '"from"' in head
        ):
            return 0.6
        return 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        found = find_messages(value)
        if found is None:
            raise RecordError("missing_field",
                              f"no message list under any of {', '.join(MESSAGE_KEYS)}")
        key, messages = found
        rendered = render_messages(messages, ctx.registry)
        steps, label_notes = apply_step_labels(
            rendered.steps, rendered.message_steps, value.get("step_labels"))
        tools, calls, rules = expectations_from(value)  # a chat log may carry a case's
        extra = {k: v for k, v in value.items() if k != key and k not in RULE_KEYS}
        if rules:
            extra["routing_rules"] = rules
        notes = rendered.notes + label_notes
        if notes:
            extra["parse_notes"] = notes
        task_id = next((value[k] for k in TASK_ID_KEYS if value.get(k) is not None), None)
        question = next((value[k] for k in QUESTION_KEYS if isinstance(value.get(k), str)),
                        None)
        answer = next((s.content for s in reversed(steps) if s.kind == "answer"), None)
        final = value.get("answer_text", value.get("final_answer", value.get("final_result")))
        return self.trajectory(
            rec, ctx, index,
            task_id=as_str(task_id) if task_id is not None else f"{Path(ctx.source_file).stem}"
            f":{rec.line}",
            task_description=question if question is not None else first_user_text(messages),
            raw_response=rendered.text,
            steps=steps,
            success=as_bool(value.get("success")),
            reward=as_float(value.get("reward")),
            final_label=as_float(value.get("final_label")),
            final_result=as_str(final) if final is not None else answer,
            expected_tools=tools, expected_calls=calls,
            extra=extra,
        )
