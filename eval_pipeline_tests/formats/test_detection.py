"""Every corpus folder loads, each file is detected as its format, the per-file override
wins, and for line-based files records read == trajectories + quarantined."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from eval_pipeline.formats import (
    detect_format,
    discover_files,
    parse_file,
    unregistered_tool_counts,
)
from eval_pipeline_tests.formats.helpers import assert_result_ok, n_calls

EXPECTED_FORMAT = {
    "agent_data_platform/": "xml_tags",
    "dataeva/demo0": "xml_tags",
    "dataeva/example_0721": "xml_tags",
    "dataeva/aime": "dataeva_cleaned",
    "dataeva/nq_hotpot": "dataeva_cleaned",
    "dataeva/finetune": "chat",
    "agentprocessbench/": "chat",
    "tau_bench/few_shot": "chat",
    "tau_bench/historical": "tau_bench",
    "fireact/": "fireact",
    "reflexion_react/": "react_text",
    "toolbench/data_example/answer": "toolbench",
    "toolbench/data_example/instruction": "routing_cases",
    "swe_agent/": "swe_agent",
    "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data/BFCL": "bfcl",
    "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data/possible_answer": "bfcl_answers",
    "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data/multi_turn_func_doc":
        "not_trajectories",
    "devai_agent_as_a_judge/benchmark/judgment": "devai_judgment",
    "devai_agent_as_a_judge/benchmark/devai/trajectory-schema": "not_trajectories",
    "devai_agent_as_a_judge/benchmark/devai/constraints": "unrecognized",
}
# Per folder: (trajectories, quarantined, tool calls), as the per-format tests check them.
EXPECTED_TOTALS = {
    "agent_data_platform": (207, 0, 734),
    "agentprocessbench": (250, 0, 461),
    "bfcl": (1888, 162, 1797),
    "dataeva": (218, 0, 555),
    "devai_agent_as_a_judge": (330, 2, 0),
    "fireact": (465, 0, 906),
    "reflexion_react": (119, 0, 317),
    "swe_agent": (10, 0, 74),
    "tau_bench": (119, 0, 670),
    "toolbench": (18, 0, 24),
}


def _expected_format(rel: str) -> str:
    if rel.endswith("all_preds.jsonl"):
        return "swe_agent_preds"
    matches = [prefix for prefix in EXPECTED_FORMAT if rel.startswith(prefix)]
    assert matches, rel
    return EXPECTED_FORMAT[max(matches, key=len)]


def test_every_corpus_folder_loads(corpora_dir):
    totals: dict[str, list[int]] = {}
    for path in discover_files(corpora_dir):
        rel = path.relative_to(corpora_dir).as_posix()
        assert detect_format(path) == _expected_format(rel), rel
        result = parse_file(path, "b")
        assert_result_ok(result)
        if path.suffix in (".jsonl", ".json"):
            data = path.read_bytes()
            lines = [ln for ln in data.splitlines() if ln.strip()]
            if len(lines) > 1 and all(ln.lstrip().startswith(b"{") for ln in lines[:2]):
                # line-based file: every non-blank line is exactly one record
                assert len(result.trajectories) + len(result.quarantined) == len(lines), rel
        t = totals.setdefault(rel.split("/")[0], [0, 0, 0])
        t[0] += len(result.trajectories)
        t[1] += len(result.quarantined)
        t[2] += n_calls(result)
    assert {k: tuple(v) for k, v in totals.items()} == EXPECTED_TOTALS
    assert "SOURCES.md" not in {p.name for p in discover_files(corpora_dir)}


def test_override_by_argument_and_by_glob(tmp_path: Path):
    path = tmp_path / "calls.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                "raw_response": "<think>x</think>"}) + "\n")
    assert detect_format(path) == "xml_tags"  # a raw_response field outranks messages
    assert parse_file(path, "b", format_name="chat").trajectories[0].source_format == "chat"
    assert detect_format(path, {"*.jsonl": "chat"}) == "chat"
    result = parse_file(path, "b", overrides={"*/calls.*": "chat"})
    assert result.trajectories[0].source_format == "chat"


def test_unregistered_tools_are_counted(corpora_dir):
    results = [parse_file(corpora_dir / "dataeva" / "demo02.jsonl", "b")]
    assert unregistered_tool_counts(results) == Counter({"memory_write": 2})
