"""``eval-pipeline run ... --dry-run``: what judging the input would cost, calling nobody.

The input goes through the same parsing, preprocessing and clip segmentation as a real run
(in memory, no batch files written), then :func:`estimate_cost` renders every prompt and
consults the judge cache the real run would use.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from eval_pipeline import ingest
from eval_pipeline.ingest import ReadOptions
from eval_pipeline.judges.base import ClipTask
from eval_pipeline.judges.cache import JudgeCache, default_cache_path
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.estimate import DryRunEstimate, estimate_cost
from eval_pipeline.preprocess import PreprocessConfig


def tasks_from_inputs(inputs: Sequence[Path], *, preprocess: PreprocessConfig | None = None,
                      read: ReadOptions | None = None) -> list[ClipTask]:
    read = read or ReadOptions()
    registry = read.registry()
    config = preprocess or PreprocessConfig()
    tasks: list[ClipTask] = []
    for path in inputs:
        raw, _ = ingest.read_batch(path, None, path.stem, read)
        kept, _, _ = ingest.preprocess_batch(raw, config, registry)
        if len(kept):
            tasks.extend(ingest.clip_tasks(ingest.clips_table(kept), kept))
    return tasks


def dry_run(inputs: Sequence[Path], judges: Sequence[JudgeConfig], *,
            preprocess: PreprocessConfig | None = None, read: ReadOptions | None = None,
            cache_path: Path | None = None) -> DryRunEstimate:
    tasks = tasks_from_inputs(inputs, preprocess=preprocess, read=read)
    path = cache_path or default_cache_path()
    cache = JudgeCache(path) if path.exists() else None
    try:
        return estimate_cost(tasks, judges, cache=cache)
    finally:
        if cache is not None:
            cache.close()
