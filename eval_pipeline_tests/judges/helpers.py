"""Run a configured judge against a fake server the way the judgments asset does."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

from eval_pipeline.judges import make_judge
from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import ClipTask, JudgeRuntime, JudgmentRow, run_judge
from eval_pipeline_tests.judges.conftest import SECRET

# The provider, fault, cache and budget tests count calls per clip on the rubric path; the
# ReAct kinds are exercised by passing ``evaluations=ALL_EVALUATIONS`` (test_react.py).
CLIP_ONLY = ["clip_rubric"]

_FENCE = re.compile(r"<(data-[0-9a-f]{8}x*)>\n(.*?)\n</\1>", re.DOTALL)


def unfenced(prompt: str) -> str:
    """A prompt with each trajectory field's data block replaced by its text, so tests can
    read the template's wording around the fields (test_hostile_content checks the fences)."""
    return _FENCE.sub(lambda m: m.group(2), prompt)


def openai_config(server: Any, **overrides: Any) -> JudgeConfig:
    fields: dict[str, Any] = {
        "name": "gpt", "provider": "openai", "model": "gpt-4.1-mini",
        "base_url": server.base_url, "api_key_env": "FAKE_OPENAI_KEY",
        "max_retries": 3, "timeout_s": 5.0, "evaluations": CLIP_ONLY,
    }
    fields.update(overrides)
    return JudgeConfig(**fields)


def anthropic_config(server: Any, **overrides: Any) -> JudgeConfig:
    fields: dict[str, Any] = {
        "name": "claude", "provider": "anthropic", "model": "claude-sonnet-4-5",
        "base_url": server.base_url, "api_key_env": "FAKE_ANTHROPIC_KEY",
        "max_retries": 3, "timeout_s": 5.0, "evaluations": CLIP_ONLY,
    }
    fields.update(overrides)
    return JudgeConfig(**fields)


def run(config: JudgeConfig, tasks: Sequence[ClipTask], *, cache: JudgeCache | None = None,
        api_key: str | None = SECRET, breaker_threshold: int = 3) -> list[JudgmentRow]:
    async def go() -> list[JudgmentRow]:
        judge = make_judge(config, api_key)
        runtime = JudgeRuntime.from_config(config, cache=cache, retry_base_s=0.01,
                                           breaker_threshold=breaker_threshold)
        return await run_judge(judge, tasks, config.concurrency, runtime,
                               evaluations=config.evaluations)

    return asyncio.run(go())


def scores_of(row: JudgmentRow) -> dict[str, float]:
    return json.loads(row.scores)


def write_one_judge_file(path: Any, server: Any, key_env: str, concurrency: int) -> Any:
    """A judges file with one ``openai`` judge on ``server``: what the crash tests run."""
    path.write_text(
        "judges:\n  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
        f"    base_url: {server.base_url}\n    api_key_env: {key_env}\n"
        f"    concurrency: {concurrency}\n", "utf-8")
    return path
