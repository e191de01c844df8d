"""The parse stage alone (``ingest.read_batch``) on a generated XML-tag drop, per checkout,
against bare ``json.loads`` of the same lines (#12.1, target 1, the parse side).

Each checkout (``--code``, one or more) runs in a child process with ``PYTHONPATH`` set
to it (in a temporary folder: ``python -c`` would import the current folder first), the
checkouts in turn each repeat, interleaved with the ``json.loads`` baseline in this
process; medians of ``--repeats``, CPU seconds (``time.process_time``, all threads).
A checkout whose ``read_batch`` still returns the steps as Python dicts is also timed with
the conversion to the Arrow steps column that the #12.1 contract asks of the stage
(``steps_column.with_arrow_steps``), so the figures compare like with like. Usage:
``bench_parse.py --mb 50 --repeats 3 --code /work/main --code .``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from drops import write_corpus_drop

CORPORA = Path("/work/shared/corpora")

CHILD = r"""
import json, sys, time
from pathlib import Path
from eval_pipeline import ingest
from eval_pipeline.steps_column import STEPS_DTYPE, with_arrow_steps
batches = sorted(Path(sys.argv[1]).glob("*.jsonl"))
ingest.read_batch(batches[0], None, batches[0].stem)  # imports, compiled patterns
clock = time.process_time
parse = convert = 0.0
arrow = True
for path in batches:
    start = clock()
    raw, _ = ingest.read_batch(path, None, path.stem)
    parse += clock() - start
    if raw["steps"].dtype != STEPS_DTYPE:
        arrow = False
        start = clock()
        with_arrow_steps(raw)
        convert += clock() - start
    del raw  # freeing the table is not the parse's time (drop_child.py does not count it)
print(json.dumps({"parse": parse, "convert": convert, "arrow": arrow}))
"""


def json_only(batches: list[Path]) -> float:
    """CPU seconds of bare ``json.loads`` of every non-blank line of the batches."""
    start = time.process_time()
    for path in batches:
        for line in path.read_bytes().split(b"\n"):
            if line.strip():
                with contextlib.suppress(ValueError):
                    json.loads(line)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--code", type=Path, action="append", required=True)
    args = parser.parse_args()
    from eval_pipeline.splitting import split_drop

    with tempfile.TemporaryDirectory() as tmp:
        drop = Path(tmp) / "generated.jsonl"
        lines = write_corpus_drop(drop, args.mb, CORPORA)
        size = drop.stat().st_size / 1e6
        manifests = split_drop(drop, Path(tmp) / "batches", 200)
        folder = Path(tmp) / "batches" / "generated"
        batches = [folder / m.batch_file for m in manifests]
        json_only(batches)  # the page cache
        load_start = os.getloadavg()[0]
        base: list[float] = []
        runs: dict[Path, list[dict[str, float]]] = {code: [] for code in args.code}
        for _ in range(args.repeats):
            base.append(json_only(batches))
            for code in args.code:
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, str(folder)],
                    env={**os.environ, "PYTHONPATH": str(code.resolve())}, cwd=tmp,
                    check=True, capture_output=True, text=True)
                runs[code].append(json.loads(done.stdout.strip().splitlines()[-1]))
    median = statistics.median
    loads = median(base)
    print(f"generated drop: {size:.0f} MB, {lines} lines, {len(batches)} batches of 200; "
          f"load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
          f"medians of {args.repeats}, CPU seconds")
    print(f"{'':40} {'CPU s':>7} {'x json.loads CPU':>17}")
    print(f"{'json.loads, every line':40} {loads:7.3f} {1:17.2f}")
    for code, got in runs.items():
        parse = median(r["parse"] for r in got)
        total = median(r["parse"] + r["convert"] for r in got)
        print(f"{'read_batch, ' + str(code):40} {parse:7.3f} {parse / loads:17.2f}")
        if not got[0]["arrow"]:
            print(f"{'  + steps to Arrow (the contract)':40} {total:7.3f} "
                  f"{total / loads:17.2f}")
    print(f"budget (target 1): parse <= 2.2 x json.loads CPU = {2.2 * loads:.3f} s")


if __name__ == "__main__":
    main()
