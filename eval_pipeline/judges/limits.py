"""Concurrency and per-minute request/token limits for one judge's calls.

Providers meter requests and tokens per minute; staying under both is cheaper than
bouncing off 429s. aiolimiter's leaky buckets allow a burst up to the per-minute rate and
then pace, which is what the providers' own limiters do. Limiters bind to the running
event loop, so one is built per run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiolimiter import AsyncLimiter


class CallLimiter:
    def __init__(self, concurrency: int = 4, requests_per_minute: float | None = None,
                 tokens_per_minute: float | None = None, period_s: float = 60.0) -> None:
        """``period_s`` is the metering window; only tests shorten it."""
        self.concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._requests = (AsyncLimiter(requests_per_minute, period_s)
                          if requests_per_minute else None)
        self._tokens = AsyncLimiter(tokens_per_minute, period_s) if tokens_per_minute else None

    @asynccontextmanager
    async def slot(self, estimated_tokens: int = 0) -> AsyncIterator[None]:
        """Hold one in-flight slot after the per-minute buckets have room for the call."""
        if self._requests is not None:
            await self._requests.acquire(1)
        if self._tokens is not None:
            # A call larger than the whole per-minute allowance may still go, alone.
            await self._tokens.acquire(min(float(estimated_tokens), self._tokens.max_rate))
        async with self._slots:
            yield
