"""Assertions every format test shares: the offset contract and counting helpers."""

from __future__ import annotations

from eval_pipeline.models import ParseResult, Step, Trajectory


def assert_offsets(traj: Trajectory) -> None:
    """Every step's span lies in raw_response, in order, without overlap, and holds its
    content: the contract clips and the evaluation output are cut by."""
    last_end = 0
    for step in traj.steps:
        assert 0 <= step.start <= step.end <= len(traj.raw_response), step
        assert step.start >= last_end, (traj.trajectory_id, step)
        span = traj.raw_response[step.start:step.end]
        if step.kind != "tool_call":
            assert step.content.strip()[:200] in span, (traj.trajectory_id, step.kind)
        last_end = step.end


def assert_result_ok(result: ParseResult) -> None:
    ids = [t.trajectory_id for t in result.trajectories]
    assert len(ids) == len(set(ids))
    for traj in result.trajectories:
        assert_offsets(traj)
        traj.to_row()


def calls(traj: Trajectory) -> list[Step]:
    return [s for s in traj.steps if s.kind == "tool_call"]


def n_calls(result: ParseResult) -> int:
    return sum(len(calls(t)) for t in result.trajectories)
