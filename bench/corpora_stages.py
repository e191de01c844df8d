"""The batch stage functions (parse, preprocess, clips, routing) over the corpora cut as the
CLI cuts them (batches of 10), per checkout, CPU seconds per stage (#12.4: the multi-format
batches the drop bench does not see).

The corpora are split once here; each checkout (``--code``, one or more) then runs every
batch through the four functions in a child process with ``PYTHONPATH`` set to it (in a
temporary folder, so ``python -c`` does not import the current folder first), the
checkouts in turn each repeat; medians of ``--repeats``, each child's figures the median
of its own ``--rounds`` after a warm-up round (``time.process_time``). Without the
Dagster assets' IO, so the stages' own code is what differs. Usage:
``corpora_stages.py --repeats 3 --code /work/main --code .``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CORPORA = Path("/work/shared/corpora")

CHILD = r"""
import json, statistics, sys, time
from pathlib import Path
from eval_pipeline import ingest
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import routing_table
from eval_pipeline.splitting import find_batch
from eval_pipeline.tool_registry import default_registry
folder, keys, rounds = Path(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
found = [find_batch(folder, key) for key in keys]
registry, config = default_registry(), PreprocessConfig()
clock = time.process_time
runs = []
for _ in range(rounds + 1):
    spent = dict(parse=0.0, preprocess=0.0, clips=0.0, routing=0.0)
    for path, manifest in found:
        start = clock()
        raw, _ = ingest.read_batch(path, manifest, manifest.partition_key)
        parsed = clock()
        kept, _, _ = ingest.preprocess_batch(raw, config, registry)
        preprocessed = clock()
        ingest.clips_table(kept)
        clipped = clock()
        routing_table(kept, "subset")
        spent["parse"] += parsed - start
        spent["preprocess"] += preprocessed - parsed
        spent["clips"] += clipped - preprocessed
        spent["routing"] += clock() - clipped
    runs.append(spent)
print(json.dumps({k: statistics.median(r[k] for r in runs[1:]) for k in runs[0]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, action="append", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--split-size", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(args.code[-1]))
    from eval_pipeline.ingest import ReadOptions
    from eval_pipeline.local_run import collect_inputs, split_inputs

    with tempfile.TemporaryDirectory() as tmp:
        manifests, _ = split_inputs(collect_inputs(CORPORA), Path(tmp), args.split_size,
                                    ReadOptions())
        keys = ",".join(m.partition_key for m in manifests)
        load = os.getloadavg()[0]
        runs: dict[Path, list[dict[str, float]]] = {code: [] for code in args.code}
        for _ in range(args.repeats):
            for code in args.code:
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, tmp, keys, str(args.rounds)],
                    env={**os.environ, "PYTHONPATH": str(code.resolve())}, cwd=tmp,
                    check=True, capture_output=True, text=True)
                runs[code].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"corpora: {len(manifests)} batches of {args.split_size}; load average {load:.1f} "
          f"at the start, {os.getloadavg()[0]:.1f} at the end; CPU s, medians of "
          f"{args.repeats} x {args.rounds}")
    print(f"{'code':40s} {'parse':>8s} {'preprocess':>11s} {'clips':>8s} {'routing':>8s} "
          f"{'total':>8s}")
    for code, got in runs.items():
        m = {k: statistics.median(r[k] for r in got) for k in got[0]}
        print(f"{code!s:40s} {m['parse']:8.3f} {m['preprocess']:11.3f} {m['clips']:8.3f} "
              f"{m['routing']:8.3f} {sum(m.values()):8.3f}")


if __name__ == "__main__":
    main()
