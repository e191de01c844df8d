"""Parsing straight to table rows gives the rows the Trajectory models dump to (#12.1).

``parse_file(..., as_rows=True)`` builds the XML-tag format's rows without a model per
record; for every input it must give exactly ``[t.to_row() for t in trajectories]`` of the
model path, in order, and the same quarantined records. Checked on the bad-input corpus
(every kind of damage), on records with every optional field shape, and on every corpora
file in every format.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from eval_pipeline.formats import discover_files, parse_file
from eval_pipeline_tests.formats.test_bad_input import bad_jsonl


def _same(path: Path, format_name: str | None = None) -> int:
    models = parse_file(path, "b", format_name=format_name)
    rows = parse_file(path, "b", format_name=format_name, as_rows=True)
    assert rows.trajectories == []
    assert _plain(rows.rows) == _plain([t.to_row() for t in models.trajectories])
    assert rows.quarantined == models.quarantined
    return len(rows.rows)


def _plain(value: Any) -> Any:
    """Values compared exactly: floats by repr (NaN equal to NaN), types kept."""
    if isinstance(value, float):
        return ("float", repr(value)) if not math.isnan(value) else ("float", "nan")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return (type(value).__name__, value)


def test_rows_equal_the_models_on_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    data = bad_jsonl()
    path.write_bytes(data)
    assert _same(path, "xml_tags") == 5
    # The ids hash each line's text (invalid bytes replaced), whichever way it is read.
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    for row in parse_file(path, "b", format_name="xml_tags", as_rows=True).rows:
        text = lines[row["source_line"] - 1].strip().decode("utf-8", "replace")
        digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
        assert row["trajectory_id"].endswith(f":{digest}")


def test_rows_equal_the_models_on_every_field_shape(tmp_path: Path) -> None:
    records: list[dict[str, Any]] = [
        {"task_id": 7, "task_description": ["a", 1], "raw_response": "<think>x</think>",
         "success": "True", "duration": "1.5", "timestamp": 3, "final_result": {"v": 1}},
        {"task_id": None, "raw_response": "plain text", "success": 0, "duration": 2},
        {"raw_response": "<answer>1", "extra_field": [1, {"b": None}], "x": 1.5e300},
        {"task_id": "dup", "raw_response": "<weather><get>{}</get></weather><result>r",
         "success": None},
        {"task_id": "dup", "full_response_with_evaluation":
            "<think>t</think>\n<clip_evaluation>{}</clip_evaluation>\n<answer>a</answer>"},
        {"task_id": "s", "raw_response": "<think>\U0001f600 \u3000</think>\u00a0",
         "duration": float("inf"), "success": "maybe"},
        {"task_id": "c", "raw_response": '<tool_call>{"name": "tavily-search", "arguments":'
                                         ' {"q": 1}, "id": 5}</tool_call><result>r</result>'},
    ]
    path = tmp_path / "shapes.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n",
                    "utf-8")
    assert _same(path) == len(records)
    # A lone surrogate, written escaped: kept as json reads it.
    lone = tmp_path / "lone.jsonl"
    lone.write_text('{"task_id": "l", "raw_response": "<think>\\ud800</think>"}\n', "utf-8")
    assert _same(lone) == 1


def test_rows_equal_the_models_on_the_corpora(corpora_dir: Path) -> None:
    assert sum(_same(path) for path in discover_files(corpora_dir)) > 1000
