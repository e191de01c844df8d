"""The XML-tag format's Arrow reading gives exactly the Python reading's table (#12.1).

``ingest.read_batch`` builds an XML-tag batch's steps in Arrow (``formats/xml_arrow.py``)
where a response is simply well formed and in Python where not. Whatever the input, the
table must be the one the Python path gives: every column's ``.tolist()``, its dtype, the
quarantine (with line numbers) and the ids. Checked on every XML-tag corpora file, on
generated edge cases (unicode offsets, whitespace Python strips and a byte trim would not,
empty and tag-free responses, unclosed, nested and odd tags, a bad JSON line in the middle,
a lone surrogate, a huge record) and on random responses built from tag fragments; and the
Arrow reading must really be the one taken for the common records, not the fallback.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import eval_pipeline.formats as formats
from eval_pipeline import ingest
from eval_pipeline.formats import detect_format, discover_files, xml_arrow
from eval_pipeline.formats.base import ParseContext
from eval_pipeline.formats.xml_arrow import arrow_steps
from eval_pipeline.formats.xml_tags import XmlTagParser, analyze_xml_rows
from eval_pipeline.models import ParseResult
from eval_pipeline.splitting import find_batch, split_drop
from eval_pipeline.steps_column import STEPS_DTYPE
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests.tagscan_modes import scan_mode  # noqa: F401

pytestmark = pytest.mark.usefixtures("scan_mode")  # with the C kernel and without

REGISTRY = default_registry()


def _python_rows(parser: XmlTagParser, path: Path, ctx: ParseContext) -> ParseResult:
    return parser.parse_rows(path, ctx)


def _tables(path: Path, monkeypatch: pytest.MonkeyPatch
            ) -> tuple[tuple[pd.DataFrame, pd.DataFrame], tuple[pd.DataFrame, pd.DataFrame]]:
    """``read_batch`` of ``path`` through the Arrow reading, then through Python only."""
    fast = ingest.read_batch(path, None, "b", ingest.ReadOptions(input_format="xml_tags"))
    with monkeypatch.context() as patch:
        patch.setattr(formats, "parse_arrow_rows", _python_rows)
        slow = ingest.read_batch(path, None, "b", ingest.ReadOptions(input_format="xml_tags"))
    return fast, slow


def assert_same_tables(path: Path, monkeypatch: pytest.MonkeyPatch) -> pd.DataFrame:
    (raw, quarantined), (raw_py, quarantined_py) = _tables(path, monkeypatch)
    for got, want in ((raw, raw_py), (quarantined, quarantined_py)):
        assert list(got.columns) == list(want.columns)
        assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes]
        for column in got.columns:
            assert _exact(got[column].tolist()) == _exact(want[column].tolist()), column
    assert raw["steps"].dtype == STEPS_DTYPE
    return raw


def _exact(value: Any) -> Any:
    """Values with their types, floats by repr (NaN equal to NaN)."""
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    return (type(value).__name__, value)


def _write(path: Path, records: list[Any]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def _fast(texts: list[str]) -> list[bool]:
    return arrow_steps(texts, REGISTRY).ok.tolist()


WELL_FORMED = (
    "<think>\nplan\n</think>\n<microsandbox>\n  <microsandbox_execute>print(1)"
    "</microsandbox_execute>\n</microsandbox>\n<execute_tools />\n<result>1</result>\n"
    "<answer>\\boxed{1}</answer>"
)


def test_corpora_files_read_the_same(corpora_dir: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    files = [p for p in discover_files(corpora_dir) if detect_format(p) == "xml_tags"]
    if not files:
        pytest.skip(f"no XML-tag file among the corpora at {corpora_dir}")
    rows = 0
    for path in files:
        rows += len(assert_same_tables(path, monkeypatch))
    assert rows > 300


def test_common_records_take_the_arrow_reading() -> None:
    unicode = WELL_FORMED.replace("plan", "计划 🙂 naïve").replace("1</result>",
                                                                 "结果。</result>")
    assert _fast([WELL_FORMED, unicode, "", "   ", "no tags at all", "<answer>open",
                  "<think>a</think><tool_param><tool_id>x</tool_id></tool_param>"
                  "<result>schema</result>",
                  # what the tag scan reads as text between elements
                  "x</think> <think>a</think></b>", "<think>a</think><execute_tools> b",
                  "<think>never closed", "<think>a\n<result>r</result>\n<answer>b",
                  "<answer>a</answer><answer>b <think>c</think>",
                  # a pair of another name that no trigger follows: text, not a call
                  "<execute_tools><microsandbox><x>1</x></microsandbox></execute_tools>",
                  "<think>a</think><foo>x</foo>\n<think>b</think><foo>y</foo>",
                  ]) == [True] * 14
    # What only Python reads exactly goes there.
    assert _fast(["<think>a <think>b", "<think>a<think>b</think>c</think>",
                  "<answer>a <b>b</b> <think>c</think>",
                  "<THINK>a</THINK>", "<answer>a <b>bold</b></answer>",
                  '<tool_call>{"name": "x"}</tool_call>', "<think>\u3000a</think>",
                  # a pair of another name followed by a trigger: an unregistered call
                  "<think>a</think><foo>x</foo>\n<result>r</result>",
                  "<foo>x</foo> <execute_tools/>", "<foo>x<foo>y</foo></foo><result>r",
                  "<foo>x</FOO> \n<RESULT>r</RESULT>",
                  ]) == [False] * 11


EDGE_RESPONSES = [
    WELL_FORMED,
    WELL_FORMED.replace("plan", "计划 🙂 naïve e\u0301").replace("1</result>", "结果。</result>"),
    "", " \n\t ", "plain text only", "\x1c\x1dtrimmed\x1e\x1f", "\u3000ideographic space\u3000",
    "<think>\xa0nbsp\xa0</think>", "<think>\u2003em\u2009</think><answer>\x85x\x85</answer>",
    "<think>a</think>\u3000<answer>b",
    "<answer>unclosed \\boxed{2}", "<answer>x</answer> trailing text", "<answer></answer>",
    "<think></think><result> </result>", "<think>never closed<result>r</result>",
    "<think>a<think>nested</think>b</think>", "stray </think> close", "<Think>x</Think>",
    '<think id="1">x</think>', "<think>a <thinking>b</thinking> c</think>",
    "<think>a <THINK> b</think>", "<think>a </think >b</think>", "<think>x<中>y</think>",
    "<think>thin\u212a</think><thin\u212a>k</thin\u212a>",
    "<answer>a <b>b</b></answer>", "<answer>a < b and c > d</answer>",
    "<result>has <tool_param><tool_id>t</tool_id></tool_param> inside</result>",
    "<tool_param><tool_id>t</tool_id><action>a</action></tool_param>\n<result>{}</result>"
    "\n<result>real</result>",
    '<tool_call>{"name": "search", "arguments": {"q": "x"}, "id": "c1"}</tool_call>',
    "<mytool>\n<do>x</do>\n</mytool>\n<execute_tools />\n<result>r</result>",
    "<deepsearch>no inner action</deepsearch>",
    "<browser_use>\n  <browser_navigate a=\"b\">url</browser_navigate>  \n</browser_use>",
    "<microsandbox><x>1</x><x>2</x></microsandbox>",
    "text <execute_tools/> more </execute_tools /> end",
    "<result>a</result><result>b</result><think>c</think>",
    "<think>x</think>\r\n<answer>\r\ny\r\n</answer>\r\n",
    "emoji 🙂🙂 <think>🙂</think>🙂<answer>🙂",
]


def test_edge_cases_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records: list[Any] = [{"task_id": f"t{i}", "raw_response": text, "success": i % 2 == 0}
                          for i, text in enumerate(EDGE_RESPONSES)]
    records[3:3] = [
        '{"task_id": "bad", "raw_response": "<think>x</think>"',  # bad JSON mid-file
        {"task_id": 7, "raw_response": WELL_FORMED, "extra_field": [1, {"b": None}]},
        {"task_id": "t1", "raw_response": "<answer>duplicate task id"},
        {"task_id": "nr", "raw_response": 5},
        {"task_id": "ev", "full_response_with_evaluation":
         WELL_FORMED + "\n<clip_evaluation>x</clip_evaluation>\n"},
        "[1, 2]",
        "",
    ]
    raw = assert_same_tables(_write(tmp_path / "edges.jsonl", records), monkeypatch)
    assert len(raw) == len(EDGE_RESPONSES) + 3


def test_a_lone_surrogate_quarantines_only_its_record(tmp_path: Path) -> None:
    """``json.loads`` accepts an escaped lone surrogate; UTF-8, so Arrow and pandas' ``str``
    column, does not (``read_batch`` raised on the whole batch before). Its record is
    quarantined with its line; the others are read."""
    path = _write(tmp_path / "s.jsonl", [
        {"raw_response": WELL_FORMED},
        '{"raw_response": "<think>\\udc80</think>"}',
        {"raw_response": "<think>unclosed"}])
    raw, quarantined = ingest.read_batch(path, None, "b")
    assert raw["source_line"].tolist() == [1, 3]
    assert quarantined[["source_line", "reason"]].values.tolist() == [[2, "invalid_encoding"]]
    assert raw["steps"].tolist() == [analyze_xml_rows(WELL_FORMED, REGISTRY)[0],
                                     analyze_xml_rows("<think>unclosed", REGISTRY)[0]]
    found = arrow_steps([WELL_FORMED, "<think>\udc80</think>", WELL_FORMED], REGISTRY)
    assert found.ok.tolist() == [True, False, True]


def test_a_huge_record_and_chunks_read_the_same(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    huge = "".join(f"<think>步骤 {i}</think>\n<result>{'x' * 3000} é</result>\n"
                   for i in range(400)) + "<answer>done"
    records = [{"raw_response": huge}, *({"raw_response": WELL_FORMED} for _ in range(5))]
    path = _write(tmp_path / "huge.jsonl", records)
    assert_same_tables(path, monkeypatch)
    monkeypatch.setattr(xml_arrow, "_CHUNK_BYTES", 1000)  # a chunk per record or two
    assert_same_tables(path, monkeypatch)


_FRAGMENTS = [
    "<think>", "</think>", "<result>", "</result>", "<answer>", "</answer>",
    "<tool_param>", "</tool_param>", "<microsandbox>", "</microsandbox>",
    "<microsandbox_execute>", "</microsandbox_execute>", "<browser_use>", "</browser_use>",
    "<execute_tools />", "<THINK>", "<think x>", "</think >", "<b>", "</b>", "<", ">", "/",
    " ", "\n", "\t", "\u3000", "\xa0", "\x1c", "text", "中文", "🙂", "é", "e\u0301",
    "<tool_call>", "</tool_call>", '{"name": "x"}', "tavily", "<tavily-search>",
    "</tavily-search>", "<mytool>", "</mytool>", "<execute_tools>", "</execute_tools>",
    "<foo>", "</FOO>", '<foo a="1">', "<foo/>", "</foo >", "<result.x>",
]
_SHAPES = [
    ["<think>", "</think>"], ["<result>", "</result>"], ["<answer>", "</answer>"],
    ["<microsandbox>\n<microsandbox_execute>", "</microsandbox_execute>\n</microsandbox>"],
    ["<tool_param>", "</tool_param>"], ["<browser_use><x>", "</x></browser_use>"],
]


def _random_response(rng: random.Random) -> str:
    """Mostly elements with text between (so many are read in Arrow), salted with
    fragments that break them in every way."""
    parts: list[str] = []
    for _ in range(rng.randint(0, 8)):
        if rng.random() < 0.7:
            opener, closer = rng.choice(_SHAPES)
            body = "".join(rng.choice(_FRAGMENTS[23:34]) for _ in range(rng.randint(0, 4)))
            if rng.random() < 0.1:
                closer = ""
            parts += [rng.choice(["", " ", "\n", "<execute_tools />\n"]), opener, body, closer]
        else:
            parts.append(rng.choice(_FRAGMENTS))
    return "".join(parts)


def test_random_responses_read_the_same(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(12)
    texts = [_random_response(rng) for _ in range(1500)]
    path = _write(tmp_path / "random.jsonl", [{"raw_response": t} for t in texts])
    assert_same_tables(path, monkeypatch)
    ok = np.array(_fast(texts))
    assert 0.2 < ok.mean() < 0.9  # both readings are exercised


def _plain_records(rng: random.Random) -> list[dict[str, Any]]:
    """Records of only the fields the format knows, each of its usual JSON type: what
    Arrow's JSON reader decodes (``json_table``)."""
    records: list[dict[str, Any]] = []
    for i in range(400):
        record: dict[str, Any] = {"task_id": rng.choice([f"t{i}", "", "dup"]),
                                  "raw_response": rng.choice(EDGE_RESPONSES)}
        if rng.random() < 0.8:
            record["success"] = rng.choice([True, False, None])
        if rng.random() < 0.8:
            record["duration"] = rng.choice([
                rng.randint(-10**30, 10**30), rng.uniform(-1e6, 1e6), 0, 0.0,
                float(np.frombuffer(rng.randbytes(8), dtype=np.float64)[0]), 1e-320])
        for name in ("timestamp", "task_description", "final_result"):
            if rng.random() < 0.7:
                record[name] = rng.choice([None, "", "é 🙂", f"v{i}"])
        records.append(record)
    return records


def test_plain_batches_are_decoded_by_arrow(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    records = [r for r in _plain_records(rng)
               if not (isinstance(r.get("duration"), float) and r["duration"] != r["duration"])]
    lines = [json.dumps(r, ensure_ascii=rng.random() < 0.5) for r in records]
    lines = [line for line in lines if '"duration": -0' not in line.replace("-0.", "")]
    path = tmp_path / "plain.jsonl"
    path.write_bytes(("\r\n".join(lines[:200]) + "\n\n  \n" + "\n".join(lines[200:]) + "\n")
                     .encode("utf-8"))
    assert xml_arrow.json_table(path.read_bytes()) is not None
    raw = assert_same_tables(path, monkeypatch)
    assert len(raw) == len(lines)
    assert "success_missing" in " ".join(raw["extra"])


def test_padded_lines_and_columns_without_values_read_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines with whitespace ``bytes.strip()`` strips at either edge (the ids hash the
    stripped line), and fields no record of the batch has (pandas makes an object column
    of None, not a string or float one), decoded by Arrow as by ``json.loads``."""
    rng = random.Random(5)
    records = [{"raw_response": rng.choice(EDGE_RESPONSES),
                "task_id": rng.choice([None, f"t{i}", "dup"])} for i in range(120)]
    pads = ["", " ", "\t", " \t  \r"]
    lines = [rng.choice(pads) + json.dumps(r) + rng.choice(pads) for r in records]
    path = tmp_path / "padded.jsonl"
    path.write_bytes(("\n".join(lines) + "\n \n").encode("utf-8"))
    assert xml_arrow.json_table(path.read_bytes()) is not None
    raw = assert_same_tables(path, monkeypatch)
    # Whitespace JSON does not allow (Arrow's reader fails): read by json.loads.
    lines[3] = "\x0b\x0c " + lines[3] + "\x0c"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    assert xml_arrow.json_table(path.read_bytes()) is None
    assert_same_tables(path, monkeypatch)
    assert len(raw) == len(records)
    assert [str(raw[c].dtype) for c in ("final_result", "timestamp", "duration")] == [
        "object"] * 3
    assert any(t.startswith("line") for t in raw["task_id"])
    assert "duplicate_of" in " ".join(raw["extra"])


def test_split_batches_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                     ) -> None:
    """A drop cut into batches: each batch's lines and ids point at the drop's lines
    (the split batch's manifest), on the Arrow reading's columns as on the rows."""
    rng = random.Random(9)
    records = [r for r in _plain_records(rng)
               if not (isinstance(r.get("duration"), float) and r["duration"] != r["duration"])]
    lines = [json.dumps(r) for r in records]
    lines = [line for line in lines if '"duration": -0' not in line.replace("-0.", "")]
    drop = tmp_path / "drop.jsonl"
    drop.write_text("".join(line + ("\n\n" if i % 7 == 0 else "\n")
                            for i, line in enumerate(lines)), "utf-8")
    numbers = [i + 1 for i, text in enumerate(drop.read_text("utf-8").split("\n")) if text]
    manifests = split_drop(drop, tmp_path / "batches", 50)
    assert len(manifests) > 2
    tables = []
    for manifest in manifests:
        path, found = find_batch(tmp_path / "batches", manifest.partition_key)
        assert xml_arrow.json_table(path.read_bytes()) is not None
        fast, fast_quarantined = ingest.read_batch(path, found, manifest.partition_key)
        with monkeypatch.context() as patch:
            patch.setattr(formats, "parse_arrow_rows", _python_rows)
            slow, slow_quarantined = ingest.read_batch(path, found, manifest.partition_key)
        assert fast_quarantined.empty and slow_quarantined.empty
        assert [str(t) for t in fast.dtypes] == [str(t) for t in slow.dtypes]
        for column in fast.columns:
            assert _exact(fast[column].tolist()) == _exact(slow[column].tolist()), column
        tables.append(fast)
    raw = pd.concat(tables, ignore_index=True)
    assert raw["source_line"].tolist() == numbers
    assert [int(t.split(":")[1]) for t in raw["trajectory_id"]] == numbers


@pytest.mark.parametrize("line", [
    '\ufeff{"raw_response": "<think>a</think>"}',
    '{"raw_response": "a", "other": 1}',
    '{"raw_response": "a", "task_id": 5}',
    '{"raw_response": null}',
    '{"raw_response": "a", "duration": -0}',
    '{"raw_response": "a"} {"raw_response": "b"}',
    '{"raw_response": "a", "raw_response": "b"}',
    '{"raw_response": "a", "duration": 1e400}',
    '{"raw_response": "<think>a</think>"',
    '{"raw_response": "\\udc80"}',
    '[{"raw_response": "a"}]',
])
def test_other_batches_are_decoded_by_json_loads(line: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever Arrow's reader would read differently (or not at all) sends the batch to
    ``json.loads`` per line, so quarantine, ``extra`` and every value stay the same."""
    records = [json.dumps({"raw_response": WELL_FORMED}), line,
               json.dumps({"raw_response": WELL_FORMED, "success": True})]
    path = tmp_path / "other.jsonl"
    path.write_text("\n".join(records) + "\n", "utf-8")
    assert xml_arrow.json_table(path.read_bytes()) is None
    if "udc80" not in line:
        assert_same_tables(path, monkeypatch)
    path.write_bytes(b'{"raw_response": "\xff"}\n')
    assert xml_arrow.json_table(path.read_bytes()) is None  # not UTF-8
