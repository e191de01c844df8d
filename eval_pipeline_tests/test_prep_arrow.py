"""The batch kernels of preprocess and clips give what the per-response Python gives (#12.1).

``preprocess_batch`` and ``clips_table`` decide the common case of a batch in Arrow and
numpy (``preprocess_arrow``, ``clips_arrow``) and send the rest to ``screen`` and
``segment_rows``; with ``kernels=False`` everything goes the Python way. Both ways must give
the same tables (every column's values and dtype), the same removal report and the same
statistics: on every corpora file, on the sample drops, and on generated records with the
cases the kernels must hand over or get right (loops over the threshold, repeats, broken and
odd tags, non-ASCII text next to tags, empty responses). The kernels' own decisions are held
to ``repair_tags`` and ``_tag_counts`` on random tag soup, and their character-to-byte map
to Python's ``str.encode``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from eval_pipeline import ingest
from eval_pipeline.clips_arrow import _char_to_byte
from eval_pipeline.formats import discover_files
from eval_pipeline.preprocess import PreprocessConfig, _tag_counts, repair_tags
from eval_pipeline.preprocess_arrow import (
    ANSWER_CLOSED_AT_END,
    _repair_status,
    _scan,
    utf8_bytes,
)
from eval_pipeline.preprocess_arrow import (
    _tag_counts as batch_tag_counts,
)
from eval_pipeline.steps_column import STEPS_DTYPE, with_arrow_steps
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.tagscan_modes import scan_mode  # noqa: F401

pytestmark = pytest.mark.usefixtures("scan_mode")  # with the C kernel and without

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "incoming"
XML_CORPORA = ("agent_data_platform", "dataeva")


def _columns(table: pd.DataFrame) -> dict[str, Any]:
    """Every column's values (NaN as None, so equal tables compare equal) and dtype."""
    def plain(values: list[Any]) -> list[Any]:
        return [None if isinstance(v, float) and v != v else v for v in values]
    return {c: (str(table[c].dtype), plain(table[c].tolist())) for c in table.columns}


def _both_ways(raw: pd.DataFrame, config: PreprocessConfig | None = None) -> None:
    config = config or PreprocessConfig()
    registry = default_registry()
    kept, removed, stats = ingest.preprocess_batch(raw, config, registry)
    ref_kept, ref_removed, ref_stats = ingest.preprocess_batch(raw, config, registry,
                                                               kernels=False)
    assert _columns(kept) == _columns(ref_kept)
    assert _columns(removed) == _columns(ref_removed)
    assert stats == ref_stats
    if len(kept):
        assert kept["steps"].dtype == STEPS_DTYPE
    clips = ingest.clips_table(kept, kernels=True)
    assert _columns(clips) == _columns(ingest.clips_table(kept, kernels=False))


def _raw(path: Path) -> pd.DataFrame:
    raw, _quarantined = ingest.read_batch(path, None, path.stem)
    return raw


def test_every_corpora_file(corpora_dir: Path) -> None:
    files = discover_files(corpora_dir)
    xml = [f for f in files if f.relative_to(corpora_dir).parts[0] in XML_CORPORA]
    assert xml, f"no XML-tag corpora under {corpora_dir}"
    for path in files:
        raw = _raw(path)
        _both_ways(raw)
        _both_ways(with_arrow_steps(raw))  # the contract's input: Arrow steps


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.jsonl")), ids=lambda p: p.name)
def test_sample_drops(path: Path) -> None:
    _both_ways(_raw(path))
    _both_ways(_raw(path), PreprocessConfig(beta_threshold=2, frequency_filter="flag",
                                            duplicate_filter="flag"))
    _both_ways(_raw(path), PreprocessConfig(repair_tags=False))


def _call(tag: str, action: str, body: str) -> str:
    return f"<{tag}>\n  <{action}>{body}</{action}>\n</{tag}>\n"


_EDGE_RESPONSES = [
    # well formed, and the answer left open (the repair the kernels make themselves)
    "<think>plan</think>" + _call("browser_use", "browser_search_google", '{"q": "x"}')
    + "<result>found 浏览器 ok</result><answer>\\boxed{1}</answer>",
    "<think>plan</think>" + _call("microsandbox", "microsandbox_execute", "print(1)")
    + "<result>1</result><answer>\\boxed{1}",
    # a loop over the threshold, and stuck repeats (one wrapped in a non-tool tag)
    "".join("<think>again</think>" + _call("tavily", "tavily_search", '{"query": "same"}')
            + "<result>r</result>" for _ in range(20)) + "<answer>done</answer>",
    "<think>a</think>" + _call("tavily", "tavily_search", '{"query":  "same"}')
    + "<result>r</result>" + "<tool_code>" + _call("tavily", "tavily_search",
                                                   '{"query": "same"}') + "</tool_code>"
    + "<result>r</result><answer>x</answer>",
    # broken tags: unclosed think, stray closers, an opaque tag never closed
    "<think>never closed\n" + _call("deepsearch", "research", "q") + "<result>r</result>",
    "</think><think>x</think></result><answer>y</answer>",
    "<result>quoted <browser_use> and <tool_param> inside</result><answer>z</answer>",
    "<microsandbox><microsandbox_execute>x</microsandbox_execute>\n<think>t</think>",
    "<THINK>upper</Think ><answer >spaced</answer>",
    "<think/>self closing<answer/><think>t</think >",
    "<result>a</result foo><result>b</result>",
    # non-ASCII next to tags: Python may read it as part of a tag name or as whitespace
    "<ſearch_tool>x</search_tool><think>\u00e9t\u00e9</think>",
    "<think\u00a0>nbsp</think><answer>a</answer>",
    "<think>中文</think><浏览器>x</浏览器><answer>\U0001f600</answer>",
    "text < 5 and 6 > 3 <b>bold</b> <answer>a</answer>",
    # no tags, whitespace only, empty
    "just prose without any tag",
    "   \n  ",
    "",
]


def _edge_drop(tmp_path: Path) -> Path:
    path = tmp_path / "edges.jsonl"
    lines = [json.dumps({"task_id": f"edge{i}", "task_description": "t", "raw_response": r},
                        ensure_ascii=False) for i, r in enumerate(_EDGE_RESPONSES)]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def test_generated_edge_cases(tmp_path: Path) -> None:
    raw = _raw(_edge_drop(tmp_path))
    assert len(raw) == len(_EDGE_RESPONSES)
    _both_ways(raw)
    _both_ways(raw, PreprocessConfig(beta_threshold=3, frequency_filter="flag",
                                     duplicate_filter="flag"))
    # Each row alone too: a batch of one takes the kernels' edges (one row, no calls).
    for i in range(len(raw)):
        _both_ways(raw.iloc[[i]].reset_index(drop=True))


def test_generated_drop(tmp_path: Path) -> None:
    """Records shaped like the benches' drops (bench/drops.py): unclosed answers and
    thinks, repeats, loops, Chinese text in results."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from drops import write_drop

    path = tmp_path / "drop.jsonl"
    write_drop(path, 1.5, seed=3)
    _both_ways(_raw(path))


_TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "<result>", "</result>",
           "<tool_param>", "</tool_param>", "<browser_use>", "</browser_use>", "<think/>",
           "<result/>", "</result >", "</result x>", "<result a=1>", "<Answer>", "</ANSWER>",
           "<tavily-search>", "</tavily-search>", "<b>", "<br/>", "< think>", "<think",
           ">", "<", "x", " ", "\n", "中", "é", "\U0001f600", "\u00a0", "<ſearch_tool>",
           "<think\u2003>", "</think\x1c>", "<search_tool>", "</search_tool>"]


def test_tag_decisions_match_repair_on_random_soup() -> None:
    """Where the kernels say a response needs no repair (or only its answer closed at the
    end), ``repair_tags`` agrees, and their tag counts are ``_tag_counts``'s."""
    registry = default_registry()
    rng = random.Random(7)
    texts = ["".join(rng.choice(_TOKENS) for _ in range(rng.randint(0, 14)))
             for _ in range(3000)]
    # Well-formed sequences too, so the kernels' own cases are common.
    for _ in range(1000):
        parts = [rng.choice(["<think>t</think>", "<result>r <think> q</result>",
                             "<browser_use><a>1</a></browser_use>", "x", "<br/>",
                             "<answer>a</answer>", "中"]) for _ in range(rng.randint(0, 6))]
        if rng.random() < 0.4:
            parts.append("<answer>open")
        texts.append("".join(parts))
    responses = pa.array(texts, pa.large_string())
    data, offsets = utf8_bytes(responses)
    tags = _scan(data, offsets)
    python, closed = _repair_status(tags, data, len(texts), list(registry.tool_tags))
    counts = batch_tag_counts(tags, len(texts))
    fast = 0
    for i, text in enumerate(texts):
        if python[i]:
            continue
        fast += 1
        fixes = repair_tags(text, registry.tool_tags).fixes
        assert fixes == ([ANSWER_CLOSED_AT_END] if closed[i] else []), text
        if counts[i]:
            assert counts[i] == _tag_counts(text, []), text
    assert fast > 1000  # the kernels decide most of them


def test_char_to_byte_matches_python() -> None:
    rng = random.Random(5)
    alphabet = ["a", " ", "\n", "é", "中", "\U0001f600", "<", "ß"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
             for _ in range(300)]
    responses = pa.array(texts, pa.large_string())
    data, offsets = utf8_bytes(responses)
    rows, chars, expected = [], [], []
    for i, text in enumerate(texts):
        for c in range(len(text) + 1):
            rows.append(i)
            chars.append(c)
            expected.append(int(offsets[i]) + len(text[:c].encode()))
    got = _char_to_byte(data, offsets, np.array(rows), np.array(chars))
    assert got.tolist() == expected
    empty = pa.array(["", ""], pa.large_string())
    data, offsets = utf8_bytes(empty)
    assert _char_to_byte(data, offsets, np.array([0, 1]), np.array([0, 0])).tolist() == [0, 0]


def test_small_batches_are_clipped_in_python_and_large_ones_by_the_kernels(
        project_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default picks the way by the batch's size; both give the same clips."""
    raw = _raw(project_root / "data" / "incoming" / "sample_agent_runs.jsonl")
    kept, _removed, _stats = ingest.preprocess_batch(raw, PreprocessConfig(),
                                                     default_registry())
    calls: list[int] = []
    kernel = ingest.clip_batch
    monkeypatch.setattr(ingest, "clip_batch",
                        lambda response, steps: calls.append(len(response)) or
                        kernel(response, steps))
    small = kept.head(ingest.CLIP_KERNEL_MIN_ROWS - 1).reset_index(drop=True)
    assert len(small) < ingest.CLIP_KERNEL_MIN_ROWS
    small_clips = ingest.clips_table(small)
    assert calls == []
    large = pd.concat([kept] * (ingest.CLIP_KERNEL_MIN_ROWS // len(kept) + 1),
                      ignore_index=True)
    large_clips = ingest.clips_table(large)
    assert calls == [len(large)]
    assert _columns(small_clips) == _columns(ingest.clips_table(small, kernels=True))
    assert _columns(large_clips) == _columns(ingest.clips_table(large, kernels=False))
