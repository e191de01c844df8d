"""tau-bench result files: a JSON list of runs with OpenAI messages, reward and gold actions.

``info.task.actions`` are the ground-truth write actions; they become ``expected_calls``
(``{name, arguments}``) and ``expected_tools`` so routing checks can compare them with the
calls the agent made. Two trials of one task share a task id, so duplicates are keyed by
task and trial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord
from eval_pipeline.formats.chat import render_messages
from eval_pipeline.formats.chat_records import first_user_text
from eval_pipeline.formats.records import JsonRecordsParser, RecordError, as_float, require
from eval_pipeline.models import Trajectory

FORMAT_NAME = "tau_bench"


def expected_from_actions(actions: Any) -> tuple[list[dict[str, Any]], list[str]]:
    calls: list[dict[str, Any]] = []
    for a in actions if isinstance(actions, list) else []:
        if isinstance(a, dict) and a.get("name"):
            calls.append({"name": str(a["name"]), "arguments": a.get("kwargs", a.get("arguments"))})
    tools = list(dict.fromkeys(c["name"] for c in calls))
    return calls, tools


class TauBenchParser(JsonRecordsParser):
    name: ClassVar[str] = FORMAT_NAME
    whole_file: ClassVar[bool] = True

    def sniff(self, path: Path, head: str) -> float:
        if head.lstrip().startswith("[") and '"traj"' in head and '"reward"' in head:
            return 0.9
        return 0.0

    def duplicate_key(self, traj: Trajectory) -> str:
        return f"{traj.task_id}/trial{traj.extra.get('trial')}"

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        messages = require(value, "traj", list)
        info = found if isinstance(found := value.get("info"), dict) else {}
        task = found if isinstance(found := info.get("task"), dict) else {}
        if "actions" in task and not isinstance(task["actions"], list):
            raise RecordError("wrong_type", "info.task.actions must be a list")
        calls, tools = expected_from_actions(task.get("actions"))
        rendered = render_messages(messages, ctx.registry)
        extra = {k: v for k, v in value.items() if k != "traj"}
        if rendered.notes:
            extra["parse_notes"] = rendered.notes
        reward = as_float(value.get("reward"))
        answer = next((s.content for s in reversed(rendered.steps) if s.kind == "answer"), None)
        return self.trajectory(
            rec, ctx, index,
            task_id=str(value.get("task_id", f"record{rec.line}")),
            task_description=str(task.get("instruction") or first_user_text(messages)),
            raw_response=rendered.text,
            steps=rendered.steps,
            reward=reward,
            success=None if reward is None else reward >= 1.0,
            expected_calls=calls if "actions" in task else None,
            expected_tools=tools if "actions" in task else None,
            final_result=answer,
            extra=extra,
        )
