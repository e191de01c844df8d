"""A circuit breaker: stop calling a provider that keeps failing.

Without one, a provider outage turns into thousands of doomed calls (each retried) and a
batch of failed rows. The breaker opens after ``threshold`` consecutive calls that failed
even after their retries, or at once on a failure no retry can fix (bad key, unknown
model). Rate limiting alone never opens it: a 429 is back-pressure, handled by waiting.
"""

from __future__ import annotations


class CircuitBreaker:
    def __init__(self, threshold: int = 3) -> None:
        self.threshold = max(1, threshold)
        self.consecutive_failures = 0
        self.reason: str | None = None

    @property
    def is_open(self) -> bool:
        return self.reason is not None

    def record_success(self) -> None:
        self.consecutive_failures = 0

    def record_failure(self, error: str, fatal: bool = False) -> None:
        self.consecutive_failures += 1
        if self.reason is None and (fatal or self.consecutive_failures >= self.threshold):
            self.reason = (
                f"{error} (fatal, retrying cannot help)" if fatal else
                f"{self.consecutive_failures} consecutive calls failed; last error: {error}"
            )
