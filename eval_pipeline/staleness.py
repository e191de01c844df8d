"""Which batches need a run: never summarised, new data, or a judge/template changed.

Plain logic over what the orchestrator knows, so the daily schedule stays a thin shell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchState:
    summarized: bool
    """trajectory_summaries has a materialization for the batch."""
    ingested_fingerprint: str | None
    """The batch file fingerprint raw_trajectories last read."""
    current_fingerprint: str | None
    """The batch file fingerprint on disk now."""
    judge_code_versions: Mapping[str, str | None]
    """Per judge asset: the code version of its last materialization for the batch."""


def why_stale(state: BatchState, expected_judge_versions: Mapping[str, str]) -> str | None:
    """The reason a batch should be rerun, or None when it is up to date."""
    if not state.summarized:
        return "missing"
    if state.current_fingerprint and state.ingested_fingerprint != state.current_fingerprint:
        return "new data"
    for judge, expected in sorted(expected_judge_versions.items()):
        if state.judge_code_versions.get(judge) != expected:
            return f"judge {judge} changed"
    return None
