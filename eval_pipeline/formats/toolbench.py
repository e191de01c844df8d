"""ToolBench DFS answer trees: the chosen path is ``answer_generation.train_messages``.

``train_messages`` holds one message list per training sample, each a longer prefix of the
same path; the longest is the whole trajectory. It uses the legacy OpenAI
``function_call`` shape and closes with a ``Finish`` call whose ``final_answer`` is the
answer (``give_up_and_restart`` marks a give-up). ``win`` is the outcome label. The search
tree itself stays in ``extra``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.formats.base import ParseContext, RawRecord
from eval_pipeline.formats.chat import loads_lenient, render_messages
from eval_pipeline.formats.records import JsonRecordsParser, RecordError, as_bool, as_str, require
from eval_pipeline.models import Trajectory

FORMAT_NAME = "toolbench"


class ToolBenchParser(JsonRecordsParser):
    name: ClassVar[str] = FORMAT_NAME
    whole_file: ClassVar[bool] = True

    def sniff(self, path: Path, head: str) -> float:
        if '"answer_generation"' in head or (
            head.lstrip().startswith("{") and '"win"' in head and '"tree"' in head
        ):
            return 0.9
        return 0.0

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        gen = require(value, "answer_generation", dict)
        samples = loads_lenient(gen.get("train_messages", []))
        if not isinstance(samples, list):
            raise RecordError("wrong_type", "answer_generation.train_messages must be a list")
        if samples and all(isinstance(s, list) for s in samples):
            messages = max(samples, key=len)
        elif samples:
            messages = samples
        else:
            # An invalid run (valid_data false) keeps no messages: it is still a labelled
            # negative, so it is kept as the query alone.
            messages = [{"role": "user", "content": as_str(gen.get("query")) or ""}]
        rendered = render_messages(messages, ctx.registry)
        final = loads_lenient(gen.get("final_answer"))
        extra = {k: v for k, v in value.items() if k != "answer_generation"}
        extra["answer_generation"] = {k: v for k, v in gen.items() if k != "train_messages"}
        if isinstance(final, dict):
            extra["return_type"] = final.get("return_type")
        if rendered.notes:
            extra["parse_notes"] = rendered.notes
        functions = gen.get("function") if isinstance(gen.get("function"), list) else []
        extra["available_tools"] = [f.get("name") for f in functions if isinstance(f, dict)]
        return self.trajectory(
            rec, ctx, index,
            task_id=Path(ctx.source_file).stem,
            task_description=as_str(gen.get("query")) or "",
            raw_response=rendered.text,
            steps=rendered.steps,
            success=as_bool(value.get("win")),
            final_result=(as_str(final.get("final_answer")) if isinstance(final, dict)
                          else as_str(final)),
            extra=json.loads(json.dumps(extra, default=str)),
        )
