"""Bad input at the edges (#10.6), on the whole path a drop takes.

Each case is built in tmp_path and goes through the plain functions the CLI and the assets
use: ``split_drop`` (format detection, then cut between lines or copied whole), then for
each batch ``find_batch`` + ``ingest.read_batch`` (the ``raw_trajectories`` asset) and
``ingest.preprocess_batch`` (``preprocessed_trajectories``). Every batch is checked as the
``every_record_accounted`` asset check checks it (a line-split batch's records are its
manifest lines; a whole-file batch's are what its parse reports), and every drop against
the records it was built with: read = kept + removed + quarantined, each with its reason.

Speed and memory are measured by hand, not asserted here (no timed tests).
"""

from __future__ import annotations

import codecs
import gzip
import json
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline import ingest
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.splitting import BatchManifest, find_batch, split_drop, unique_bases
from eval_pipeline.tool_registry import default_registry

CLEAN = "<think>plan</think><answer>done</answer>"


def record(task_id: str, raw: str = CLEAN, **more: object) -> str:
    return json.dumps({"task_id": task_id, "task_description": f"task {task_id}",
                       "raw_response": raw, **more}, ensure_ascii=False)


def jsonl(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def deep_line(depth: int = 10_000) -> str:
    return '{"task_id": "deep", "raw_response": ' + "[" * depth + "]" * depth + "}"


def png_bytes() -> bytes:
    """A real (tiny) PNG: signature, IHDR, a zlib-compressed IDAT, IEND."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    pixels = b"".join(b"\x00" + random.Random(1).randbytes(3 * 64) for _ in range(64))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", (64).to_bytes(4, "big") * 2 + b"\x08\x02\x00\x00\x00")
            + chunk(b"IDAT", zlib.compress(pixels)) + chunk(b"IEND", b""))


@dataclass
class DropOutcome:
    """What became of one drop's records, over all its batches."""

    manifests: list[BatchManifest]
    read: int = 0
    raw: pd.DataFrame = field(default_factory=pd.DataFrame)
    quarantined: pd.DataFrame = field(default_factory=pd.DataFrame)
    kept: pd.DataFrame = field(default_factory=pd.DataFrame)
    removed: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def reasons(self) -> list[tuple[int, str]]:
        """(line in the user's file, reason) of every quarantined record, in line order."""
        return sorted(zip(self.quarantined["source_line"].astype(int),
                          self.quarantined["reason"], strict=True))

    @property
    def kept_lines(self) -> list[int]:
        return sorted(self.kept["source_line"].astype(int))


def run_drop(drop: Path, tmp_path: Path, split_size: int = 10,
             config: PreprocessConfig | None = None) -> DropOutcome:
    """Split, parse and preprocess one drop as the CLI's batch run does, checking every
    batch's accounting on the way."""
    batches = tmp_path / "batches"
    manifests = split_drop(drop, batches, split_size, base=unique_bases([drop])[drop])
    outcome = DropOutcome(manifests)
    raws, quarantines, kepts, removeds = [], [], [], []
    for manifest in manifests:
        path, found = find_batch(batches, manifest.partition_key)
        raw, quarantined = ingest.read_batch(path, found, manifest.partition_key)
        kept, removed, _stats = ingest.preprocess_batch(
            raw, config or PreprocessConfig(), default_registry())
        read = len(found.lines) if found.lines is not None else len(raw) + len(quarantined)
        assert len(raw) + len(quarantined) == read, (manifest.partition_key, found.lines)
        assert len(kept) + len(removed) == len(raw), manifest.partition_key
        assert (quarantined["error"].str.len() > 0).all()
        assert set(raw["source_file"]) | set(quarantined["source_file"]) <= {drop.name}
        outcome.read += read
        raws.append(raw)
        quarantines.append(quarantined)
        kepts.append(kept)
        removeds.append(removed)
    outcome.raw = pd.concat(raws, ignore_index=True)
    outcome.quarantined = pd.concat(quarantines, ignore_index=True)
    outcome.kept = pd.concat(kepts, ignore_index=True)
    outcome.removed = pd.concat(removeds, ignore_index=True)
    assert outcome.read == len(outcome.kept) + len(outcome.removed) + len(outcome.quarantined)
    return outcome


# -- text encodings ------------------------------------------------------------------------

#: Records whose text does not survive a wrong decoding: accents, CJK, an emoji (a UTF-16
#: surrogate pair) and, in the last, a 200 kB response, so units straddle the 64 kB chunks.
ENCODED_RECORDS = [
    record("t1", "<think>café ✓</think><answer>1</answer>"),
    record("t2", "<think>日本語の計画</think><answer>2</answer>"),
    record("t3", "<think>😀 emoji</think><answer>3</answer>"),
    record("t4"),
    record("t5", "<think>" + "é😀x" * 50_000 + "</think><answer>5</answer>"),
]


@pytest.mark.parametrize("bom, codec", [
    ("\ufeff", "utf-16-le"), ("\ufeff", "utf-16-be"), ("", "utf-16-le"),
    ("\ufeff", "utf-8"),
], ids=["utf16le_bom", "utf16be_bom", "utf16le_no_bom", "utf8_bom"])
def test_utf16_and_bom_files_are_decoded_split_and_read(tmp_path: Path, bom: str, codec: str):
    drop = tmp_path / f"{codec}.jsonl"
    drop.write_bytes((bom + jsonl(*ENCODED_RECORDS).replace("\n", "\r\n")).encode(codec))
    out = run_drop(drop, tmp_path, split_size=2)
    assert [m.lines for m in out.manifests] == [[1, 2], [3, 4], [5]]
    assert out.read == 5 and out.reasons == [] and len(out.removed) == 0
    assert out.kept_lines == [1, 2, 3, 4, 5]
    expected = {json.loads(r)["task_id"]: json.loads(r)["raw_response"] for r in ENCODED_RECORDS}
    assert dict(zip(out.raw["task_id"], out.raw["raw_response"], strict=True)) == expected
    assert set(out.raw["source_format"]) == {"xml_tags"}


def test_utf16_that_does_not_decode_is_replaced_and_recorded(tmp_path: Path):
    drop = tmp_path / "broken16.jsonl"
    good = (record("ok") + "\n").encode("utf-16-le")
    lone = b"".join([
        '{"task_id": "lone", "raw_response": "<answer>a'.encode("utf-16-le"),
        b"\x00\xd8",  # a high surrogate with no low one after it
        'b</answer>"}\n'.encode("utf-16-le"),
    ])
    drop.write_bytes(codecs.BOM_UTF16_LE + good + lone)
    out = run_drop(drop, tmp_path)
    assert out.read == 2 and out.reasons == [] and out.kept_lines == [1, 2]
    lone_row = out.raw.set_index("task_id").loc["lone"]
    assert lone_row["raw_response"] == "<answer>a\ufffdb</answer>"
    repairs = json.loads(lone_row["extra"])["repairs"]
    assert repairs and repairs[0].startswith("invalid_utf8_replaced")


def test_a_whole_file_json_in_utf16_is_read(tmp_path: Path):
    drop = tmp_path / "array16.json"
    items = [json.loads(r) for r in ENCODED_RECORDS[:3]]
    drop.write_bytes(("\ufeff" + json.dumps(items, indent=2, ensure_ascii=False)
                      ).encode("utf-16-be"))
    out = run_drop(drop, tmp_path)
    assert [m.lines for m in out.manifests] == [None]
    assert out.read == 3 and out.kept_lines == [1, 2, 3]
    assert list(out.raw["raw_response"]) == [i["raw_response"] for i in items]


# -- gzip ----------------------------------------------------------------------------------

def mixed_jsonl(n: int = 25) -> str:
    """``n`` records, two of them bad (line 4 invalid JSON, line 9 not an object)."""
    lines = [record(f"t{i}") for i in range(1, n + 1)]
    lines[3] = '{"task_id": "t4", "raw_response": oops}'
    lines[8] = "[1, 2, 3]"
    return jsonl(*lines)


def test_a_gzip_drop_reads_like_the_plain_file(tmp_path: Path):
    text = mixed_jsonl()
    plain = tmp_path / "plain" / "runs.jsonl"
    packed = tmp_path / "packed" / "runs.jsonl.gz"
    plain.parent.mkdir()
    packed.parent.mkdir()
    plain.write_text(text, "utf-8")
    packed.write_bytes(gzip.compress(text.encode()))
    a = run_drop(plain, tmp_path / "a")
    b = run_drop(packed, tmp_path / "b")
    # Split while it is gunzipped: the same batches, as plain UTF-8 JSONL, named as the
    # original tool names a drop (runs01, not runs_jsonl01).
    assert [(m.partition_key, m.batch_file, m.lines) for m in b.manifests] == [
        (m.partition_key, m.batch_file, m.lines) for m in a.manifests]
    assert [m.partition_key for m in b.manifests] == ["runs01", "runs02", "runs03"]
    assert b.read == a.read == 25
    assert b.reasons == a.reasons == [(4, "invalid_json"), (9, "not_an_object")]
    assert b.kept_lines == a.kept_lines and len(b.kept) == 23
    assert set(b.raw["source_file"]) == {"runs.jsonl.gz"}
    assert list(b.raw["raw_response"]) == list(a.raw["raw_response"])
    # Ids stay stable across re-splits: file stem, drop line, content hash.
    assert b.raw["trajectory_id"].str.startswith("runs.jsonl:").all()


def test_a_gzip_json_array_and_a_gzip_of_utf16(tmp_path: Path):
    array = tmp_path / "array.json.gz"
    array.write_bytes(gzip.compress(json.dumps(
        [json.loads(record(f"a{i}")) for i in range(3)]).encode()))
    out = run_drop(array, tmp_path / "a")
    assert [(m.partition_key, m.lines) for m in out.manifests] == [("array01", None)]
    assert out.read == 3 and out.kept_lines == [1, 2, 3]
    both = tmp_path / "both.jsonl.gz"
    both.write_bytes(gzip.compress(("\ufeff" + jsonl(*ENCODED_RECORDS)).encode("utf-16-le")))
    out = run_drop(both, tmp_path / "b", split_size=3)
    assert [m.lines for m in out.manifests] == [[1, 2, 3], [4, 5]]
    assert out.read == 5 and out.kept_lines == [1, 2, 3, 4, 5]


def _corrupt(kind: str) -> bytes:
    # 2,000 records (~170 kB): detection reads a good head, so a cut-off stream is only found
    # while splitting, after batches were written.
    data = gzip.compress(jsonl(*(record(f"t{i}") for i in range(2000))).encode())
    if kind == "cut_off":
        return data[: len(data) * 4 // 5]
    if kind == "garbage_inside":
        return data[:40] + b"\xde\xad\xbe\xef" * 50 + data[240:]
    return data[:-8] + bytes(8)  # kind == "bad_crc": every byte decompresses, the check fails


@pytest.mark.parametrize("kind", ["cut_off", "garbage_inside", "bad_crc"])
def test_a_corrupt_gzip_drop_is_one_quarantined_record(tmp_path: Path, kind: str):
    drop = tmp_path / "broken.jsonl.gz"
    drop.write_bytes(_corrupt(kind))
    out = run_drop(drop, tmp_path)
    # None of it is trusted: no half of a cut-off download is evaluated as if whole.
    assert [(m.partition_key, m.lines) for m in out.manifests] == [("broken01", None)]
    assert out.read == 1 and out.reasons == [(1, "corrupt_gzip")] and len(out.raw) == 0
    (error,) = out.quarantined["error"]
    assert "corrupt or cut off" in error and "broken.jsonl.gz" in error
    # The line batches written before the damage showed are gone with it.
    assert sorted(p.name for p in (tmp_path / "batches" / "broken").iterdir()) == [
        "broken01.jsonl.gz", "broken01.jsonl.gz.manifest.json"]


# -- JSON documents and nesting ------------------------------------------------------------

@pytest.mark.parametrize("name, indent", [
    ("array.json", None), ("pretty.json", 2), ("pretty_named.jsonl", 2)])
def test_a_json_array_file_is_one_record_per_element(tmp_path: Path, name: str, indent):
    items: list[object] = [json.loads(record(f"a{i}")) for i in range(1, 6)]
    items[2] = 42
    drop = tmp_path / name
    drop.write_text(json.dumps(items, indent=indent), "utf-8")
    out = run_drop(drop, tmp_path, split_size=2)
    # A document is never cut between its lines, even when it is named .jsonl.
    assert [m.lines for m in out.manifests] == [None]
    assert out.read == 5
    assert out.reasons == [(3, "not_an_object")]  # the index (1-based) is the line
    assert out.kept_lines == [1, 2, 4, 5]
    assert list(out.kept["task_id"]) == ["a1", "a2", "a4", "a5"]


def test_json_nested_10000_deep_is_quarantined_wherever_it_sits(tmp_path: Path):
    drop = tmp_path / "deep.jsonl"
    # Line 1 (first of the drop and of batch 1), 3 (first of batch 2), 6 (last line).
    lines = [deep_line(), record("t2"), deep_line(), record("t4"), record("t5"), deep_line()]
    drop.write_text(jsonl(*lines), "utf-8")
    out = run_drop(drop, tmp_path, split_size=2)
    assert [m.lines for m in out.manifests] == [[1, 2], [3, 4], [5, 6]]
    assert out.read == 6
    assert out.reasons == [(1, "too_deep"), (3, "too_deep"), (6, "too_deep")]
    assert out.kept_lines == [2, 4, 5]
    whole = tmp_path / "deep.json"
    whole.write_text("[" * 10_000 + "]" * 10_000, "utf-8")
    assert run_drop(whole, tmp_path / "w").reasons == [(1, "too_deep")]


def test_a_bad_first_line_does_not_take_the_records_after_it(tmp_path: Path):
    for first, reason in [('{"task_id": "cut", "raw_respo', "invalid_json"),
                          ('{"task_id": "x", "raw_response": nope}', "invalid_json")]:
        drop = tmp_path / f"{reason}.jsonl"
        drop.write_text(jsonl(first, *(record(f"t{i}") for i in range(2, 6))), "utf-8")
        out = run_drop(drop, tmp_path / reason, split_size=2)
        assert [m.lines for m in out.manifests] == [[1, 2], [3, 4], [5]]
        assert out.reasons == [(1, reason)] and out.kept_lines == [2, 3, 4, 5]


# -- binary --------------------------------------------------------------------------------

def test_nul_bytes_inside_lines_quarantine_those_lines(tmp_path: Path):
    drop = tmp_path / "nul.jsonl"
    drop.write_bytes(b"".join([
        b'{"task_id": "n1", "raw_response": "a\x00b"}\n',         # first line of batch 1
        (record("t2") + "\n").encode(),
        b'{"task_id": "n3",\x00\x00\x00 "raw_response": "x"}\n',  # first line of batch 2
        (record("t4") + "\n").encode(),
        b"\x00" * 300 + b"\n",
        (record("t6") + "\n").encode(),
    ]))
    out = run_drop(drop, tmp_path, split_size=2)
    assert [m.lines for m in out.manifests] == [[1, 2], [3, 4], [5, 6]]
    assert out.reasons == [(1, "binary_data"), (3, "binary_data"), (5, "binary_data")]
    assert out.kept_lines == [2, 4, 6]


@pytest.mark.parametrize("name, data", [
    ("noise.jsonl", random.Random(7).randbytes(20_000)),
    ("screenshot.json", png_bytes()),
    ("image.jsonl.gz", gzip.compress(png_bytes())),
], ids=["random_bytes", "png", "gzipped_png"])
def test_a_binary_file_is_one_quarantined_record(tmp_path: Path, name: str, data: bytes):
    drop = tmp_path / name
    drop.write_bytes(data)
    assert data.count(b"\n") > 1 or name.endswith(".gz")  # lines a splitter could cut
    out = run_drop(drop, tmp_path, split_size=2)
    assert [m.lines for m in out.manifests] == [None]
    assert out.read == 1 and out.reasons == [(1, "binary_data")]
    assert "binary" in out.quarantined["error"][0]


# -- empty, huge, many ---------------------------------------------------------------------

@pytest.mark.parametrize("name, data", [
    ("empty.jsonl", b""), ("blank.jsonl", b"\xef\xbb\xbf\r\n  \n\n"),
    ("empty.jsonl.gz", gzip.compress(b"")), ("bom16.jsonl", b"\xff\xfe"),
    ("empty.json", b""),
], ids=["empty", "blank", "empty_gzip", "utf16_bom_only", "empty_json"])
def test_an_empty_file_is_one_record_through_the_splitter(tmp_path: Path, name: str,
                                                          data: bytes):
    drop = tmp_path / name
    drop.write_bytes(data)
    out = run_drop(drop, tmp_path)
    # One whole-file batch whose one record is the file: the batch says 1 read, not 0.
    assert [m.lines for m in out.manifests] == [None]
    assert out.read == 1 and out.reasons == [(1, "empty_file")]


def test_a_50_mb_line_passes_through_the_splitter_plain_and_gzipped(tmp_path: Path):
    chunk = "<think>" + "y" * 1000 + "</think>\n<result>" + "z" * 1000 + "</result>\n"
    body = chunk * (50_000_000 // len(chunk))
    text = jsonl(record("small1"), record("huge", body + "<answer>1</answer>"),
                 record("small3"))
    assert len(text) > 50_000_000
    plain = tmp_path / "huge.jsonl"
    plain.write_text(text, "utf-8")
    packed = tmp_path / "huge_gz.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    del text
    for drop in (plain, packed):
        out = run_drop(drop, tmp_path / drop.stem, split_size=2)
        assert [m.lines for m in out.manifests] == [[1, 2], [3]]
        assert out.read == 3 and out.reasons == []
        huge = out.raw.set_index("task_id").loc["huge"]
        assert len(huge["raw_response"]) == len(body) + len("<answer>1</answer>")
        assert out.kept_lines == [1, 2, 3]  # thoughts and results, no call: nothing to filter


def test_10000_tool_calls_in_one_record_are_read_and_filtered_with_a_reason(tmp_path: Path):
    call = ("<think>step {i}</think><microsandbox><microsandbox_execute>print({i})"
            "</microsandbox_execute></microsandbox><result>{i}</result>")
    body = "".join(call.format(i=i) for i in range(10_000)) + "<answer>done</answer>"
    drop = tmp_path / "many.jsonl"
    drop.write_text(jsonl(record("many", body), record("small")), "utf-8")
    out = run_drop(drop, tmp_path)
    assert out.read == 2 and out.reasons == [] and len(out.raw) == 2
    # Removed by the original tool's frequency filter, saying so.
    (removed,) = out.removed.to_dict("records")
    assert removed["reason"] == "frequency" and removed["tool_call_count"] == 10_000
    assert "10000 tool calls > beta_threshold 15" in removed["detail"]
    assert list(out.kept["task_id"]) == ["small"]
    # Flagged instead: kept, and cut into one clip per call plus the final clip.
    flagged = run_drop(drop, tmp_path / "flag",
                       config=PreprocessConfig(frequency_filter="flag"))
    assert len(flagged.kept) == 2 and len(flagged.removed) == 0
    many = flagged.kept[flagged.kept["task_id"] == "many"]
    assert int(many["tool_call_count"].iloc[0]) == 10_000
    clips = ingest.clips_table(many)
    assert len(clips) == 10_001
    assert (clips["tool_name"].iloc[:-1] == "microsandbox_execute").all()


# -- everything at once, through the CLI ---------------------------------------------------

def edge_drop(folder: Path) -> dict[str, tuple[int, dict[str, int]]]:
    """A drop folder holding every case; per file, (records read, quarantine reasons)."""
    folder.mkdir(parents=True)
    cases: dict[str, tuple[bytes, int, dict[str, int]]] = {
        "utf16le.jsonl": (("\ufeff" + jsonl(*ENCODED_RECORDS[:4])).encode("utf-16-le"), 4, {}),
        "utf16be.jsonl": (("\ufeff" + jsonl(*ENCODED_RECORDS[:4])).encode("utf-16-be"), 4, {}),
        "bom8.jsonl": (("\ufeff" + jsonl(record("b1"), record("b2"))).encode(), 2, {}),
        "runs.jsonl.gz": (gzip.compress(mixed_jsonl(12).encode()), 12,
                          {"invalid_json": 1, "not_an_object": 1}),
        "broken.jsonl.gz": (_corrupt("cut_off"), 1, {"corrupt_gzip": 1}),
        "array.json": (json.dumps([json.loads(record(f"a{i}")) for i in range(3)]).encode(),
                       3, {}),
        "deep.jsonl": (jsonl(deep_line(), record("d2"), record("d3")).encode(), 3,
                       {"too_deep": 1}),
        "nul.jsonl": (b'{"task_id": "n", "raw_response": "\x00"}\n'
                      + (record("n2") + "\n").encode(), 2, {"binary_data": 1}),
        "noise.jsonl": (random.Random(7).randbytes(20_000), 1, {"binary_data": 1}),
        "screenshot.json": (png_bytes(), 1, {"binary_data": 1}),
        "empty.jsonl": (b"", 1, {"empty_file": 1}),
        "many.jsonl": (jsonl(record("many", "".join(
            f"<microsandbox><microsandbox_execute>print({i})</microsandbox_execute>"
            f"</microsandbox><result>{i}</result>" for i in range(10_000)))).encode(), 1, {}),
    }
    for name, (data, _read, _reasons) in cases.items():
        (folder / name).write_bytes(data)
    return {name: (read, reasons) for name, (_data, read, reasons) in cases.items()}


@pytest.mark.slow
def test_the_cli_accounts_for_every_record_of_a_drop_of_bad_input(tmp_path: Path,
                                                                   monkeypatch, capsys):
    import dagster as dg

    from eval_pipeline.cli import main

    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    drop, out, store = tmp_path / "drop", tmp_path / "out", tmp_path / "store"
    expected = edge_drop(drop)
    assert main(["run", str(drop), "--output", str(out), "--store", str(store),
                 "--split-size", "3"]) == 0
    printed = capsys.readouterr().out
    raw = pd.read_parquet(out / "raw_trajectories.parquet")
    quarantine = pd.read_parquet(out / "quarantine.parquet")
    kept = pd.read_parquet(out / "preprocessed_trajectories.parquet")
    removed = pd.read_parquet(out / "preprocess_report.parquet")
    assert len(kept) + len(removed) == len(raw)
    assert len(raw) + len(quarantine) == sum(read for read, _ in expected.values())
    for name, (read, reasons) in expected.items():
        mine = quarantine[quarantine["source_file"] == name]
        assert (raw["source_file"] == name).sum() + len(mine) == read, name
        assert mine["reason"].value_counts().to_dict() == reasons, name
    assert removed.set_index("task_id").loc["many", "reason"] == "frequency"
    assert set(raw["source_format"]) == {"xml_tags"}
    for reason in ("corrupt_gzip", "binary_data", "too_deep", "empty_file"):
        assert f"quarantined: {reason}" in printed
    # The asset checks agree: every batch accounted for, by the pipeline's own count.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"eval_pipeline/source": "cli"}))
        evaluations = [
            e.dagster_event.event_specific_data for run in runs
            for e in instance.all_logs(run.run_id,
                                       of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
            if e.dagster_event is not None]
    accounted = [c for c in evaluations if c.check_name == "every_record_accounted"]
    assert accounted and all(c.passed for c in accounted)
    assert all(c.passed for c in evaluations if c.check_name ==
               "kept_plus_removed_equals_parsed")
