"""Fixtures for the judge tests: fake provider servers and a small batch of clips."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eval_pipeline.judges.base import ClipTask, ClipView
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer

SECRET = "sk-test-SECRET-5f1b2c3d4e5f6a7b8c9d"


@pytest.fixture
def openai_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer("openai").start()
    yield server
    server.stop()


@pytest.fixture
def anthropic_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer("anthropic").start()
    yield server
    server.stop()


def make_tasks(trajectories: int = 2, clips: int = 3) -> list[ClipTask]:
    kinds = ["microsandbox", "deepsearch", "browser_use", "final"]
    return [
        ClipTask(
            trajectory_id=f"t{t}",
            clip_index=i,
            tool_type=kinds[i % len(kinds)],
            task_description=f"Task {t}: sort a list and explain",
            clip=ClipView(content=f"<think>step {i} of trajectory {t}</think>"
                                  f"<result>ok {i}</result>"),
        )
        for t in range(trajectories)
        for i in range(clips)
    ]


@pytest.fixture
def tasks() -> list[ClipTask]:
    return make_tasks()
