"""The gate every request of one judge passes: in-flight slots, per-minute limits, 429s.

One :class:`CallLimiter` per judge per run (the asyncio primitives bind to the running event
loop). A request holds a slot only while it is in flight, never while it waits to retry, so
with enough independent work the provider sees ``concurrency`` requests at all times.

- **Priorities.** Waiting requests are served smallest priority first (ties first come,
  first served). The runner gives a clip chain's request the negative number of requests
  its chain still has to make, so the longest chains, the critical path of a run, never
  queue behind independent requests.
- **Per-minute limits.** Providers meter requests and tokens per minute; aiolimiter's leaky
  buckets allow a burst up to the per-minute rate and then pace, as the providers' own
  limiters do.
- **Adaptive concurrency.** A 429 halves the effective concurrency (never below 1); it grows
  back by one after ``grow_after`` successes in a row, up to the configured concurrency.
  Only one halving per round of requests: 429s from requests sent before the last halving
  do not halve again, so one burst of concurrent 429s does not collapse it to 1.
- **Retry-After.** A 429 that says how long to wait pauses the whole judge that long, not
  just the request that got it: the others would only earn 429s of their own.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiolimiter import AsyncLimiter


@dataclass
class Ticket:
    """One granted slot; ``epoch`` is the concurrency generation it was granted in."""

    epoch: int


class CallLimiter:
    def __init__(self, concurrency: int = 4, requests_per_minute: float | None = None,
                 tokens_per_minute: float | None = None, period_s: float = 60.0,
                 grow_after: int = 10) -> None:
        """``period_s`` is the metering window; only tests shorten it."""
        self.concurrency = max(1, concurrency)
        self.limit = self.concurrency  # the effective concurrency, lowered by 429s
        self.grow_after = max(1, grow_after)
        self.in_flight = 0
        self.rate_limited = 0  # 429s reported
        self.halvings = 0
        self.lowest_limit = self.limit
        self._epoch = 0
        self._streak = 0
        self._paused_until = 0.0
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._requests = (AsyncLimiter(requests_per_minute, period_s)
                          if requests_per_minute else None)
        self._tokens = AsyncLimiter(tokens_per_minute, period_s) if tokens_per_minute else None

    # -- slots -----------------------------------------------------------------------
    async def _acquire(self, priority: float) -> None:
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # granted just as we were cancelled: hand it on
            raise

    def _release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.limit:
            _, _, future = heapq.heappop(self._waiters)
            if future.done():  # cancelled while waiting
                continue
            self.in_flight += 1
            future.set_result(None)

    @asynccontextmanager
    async def slot(self, estimated_tokens: int = 0, priority: float = 0.0
                   ) -> AsyncIterator[Ticket]:
        """Hold one in-flight slot, granted by priority, once the per-minute buckets have
        room for the call and any Retry-After pause is over."""
        await self._acquire(priority)
        try:
            ticket = Ticket(self._epoch)
            while (pause := self._paused_until - time.monotonic()) > 0:
                await asyncio.sleep(pause)
            if self._requests is not None:
                await self._requests.acquire(1)
            if self._tokens is not None:
                # A call larger than the whole per-minute allowance may still go, alone.
                await self._tokens.acquire(min(float(estimated_tokens),
                                               self._tokens.max_rate))
            yield ticket
        finally:
            self._release()

    # -- feedback --------------------------------------------------------------------
    def succeeded(self) -> None:
        """The provider answered: after ``grow_after`` in a row, one more slot."""
        self._streak += 1
        if self._streak >= self.grow_after and self.limit < self.concurrency:
            self.limit += 1
            self._streak = 0
            self._wake()

    def rate_limited_by(self, ticket: Ticket, retry_after: float | None) -> None:
        """A 429 on a request sent with ``ticket``: halve once per round, and pause the
        judge for the server's Retry-After."""
        self.rate_limited += 1
        self._streak = 0
        if ticket.epoch == self._epoch and self.limit > 1:
            self.limit = max(1, self.limit // 2)
            self.lowest_limit = min(self.lowest_limit, self.limit)
            self.halvings += 1
            self._epoch += 1
        if retry_after:
            self._paused_until = max(self._paused_until, time.monotonic() + retry_after)
