"""Retry transient provider failures with exponential backoff, full jitter and Retry-After.

The server's Retry-After (or retry-after-ms) wins when present; otherwise the wait is
``base * 2**attempt`` scaled by a random factor in [0.5, 1], capped. A Retry-After longer
than ``max_retry_after_s`` is not waited out: the call fails (and counts towards the
breaker) instead of stalling the step for minutes.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, Field

from eval_pipeline.judges.errors import TransientJudgeError

T = TypeVar("T")


class RetryPolicy(BaseModel):
    max_retries: int = Field(default=4, ge=0)
    base_delay_s: float = Field(default=0.5, ge=0)
    max_delay_s: float = Field(default=30.0, ge=0)
    max_retry_after_s: float = Field(default=120.0, ge=0)

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number ``attempt + 1``; None means give up."""
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after_s else None
        ceiling = min(self.base_delay_s * (2.0 ** attempt), self.max_delay_s)
        return ceiling * (0.5 + 0.5 * random.random())


async def with_retries(call: Callable[[], Awaitable[T]], policy: RetryPolicy,
                       should_stop: Callable[[], bool] = lambda: False,
                       on_retry: Callable[[TransientJudgeError], None] | None = None) -> T:
    """Run ``call`` until it succeeds, fails for good, or ``should_stop`` turns true."""
    attempt = 0
    while True:
        try:
            return await call()
        except TransientJudgeError as exc:
            wait = policy.delay(attempt, exc.retry_after)
            if attempt >= policy.max_retries or wait is None or should_stop():
                if attempt:
                    exc.args = (f"{exc.args[0]} (after {attempt + 1} attempts)",)
                raise
            if on_retry is not None:
                on_retry(exc)
            attempt += 1
            await asyncio.sleep(wait)
