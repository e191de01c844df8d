"""A judge's SDK clients, one HTTP connection pool each, so no pool grows past a few dozen
connections at a high concurrency.

httpx2's pool (httpcore2) scans every connection it holds on each request and each
response: it asks each idle one whether it has expired, a ``poll`` on its socket and four
layers of ``get_extra_info``, about 12 µs of CPU per connection. One pool kept at 256
connections spends some 2 ms of CPU per request on that scan, as much as the rest of the
request; on a 2-core machine that capped the judges at concurrency 256 (profiled: 168
checks per request against a bare client's 90, which closes connections past the SDK's
100 kept alive and reconnects instead). Upstream knows (encode/httpcore#924, pydantic/
httpx2#1169, open). Splitting the connections over several pools of at most
``SHARD_CONNECTIONS`` keeps every connection alive and each scan short.

Each request leases the pool with the fewest requests in flight, so with at most
``concurrency`` requests in flight no pool holds more than ``ceil(concurrency / shards)``,
the number each keeps alive: no connection is closed and reopened between requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

SHARD_CONNECTIONS = 16
"""Connections per pool. Measured at concurrency 256 (bench/bench_judge_throughput.py): 16
and 32 cost the same CPU per request within noise, both well under one pool of 256."""

C = TypeVar("C")


def shard_count(concurrency: int, per_shard: int = SHARD_CONNECTIONS) -> int:
    return max(1, -(-concurrency // per_shard))


class ClientShards(Generic[C]):
    """``shard_count(concurrency)`` clients built by ``make(keepalive)``."""

    def __init__(self, make: Callable[[int], C], concurrency: int,
                 per_shard: int = SHARD_CONNECTIONS) -> None:
        count = shard_count(concurrency, per_shard)
        keepalive = -(-max(concurrency, 1) // count)
        self.clients: list[C] = [make(keepalive) for _ in range(count)]
        self._in_flight = [0] * count

    @property
    def first(self) -> C:
        """The client for work that is not a judge request (batch files, probes)."""
        return self.clients[0]

    @contextmanager
    def lease(self) -> Iterator[C]:
        """The client whose pool has the fewest requests in flight, for one request."""
        counts = self._in_flight
        index = counts.index(min(counts)) if len(counts) > 1 else 0
        counts[index] += 1
        try:
            yield self.clients[index]
        finally:
            counts[index] -= 1

    async def aclose(self, close: Callable[[C], Awaitable[None]]) -> None:
        for client in self.clients:
            await close(client)
