"""The ceiling of a compiled parse with what the project already depends on (#12.1, target 1).

Times, on one drop and interleaved with bare ``json.loads`` of the same lines (medians of
``--repeats``, CPU seconds of the process, all threads counted):

- pyarrow's JSON reader with an explicit schema of the fields the XML format reads
  (unexpected fields ignored), multi-threaded and on one thread;
- RE2 tokenisation of every ``raw_response``: each known tag (opening or closing) rewritten
  as ``\\x1f[/]name\\x1f`` (``replace_substring_regex``), then split on ``\\x1f``
  (``split_pattern``): every record's tokens as a ``list<string>`` built in C++, text and
  tag names alternating, no string copied again;
- the tokens' character offsets (``utf8_length``, ``list_parent_indices``, numpy sums);
- the steps of the well-formed case as an Arrow ``list<struct<kind, content, start, end>>``
  (each opening tag with the text up to the next tag, trimmed; no pairing, repair, tool-call
  reading or notes: a lower bound of a compiled reading, not a reading);
- what handing the stages their tables as they are today costs: those steps to Python dicts
  (``to_pylist``: the ``steps`` column is an object column of step dicts) and the responses
  to Python ``str``;
- ``msgspec`` and ``orjson`` decoding of the same lines, if importable (``PYTHONPATH`` a
  folder they were installed into; neither is a dependency).

Not the pipeline: a bound on what a compiled parse could reach before any of preprocess and
clips is counted. Usage: ``arrow_ceiling.py [DROP.jsonl] [--mb 200] [--repeats 3]`` (without
a drop, one is generated from the corpora into a temporary folder).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

sys.path.insert(0, str(Path(__file__).parent))
from drops import write_corpus_drop

CORPORA = Path("/work/shared/corpora")
SCHEMA = pa.schema([
    ("timestamp", pa.string()), ("task_id", pa.string()),
    ("task_description", pa.string()), ("duration", pa.float64()),
    ("success", pa.bool_()), ("final_result", pa.string()),
    ("raw_response", pa.string()),
])
# The control tags and the packaged registry's tool tags.
TAGS = ["think", "result", "tool_param", "tool_call", "answer", "perform_web_task",
        "mcp-search-tool", "tavily-extract", "tavily-search", "microsandbox",
        "tavily-crawl", "browser_use", "search_tool", "deepsearch", "tavily-map", "tavily"]
TAG_RE = "<(/?(?:" + "|".join(sorted(TAGS, key=len, reverse=True)) + "))>"


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def decode_lines(data: bytes, loads: Callable[[bytes], Any]) -> int:
    n = 0
    for line in data.split(b"\n"):
        if line.strip():
            loads(line)
            n += 1
    return n


def read_json(data: bytes, threads: bool) -> pa.Table:
    return pj.read_json(pa.BufferReader(data),
                        read_options=pj.ReadOptions(use_threads=threads, block_size=1 << 20),
                        parse_options=pj.ParseOptions(explicit_schema=SCHEMA,
                                                      unexpected_field_behavior="ignore"))


def mark(raw: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.replace_substring_regex(raw, TAG_RE, "\x1f\\1\x1f")


def split(marked: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.split_pattern(marked, "\x1f")


def offsets(lists: pa.ListArray) -> tuple[pa.StringArray, np.ndarray, np.ndarray,
                                          np.ndarray]:
    """One chunk's tokens flattened, and each token's position in its list, character
    offset in its response and length in characters: tokens alternate text and tag name
    (text first), and a name token stands for ``<name>``, two characters longer."""
    bounds = lists.offsets.to_numpy()
    flat = lists.values.slice(bounds[0], bounds[-1] - bounds[0])
    within = np.arange(len(flat)) - np.repeat(bounds[:-1] - bounds[0], np.diff(bounds))
    chars = pc.utf8_length(flat).to_numpy().astype(np.int64)
    lens = chars + 2 * (within % 2)
    cum = np.cumsum(lens) - lens
    starts = cum - np.maximum.accumulate(np.where(within == 0, cum, 0))
    return flat, within, starts, chars


def all_offsets(tokens: pa.ChunkedArray) -> list[tuple[Any, ...]]:
    return [offsets(chunk) for chunk in tokens.chunks]


def steps_struct(lists: pa.ListArray) -> pa.ListArray:
    """One chunk's steps: each opening tag's kind = its name, content = the text after it
    up to the next known tag, trimmed, start and end in characters."""
    flat, within, starts, chars = offsets(lists)
    bounds = lists.offsets.to_numpy()
    name_at = np.flatnonzero(within % 2 == 1)
    opener = ~pc.starts_with(flat.take(pa.array(name_at)), "/").to_numpy(zero_copy_only=False)
    at = name_at[opener]
    kind = flat.take(pa.array(at))
    content = pc.utf8_trim_whitespace(flat.take(pa.array(at + 1)))
    struct = pa.StructArray.from_arrays(
        [kind, content, pa.array(starts[at]), pa.array(starts[at + 1] + chars[at + 1])],
        ["kind", "content", "start", "end"])
    parents = np.repeat(np.arange(len(lists)), np.diff(bounds))
    counts = np.bincount(parents[at], minlength=len(lists))
    return pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(counts)].astype(np.int32)),
                                    struct)


def all_steps(tokens: pa.ChunkedArray) -> pa.ChunkedArray:
    return pa.chunked_array([steps_struct(chunk) for chunk in tokens.chunks])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("drop", nargs="?")
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        drop = Path(args.drop) if args.drop else Path(tmp) / "drop.jsonl"
        if not args.drop:
            write_corpus_drop(drop, args.mb, CORPORA)
        data = drop.read_bytes()
    load_start = os.getloadavg()[0]
    decoders: list[tuple[str, Callable[[bytes], Any]]] = [("json.loads", json.loads)]
    for module, label in (("msgspec.json", "msgspec.json.decode"), ("orjson", "orjson.loads")):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        decoders.append((label, mod.decode if module == "msgspec.json" else mod.loads))
    figures: dict[str, list[tuple[float, float]]] = {}

    def run(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        wall, cpu, out = timed(lambda: fn(*args))
        figures.setdefault(name, []).append((wall, cpu))
        return out

    for _ in range(args.repeats):
        for label, loads in decoders:
            run(f"{label}, every line", decode_lines, data, loads)
        run("read_json, 1 thread", read_json, data, False)
        table = run("read_json, threads", read_json, data, True)
        marked = run("RE2: tags rewritten as \\x1f[/]name\\x1f", mark, table["raw_response"])
        tokens = run("split on \\x1f into list<string>", split, marked)
        del marked
        run("token offsets in characters", all_offsets, tokens)
        steps = run("steps as list<struct> (lower bound)", all_steps, tokens)
        run("  those steps to Python dicts (to_pylist)", steps.to_pylist)
        run("  raw_response to Python str", table["raw_response"].to_pylist)
        del tokens
    median = statistics.median
    base = median(c for _, c in figures["json.loads, every line"])
    compiled = ["read_json, 1 thread", "RE2: tags rewritten as \\x1f[/]name\\x1f",
                "split on \\x1f into list<string>", "steps as list<struct> (lower bound)"]
    print(f"drop {len(data) / 1e6:.0f} MB, {table.num_rows} records, "
          f"{len(pc.list_flatten(steps))} opening tags of known tags; load average "
          f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; medians of "
          f"{args.repeats}")
    print(f"{'':46} {'wall s':>7} {'CPU s':>7} {'CPU / json.loads':>17}")
    for name, got in figures.items():
        wall, cpu = median(w for w, _ in got), median(c for _, c in got)
        print(f"{name:46} {wall:7.3f} {cpu:7.3f} {cpu / base:17.2f}")
    total = sum(median(c for _, c in figures[k]) for k in compiled)
    print(f"{'compiled parse skeleton (1 thread), total':46} {'':7} {total:7.3f} "
          f"{total / base:17.2f}")
    print(f"target 0.5 x json.loads: the three stages in at most {2 * base:.3f} CPU s on one "
          f"core ({4 * base:.3f} over two free cores)")


if __name__ == "__main__":
    main()
