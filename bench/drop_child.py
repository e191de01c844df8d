"""Parse, preprocess and clips over a folder of batch files, timed; prints one JSON line.

A child of ``bench_pipeline.py --sections drop``: run with ``PYTHONPATH`` set to the
checkout under test, so two checkouts (``--code``) are timed on the same batches, in turn,
in one bench run. Imports only what the three stages need, so an older checkout runs it too.

Usage: ``drop_child.py BATCH_FOLDER WORKERS``. Prints the seconds of one process (wall and
CPU, and CPU per stage) and the wall seconds of a pool of ``WORKERS`` processes over the
batches, each after a warm-up batch (first calls pay imports, regex compilation and
pandas' set-up).
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from eval_pipeline import ingest
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.tool_registry import default_registry


def stages(path: Path) -> tuple[float, float, float]:
    """One batch through parse, preprocess and clips, as the three assets run them: the
    CPU seconds of each."""
    clock = time.process_time
    start = clock()
    raw, _quarantined = ingest.read_batch(path, None, path.stem)
    parsed = clock()
    kept, _removed, _stats = ingest.preprocess_batch(raw, PreprocessConfig(),
                                                     default_registry())
    preprocessed = clock()
    ingest.clips_table(kept)
    return parsed - start, preprocessed - parsed, clock() - preprocessed


def main() -> None:
    folder, workers = Path(sys.argv[1]), int(sys.argv[2])
    try:  # the assets' processes keep freed memory for the next batch (not in older code)
        from eval_pipeline.allocator import keep_freed_memory
    except ImportError:
        pass
    else:
        keep_freed_memory()
    batches = sorted(folder.glob("*.jsonl"))
    stages(batches[0])
    wall, cpu = time.perf_counter(), time.process_time()
    per_stage = [sum(t) for t in zip(*(stages(b) for b in batches), strict=True)]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(stages, batches[:workers]))
        pool_wall = time.perf_counter()
        list(pool.map(stages, batches))
        pool_wall = time.perf_counter() - pool_wall
    print(json.dumps({"wall": wall, "cpu": cpu, "parse": per_stage[0],
                      "preprocess": per_stage[1], "clips": per_stage[2],
                      "pool_wall": pool_wall}))


if __name__ == "__main__":
    main()
