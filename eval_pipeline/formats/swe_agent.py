"""SWE-agent ``.traj`` files and the ``all_preds.jsonl`` next to them.

A ``.traj`` is one JSON object: ``trajectory[]`` steps of ``{thought, action, observation}``
are rendered as thought / tool call / result (the tool name is the command's first word, or
the function name in function-calling configs); a file with only ``history`` (chat
messages) is rendered as chat. ``info.exit_status`` and ``info.submission`` (the patch) are
kept; there is no resolved flag in these files, so ``success`` stays unknown.
``all_preds.jsonl`` rows (``instance_id``, ``model_patch``) become answer-only records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord
from eval_pipeline.formats.chat import render_messages
from eval_pipeline.formats.records import JsonRecordsParser, RecordError, as_str, require
from eval_pipeline.formats.render import Transcript, as_text
from eval_pipeline.models import Trajectory

FORMAT_NAME = "swe_agent"
PREDS_FORMAT_NAME = "swe_agent_preds"


def _issue_text(history: list[Any]) -> str:
    for m in history:
        if isinstance(m, dict) and m.get("role") == "user":
            return as_text(m.get("content"))
    return ""


def _function_names(history: list[Any]) -> list[str | None]:
    """Function names of the action messages, in order (function-calling configs only)."""
    names: list[str | None] = []
    for m in history:
        if isinstance(m, dict) and m.get("message_type") == "action":
            calls = m.get("tool_calls")
            name = None
            if isinstance(calls, list) and calls and isinstance(calls[0], dict):
                fn = calls[0].get("function")
                name = fn.get("name") if isinstance(fn, dict) else None
            names.append(name)
    return names


class SweAgentParser(JsonRecordsParser):
    name: ClassVar[str] = FORMAT_NAME
    whole_file: ClassVar[bool] = True

    def sniff(self, path: Path, head: str) -> float:
        if path.suffix == ".traj":
            return 0.95
        if '"trajectory"' in head and '"observation"' in head and '"action"' in head:
            return 0.7
        return 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        history = hist if isinstance(hist := value.get("history"), list) else []
        info = inf if isinstance(inf := value.get("info"), dict) else {}
        steps_in = value.get("trajectory")
        extra = {k: v for k, v in value.items() if k not in ("trajectory", "history")}
        if isinstance(steps_in, list) and steps_in:
            out = Transcript()
            task = _issue_text(history)
            if task:
                out.element("user", task)
            fn_names = _function_names(history)
            for i, step in enumerate(steps_in):
                if not isinstance(step, dict):
                    raise RecordError("wrong_type", f"trajectory[{i}] is not an object")
                thought = as_text(step.get("thought")).strip()
                action = as_text(step.get("action")).strip()
                if thought:
                    out.element("thought", thought)
                if action:
                    name = fn_names[i] if i < len(fn_names) and fn_names[i] else (
                        action.split(None, 1)[0])
                    out.element("tool_call", action, attrs={"name": name}, tool_name=name,
                                tool_type=ctx.registry.tool_type_for_name(name),
                                tool_input=action)
                observation = as_text(step.get("observation"))
                if observation.strip():
                    out.element("tool_result", observation.replace("\r\n", "\n"),
                                attrs={"name": name if action else None},
                                tool_name=name if action else None)
            text, steps = out.text(), out.steps
        elif history:
            rendered = render_messages(history, ctx.registry)
            text, steps = rendered.text, rendered.steps
            task = _issue_text(history)
        else:
            require(value, "trajectory", list)
            raise RecordError("missing_field", "neither trajectory nor history has steps")
        return self.trajectory(
            rec, ctx, index,
            task_id=Path(ctx.source_file).stem,
            task_description=task,
            raw_response=text,
            steps=steps,
            final_result=as_str(info.get("submission")),
            extra=extra,
        )


class SweAgentPredsParser(JsonRecordsParser):
    name: ClassVar[str] = PREDS_FORMAT_NAME

    def sniff(self, path: Path, head: str) -> float:
        return 0.9 if '"model_patch"' in head and '"instance_id"' in head else 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        instance = require(value, "instance_id", str)
        patch = value.get("model_patch")
        out = Transcript()
        out.element("answer", as_text(patch))
        return self.trajectory(
            rec, ctx, index,
            task_id=instance,
            task_description=instance,
            raw_response=out.text(),
            steps=out.steps,
            final_result=as_str(patch),
            agent_version=as_str(value.get("model_name_or_path")),
            extra={k: v for k, v in value.items() if k not in ("model_patch",)},
        )
