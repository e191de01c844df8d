"""A few records of the sample drop, small enough for the fake servers to judge quickly."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def small_drop(project_root: Path, tmp_path: Path) -> Path:
    sample = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    if not sample.is_file():
        pytest.skip("sample drop data/incoming/sample_agent_runs.jsonl not present")
    path = tmp_path / "small.jsonl"
    path.write_text("".join(sample.read_text("utf-8").splitlines(keepends=True)[:3]), "utf-8")
    return path


# The fake provider servers of the judge tests.
from eval_pipeline_tests.judges.conftest import anthropic_server, openai_server  # noqa: E402

__all__ = ["anthropic_server", "openai_server", "small_drop"]
