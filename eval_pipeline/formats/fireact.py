"""FireAct result files: one JSON object keyed by question index, ReAct inside chat turns.

Each value holds ``traj`` (user question, assistant ``Thought/Action`` turns, user
``Observation`` turns), ``reward`` (exact match, a bool), ``em``, ``f1``, ``gt`` and
``pred``. The key is the task id; ``reward`` is kept both as ``reward`` and ``success``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord
from eval_pipeline.formats.chat import render_messages
from eval_pipeline.formats.chat_records import first_user_text
from eval_pipeline.formats.records import JsonRecordsParser, as_bool, as_float, as_str, require
from eval_pipeline.models import Trajectory

FORMAT_NAME = "fireact"


class FireActParser(JsonRecordsParser):
    name: ClassVar[str] = FORMAT_NAME
    whole_file: ClassVar[bool] = True
    keyed: ClassVar[bool] = True

    def sniff(self, path: Path, head: str) -> float:
        if (head.lstrip().startswith("{") and '"traj"' in head and '"em"' in head
                and '"reward"' in head):
            return 0.9
        return 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        messages = require(value, "traj", list)
        rendered = render_messages(messages, ctx.registry)
        extra = {k: v for k, v in value.items() if k != "traj"}
        if rendered.notes:
            extra["parse_notes"] = rendered.notes
        return self.trajectory(
            rec, ctx, index,
            task_id=rec.key or f"record{rec.line}",
            task_description=first_user_text(messages),
            raw_response=rendered.text,
            steps=rendered.steps,
            reward=as_float(value.get("reward")),
            success=as_bool(value.get("reward")),
            final_result=as_str(value.get("pred")),
            extra=extra,
        )
