"""#12.3: past ``DECODED_AT_ONCE`` trajectories, ``build_report`` decodes the ALL row's
metadata batch by batch on each pass instead of keeping every trajectory's decoded (10 kB
each: 270 MiB on a 500 MB drop) -- and builds the same report."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline import report
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.exports.helpers import run_tables


def test_the_report_decoded_pass_by_pass_equals_the_report_decoded_once(
        project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sample = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    if not sample.is_file():
        pytest.skip("data/incoming not present")
    lines = sample.read_text("utf-8").splitlines(keepends=True)
    summaries = {}
    for i, start in enumerate(range(0, len(lines), 6)):
        path = tmp_path / f"b{i}.jsonl"
        path.write_text("".join(lines[start:start + 6]), "utf-8")
        summaries[f"b{9 - i}"] = run_tables(path, (JudgeConfig(name="heuristic"),),
                                            batch=f"b{9 - i}")["trajectory_summaries"]
    assert sum(len(s) for s in summaries.values()) <= report.DECODED_AT_ONCE
    once = report.build_report(summaries)
    decoded = []

    class Counting(report._Decoded):
        def __iter__(self):  # type: ignore[no-untyped-def]
            decoded.append(1)
            return super().__iter__()

    monkeypatch.setattr(report, "DECODED_AT_ONCE", 0)
    monkeypatch.setattr(report, "_Decoded", Counting)
    passes = report.build_report(summaries)
    pd.testing.assert_frame_equal(passes, once, check_exact=True)
    assert len(decoded) >= 2  # read again on each pass, never kept whole
    assert once["trajectory_assessment_mean"].notna().all()
    assert list(once["batch"]) == [*sorted(summaries), "ALL"]
