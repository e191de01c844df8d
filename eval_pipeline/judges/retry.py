"""Retry transient provider failures: backoff with jitter, Retry-After, and two budgets.

A failure (5xx, timeout, connection reset) is retried at most ``max_retries`` times. A 429
is not a failure but back-pressure: it does not use up ``max_retries`` (a busy provider
would otherwise turn a slow run into failed rows); its retries are bounded instead by
``rate_limit_wait_s``, the total time one request may spend waiting on 429s.

The server's Retry-After (or retry-after-ms) wins when present; otherwise the wait is
``base * 2**n`` scaled by a random factor in [0.5, 1] (so concurrent retries spread out
without ever retrying at once), capped at ``max_delay_s``. A 5xx whose Retry-After is
longer than ``max_retry_after_s`` is not waited out: the call fails (and counts towards the
breaker) instead of stalling the step for minutes.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, Field

from eval_pipeline.judges.errors import TransientJudgeError


class RetryPolicy(BaseModel):
    max_retries: int = Field(default=4, ge=0, description="Retries after a failure (not a 429)")
    base_delay_s: float = Field(default=0.5, ge=0)
    max_delay_s: float = Field(default=30.0, ge=0)
    max_retry_after_s: float = Field(default=120.0, ge=0)
    rate_limit_wait_s: float = Field(
        default=600.0, ge=0, description="Total seconds one request may wait on 429s")

    def backoff(self, n: int) -> float:
        ceiling = min(self.base_delay_s * (2.0 ** n), self.max_delay_s)
        return ceiling * (0.5 + 0.5 * random.random())

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number ``attempt + 1`` after a failure; None means
        give up."""
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after_s else None
        return self.backoff(attempt)


class RetryBudget:
    """One request's retries: decides, failure by failure, how long to wait or to give up."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.failures = 0  # failures other than 429
        self.rate_limits = 0
        self.rate_waited = 0.0

    def wait_after(self, exc: TransientJudgeError) -> float | None:
        """Seconds to wait before trying again, or None to give up (the error then says
        how many attempts were made)."""
        policy = self.policy
        wait: float | None
        if exc.rate_limited:
            wait = (exc.retry_after if exc.retry_after is not None
                    else policy.backoff(self.rate_limits))
            self.rate_limits += 1
            if self.rate_waited + wait > policy.rate_limit_wait_s:
                exc.args = (f"{exc.args[0]} (rate limited: gave up after waiting "
                            f"{self.rate_waited:.0f}s, rate_limit_wait_s "
                            f"{policy.rate_limit_wait_s:.0f}s)",)
                wait = None
            else:
                self.rate_waited += wait
        else:
            wait = (policy.delay(self.failures, exc.retry_after)
                    if self.failures < policy.max_retries else None)
            self.failures += 1
        attempts = self.failures + self.rate_limits
        if wait is None and attempts > 1:
            exc.args = (f"{exc.args[0]} (after {attempts} attempts)",)
        return wait
