"""One typed step contract from the parser to the judge.

Steps are a nested Arrow column (``list<struct>``), never JSON text that a later stage has to
decode again; what a later stage needs from the format travels on the trajectory, so a stage
after parsing never branches on ``source_format`` (which stays a descriptive column).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from eval_pipeline import ingest
from eval_pipeline.models import STEPS_ARROW_TYPE
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import routing_table
from eval_pipeline.steps_column import STEPS_DTYPE
from eval_pipeline.tool_registry import default_registry

_UNCLOSED_THINK = ("<think>plan the search\n<deepsearch><quick_research>{\"question\": \"q\"}"
                   "</quick_research></deepsearch>\n<result>found it</result>\n"
                   "<answer>\\boxed{4}")


def _drop(tmp_path: Path, name: str, records: list[dict]) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _round_trip(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """As the IO manager stores and loads an asset: through Arrow, the steps back as the
    Arrow steps column (pandas' own round trip cannot read back the dtype name it writes
    for a nested Arrow column)."""
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    return _load(path)


def _load(path: Path) -> pd.DataFrame:
    return pq.read_table(path).to_pandas(ignore_metadata=True,
                                         types_mapper={STEPS_ARROW_TYPE: STEPS_DTYPE}.get)


def test_steps_are_stored_as_a_list_of_structs_not_json_text(tmp_path):
    drop = _drop(tmp_path, "x.jsonl", [{"task_id": "a", "raw_response": _UNCLOSED_THINK,
                                        "success": True}])
    raw, _ = ingest.read_batch(drop, None, "b")
    assert raw["steps"].dtype == STEPS_DTYPE  # Arrow from the parser on (#12.1 contract)
    loaded = _round_trip(raw, tmp_path / "raw.parquet")
    steps_type = pq.read_schema(tmp_path / "raw.parquet").field("steps").type
    assert pa.types.is_list(steps_type) and pa.types.is_struct(steps_type.value_type)
    fields = {f.name: f.type for f in steps_type.value_type}
    assert pa.types.is_large_string(fields["content"]) and pa.types.is_integer(fields["start"])
    assert not isinstance(loaded["steps"].iloc[0], str | bytes)

    kept, _, _ = ingest.preprocess_batch(loaded, PreprocessConfig(), default_registry())
    kept = _round_trip(kept, tmp_path / "kept.parquet")
    assert pa.types.is_list(pq.read_schema(tmp_path / "kept.parquet").field("steps").type)
    clips = ingest.clips_table(kept)
    assert clips["tool_name"].iloc[0] == "quick_research" and len(clips) == 2
    assert clips["result"].iloc[0] == "found it"


def test_repair_and_re_cut_do_not_depend_on_the_format_name(tmp_path):
    drop = _drop(tmp_path, "x.jsonl", [{"task_id": "a", "raw_response": _UNCLOSED_THINK}])
    raw, _ = ingest.read_batch(drop, None, "b")
    raw = _round_trip(raw, tmp_path / "raw.parquet")
    blank = raw.assign(source_format="")
    config, registry = PreprocessConfig(), default_registry()
    named, _, named_stats = ingest.preprocess_batch(raw, config, registry)
    blanked, _, blank_stats = ingest.preprocess_batch(blank, config, registry)
    assert named_stats.format_issues_fixed == blank_stats.format_issues_fixed == 1
    assert blanked["raw_response"].iloc[0] == named["raw_response"].iloc[0]
    assert blanked["raw_response"].iloc[0].endswith("</answer>")
    assert [s["kind"] for s in blanked["steps"].iloc[0]] == [
        s["kind"] for s in named["steps"].iloc[0]]


def test_routing_rules_travel_on_the_trajectory_not_the_format_name(tmp_path):
    cases = _drop(tmp_path, "cases.jsonl", [
        {"name": "chat", "prompt": "just say hi", "expected_tools": []},
        {"name": "search", "prompt": "find x", "expected_tools": ["tavily_search"]},
    ])
    raw, _ = ingest.read_batch(cases, None, "b")
    raw = _round_trip(raw, tmp_path / "raw.parquet")
    named, _ = routing_table(raw, "superset")
    blanked, _ = routing_table(raw.assign(source_format=""), "superset")
    pd.testing.assert_frame_equal(named, blanked)
    # Routing cases say an empty expectation means "call no tool".
    assert named["reason"].iloc[0] == "Correctly called no tool"
