"""The C tag-scan kernel against its numpy twins, function by function (#12.1, target 1).

Generates a drop cut from the corpora's XML records (``drops.write_corpus_drop``), parses
every batch once (untimed), then times each Arrow-stage function the kernel serves with
the kernel and without it (``tagscan.use_kernel``), in turn, ``--repeats`` rounds over all
batches, CPU seconds (``time.process_time``), medians. Prints one row per function and the
three stage functions whole (``_chunk_steps`` via ``array_steps``, ``screen_batch``,
``clip_batch``). Asserts nothing: the tests hold both ways to the same output.

Usage: ``tagscan.py [--mb 50] [--batch 200] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
from drops import write_corpus_drop

from eval_pipeline import ingest, tagscan
from eval_pipeline.clips_arrow import clip_batch
from eval_pipeline.formats import xml_arrow
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.preprocess_arrow import (
    _repair_status,
    _scan,
    _tag_counts,
    screen_batch,
    utf8_bytes,
)
from eval_pipeline.splitting import split_drop
from eval_pipeline.tool_registry import default_registry

CORPORA = Path(os.environ.get("EVAL_PIPELINE_CORPORA", "/work/shared/corpora"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if tagscan.BUILT is None:
        sys.exit("the C kernel is not built (pip install -e . or setup.py build_ext --inplace)")
    registry = default_registry()
    names = xml_arrow._names(registry)
    assert names is not None
    tool_tags = list(registry.tool_tags)
    config = PreprocessConfig()
    with tempfile.TemporaryDirectory() as tmp:
        drop = Path(tmp) / "generated.jsonl"
        write_corpus_drop(drop, args.mb, CORPORA)
        manifests = split_drop(drop, Path(tmp) / "batches", args.batch)
        folder = Path(tmp) / "batches" / "generated"
        raws = [ingest.read_batch(folder / m.batch_file, None, "b")[0] for m in manifests]
    batches = []
    for raw in raws:
        responses = pa.array(raw["raw_response"].tolist(), pa.large_string())
        steps = ingest._steps_list_array(raw, len(raw))
        data, offsets = utf8_bytes(responses)
        batches.append((responses, steps, data, offsets, _scan(data, offsets)))
    present = [np.ones(len(b[0]), bool) for b in batches]
    reparse = [np.ones(len(b[0]), bool) for b in batches]

    def over(fn: Callable[[int], object]) -> Callable[[], None]:
        return lambda: [fn(i) for i in range(len(batches))] and None

    jobs: dict[str, Callable[[], None]] = {
        "xml_arrow: parse steps (_chunk_steps)": over(
            lambda i: xml_arrow.array_steps(batches[i][0], present[i], registry)),
        "  candidates (xml_scan)": over(lambda i: xml_arrow._candidates(
            batches[i][2], len(batches[i][2]), batches[i][3], names)),
        "preprocess_arrow: screen_batch": over(lambda i: screen_batch(
            batches[i][0], batches[i][1], reparse[i], config, registry)),
        "  _scan (prep_scan)": over(lambda i: _scan(batches[i][2], batches[i][3])),
        "  _repair_status (repair_status)": over(lambda i: _repair_status(
            batches[i][4], batches[i][2], len(batches[i][0]), tool_tags)),
        "  _tag_counts (tag_counts)": over(lambda i: _tag_counts(
            batches[i][4], len(batches[i][0]))),
        "clips_arrow: clip_batch": over(lambda i: clip_batch(batches[i][0], batches[i][1])),
    }
    times: dict[tuple[str, bool], list[float]] = {}
    for job in jobs.values():  # warm-up, both ways
        for on in (True, False):
            with tagscan.use_kernel(on):
                job()
    for _ in range(args.repeats):
        for name, job in jobs.items():
            for on in (True, False):
                with tagscan.use_kernel(on):
                    start = time.process_time()
                    job()
                    times.setdefault((name, on), []).append(time.process_time() - start)
    print(f"{sum(len(b[0]) for b in batches)} responses in {len(batches)} batches "
          f"({args.mb:g} MB drop), CPU s, medians of {args.repeats}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'function':40} {'numpy':>8} {'C kernel':>9} {'ratio':>6}")
    for name in jobs:
        slow = statistics.median(times[(name, False)])
        fast = statistics.median(times[(name, True)])
        print(f"{name:40} {slow:8.3f} {fast:9.3f} {slow / fast:6.1f}")


if __name__ == "__main__":
    main()
