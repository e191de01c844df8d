"""Preprocess + clips given an Arrow-steps raw table, old code against new (#12.1, target 1).

Generates a drop cut from the corpora's XML records (``drops.write_corpus_drop``), cuts it
into batches of ``--batch`` lines, and runs one child process per checkout (``--code``, the
new one being this file's checkout) in turn, ``--repeats`` times, interleaved. Each child
parses every batch (untimed), converts the table's ``steps`` with ``with_arrow_steps``
(untimed: the parse side is another change), then times ``preprocess_batch`` and
``clips_table`` over all batches in CPU seconds (``time.process_time``). The parent times
bare ``json.loads`` of the same lines between the children. Prints medians and each stage
as a multiple of json.loads's CPU (the budget: preprocess <= 0.8 x, clips <= 0.6 x).

Usage: ``prep_arrow.py [--mb 50] [--batch 200] [--repeats 3] [--code /work/main]``.
"""

from __future__ import annotations

import argparse
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
HERE = Path(__file__).resolve().parent.parent


def child(folder: Path) -> None:
    """Runs under the checkout being timed (``PYTHONPATH``): prints one JSON line."""
    from eval_pipeline import ingest
    from eval_pipeline.preprocess import PreprocessConfig
    from eval_pipeline.steps_column import with_arrow_steps
    from eval_pipeline.tool_registry import default_registry

    registry = default_registry()
    config = PreprocessConfig()
    raws = [with_arrow_steps(ingest.read_batch(p, None, p.stem)[0])
            for p in sorted(folder.glob("*.jsonl"))]
    kept, _removed, _stats = ingest.preprocess_batch(raws[0], config, registry)  # warm-up
    ingest.clips_table(kept)
    clock = time.process_time
    pre = clips = 0.0
    rows = 0
    for raw in raws:
        start = clock()
        kept, _removed, _stats = ingest.preprocess_batch(raw, config, registry)
        middle = clock()
        table = ingest.clips_table(kept)
        clips += clock() - middle
        pre += middle - start
        rows += len(table)
    print(json.dumps({"preprocess": pre, "clips": clips, "clip_rows": rows}))


def loads_cpu(lines: list[bytes]) -> float:
    start = time.process_time()
    for line in lines:
        json.loads(line)  # the corpus drop's lines are all JSON
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--code", action="append", default=[])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(Path(args.child))
        return
    codes = [*args.code, str(HERE)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        drop = folder / "drop.jsonl"
        write_corpus_drop(drop, args.mb, CORPORA)
        lines = drop.read_bytes().splitlines()
        batches = folder / "batches"
        batches.mkdir()
        for i in range(0, len(lines), args.batch):
            (batches / f"b{i // args.batch:05d}.jsonl").write_bytes(
                b"\n".join(lines[i:i + args.batch]) + b"\n")
        results: dict[str, list[dict[str, float]]] = {c: [] for c in codes}
        loads: list[float] = []
        for _ in range(args.repeats):
            for code in codes:
                env = {**os.environ, "PYTHONPATH": code}
                out = subprocess.run([sys.executable, __file__, "--child", str(batches)],
                                     env=env, check=True, capture_output=True, text=True)
                results[code].append(json.loads(out.stdout.strip().splitlines()[-1]))
                loads.append(loads_cpu(lines))
        base = statistics.median(loads)
        print(f"drop {args.mb} MB, {len(lines)} lines, batches of {args.batch}; "
              f"load average {os.getloadavg()[0]:.2f}; json.loads {base:.3f} s CPU (median)")
        for code, runs in results.items():
            pre = statistics.median(r["preprocess"] for r in runs)
            cl = statistics.median(r["clips"] for r in runs)
            print(f"{code}: preprocess {pre:.3f} s ({pre / base:.2f} x), clips {cl:.3f} s "
                  f"({cl / base:.2f} x), together {(pre + cl) / base:.2f} x json.loads; "
                  f"clips rows {runs[0]['clip_rows']}")


if __name__ == "__main__":
    main()
