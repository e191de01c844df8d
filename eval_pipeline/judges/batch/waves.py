"""How many waves a batch-mode judge needs, and its context-chain choice in words.

Apart from the engine so that the dry run can say it without importing the SDKs.
"""

from __future__ import annotations

from collections.abc import Sequence

from eval_pipeline.judges.base import ClipTask
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.rubrics import (
    EVAL_CATEGORY_ASSESSMENT,
    EVAL_KIND_CLIP,
    EVAL_TRAJECTORY_ASSESSMENT,
)

__all__ = ["chain_description", "expected_waves"]


def chain_description(config: JudgeConfig, tasks: Sequence[ClipTask] = ()) -> str:
    """What ``batch_waves`` means for this run, in words the metadata and README use."""
    waves = expected_waves(config, tasks) if tasks else None
    count = f" ({waves} wave{'s' if waves != 1 else ''})" if waves is not None else ""
    if config.batch_waves is None:
        return f"full{count}"
    if config.batch_waves == 1:
        return f"off{count}"
    return f"bounded to {config.batch_waves}{count}"


def expected_waves(config: JudgeConfig, tasks: Sequence[ClipTask]) -> int:
    """Waves a run needs when every answer is readable and every line answered: the longest
    trajectory's clip count (full chain) or at most ``batch_waves``, plus one wave for the
    category assessments and one for the trajectory assessment when asked; 1 without clip
    rubric or tasks. Repairs and resubmissions add a wave each when they occur."""
    if EVAL_KIND_CLIP not in config.evaluations or not tasks:
        return 1
    per_trajectory: dict[str, int] = {}
    for task in tasks:
        per_trajectory[task.trajectory_id] = per_trajectory.get(task.trajectory_id, 0) + 1
    longest = max(per_trajectory.values())
    waves = longest if config.batch_waves is None else min(longest, config.batch_waves)
    kinds = set(config.evaluations)  # the assessments follow the clips, one wave each
    return (waves + (EVAL_CATEGORY_ASSESSMENT in kinds)
            + (EVAL_TRAJECTORY_ASSESSMENT in kinds))


