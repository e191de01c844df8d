"""Which batches need a run: never summarised, new data, or changed code or judges.

Plain logic over what the orchestrator knows, so the daily schedule stays a thin shell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

JUDGMENTS_PREFIX = "judgments/"
BATCH_FILE_GONE = "batch file gone"
"""Not a reason to run: a run would fail; the schedule skips such batches and says so."""


@dataclass(frozen=True)
class BatchState:
    summarized: bool
    """trajectory_summaries has a materialization for the batch."""
    ingested_fingerprint: str | None
    """The batch file fingerprint raw_trajectories last read."""
    current_fingerprint: str | None
    """The batch file fingerprint on disk now; None when the batch file is gone."""
    code_versions: Mapping[str, str | None]
    """Per asset (user string): the code version of its last materialization for the batch."""


def why_stale(state: BatchState, expected_versions: Mapping[str, str]) -> str | None:
    """The reason a batch should be rerun, or None when it is up to date.

    Judges are named first: a changed model or template is the change users look for.
    """
    if state.current_fingerprint is None:
        return BATCH_FILE_GONE
    if not state.summarized:
        return "missing"
    if state.ingested_fingerprint != state.current_fingerprint:
        return "new data"
    changed = sorted(k for k, v in expected_versions.items() if state.code_versions.get(k) != v)
    judges = [k for k in changed if k.startswith(JUDGMENTS_PREFIX)]
    if judges:
        return f"judge {judges[0].removeprefix(JUDGMENTS_PREFIX)} changed"
    if changed:
        return f"code of {changed[0]} changed"
    return None
