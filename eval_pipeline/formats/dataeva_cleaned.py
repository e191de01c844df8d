"""DataEva's newer dialect (the ``*_cleaned`` files): ``sft_data`` plus ``conversations``.

``sft_data.output`` is the trajectory as one text of ``<think>`` / ``<tool_call>{"name",
"arguments"}</tool_call>`` / ``<result>`` / ``<answer>``, so it is the ``raw_response`` and
is cut by the XML-tag scanner. Without it, the ``conversations`` list (with the non-standard
``action`` role) is rendered instead. ``tool_call_statistics`` stays in ``extra``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord
from eval_pipeline.formats.chat import render_messages
from eval_pipeline.formats.chat_records import first_user_text
from eval_pipeline.formats.records import JsonRecordsParser, RecordError, as_bool, as_str
from eval_pipeline.formats.xml_tags import analyze_xml_response
from eval_pipeline.models import ReparseRule, Trajectory

FORMAT_NAME = "dataeva_cleaned"


class DataEvaCleanedParser(JsonRecordsParser):
    name: ClassVar[str] = FORMAT_NAME
    # Tag repair re-cuts with the XML rule (also the text rendered from conversations, as
    # before this was carried on the trajectory).
    reparse: ClassVar[ReparseRule | None] = "xml_tags"

    def sniff(self, path: Path, head: str) -> float:
        return 0.95 if '"sft_data"' in head else 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        sft = value.get("sft_data")
        if sft is not None and not isinstance(sft, dict):
            raise RecordError("wrong_type", f"sft_data must be an object, got "
                                            f"{type(sft).__name__}")
        sft = sft or {}
        conversations = value.get("conversations")
        extra = {k: v for k, v in value.items() if k not in ("sft_data", "conversations")}
        output = sft.get("output")
        if isinstance(output, str):
            analysis = analyze_xml_response(output, ctx.registry)
            text, steps, notes = output, analysis.steps, analysis.notes
        elif isinstance(conversations, list):
            rendered = render_messages(conversations, ctx.registry)
            text, steps, notes = rendered.text, rendered.steps, rendered.notes
        else:
            raise RecordError("missing_field", "neither sft_data.output nor conversations")
        if notes:
            extra["tag_notes"] = notes
        question = sft.get("instruction")
        if not isinstance(question, str):
            question = first_user_text(conversations) if isinstance(conversations, list) else ""
        task_id = value.get("task_id")
        return self.trajectory(
            rec, ctx, index,
            task_id=as_str(task_id) if task_id is not None else f"line{rec.line}",
            task_description=question,
            raw_response=text,
            steps=steps,
            success=as_bool(value.get("success")),
            final_result=as_str(sft.get("final_result")),
            extra=extra,
        )
