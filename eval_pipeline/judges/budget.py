"""A spend cap for one judge within one run.

Before each call the worst case it can cost (estimated input plus ``max_tokens`` output) is
reserved; once spend plus reservations would pass the cap the call is not made. The actual
cost replaces the reservation when the call returns. Reserving the worst case is what makes
the cap a cap: in-flight calls can never push the spend past it.
"""

from __future__ import annotations

import threading


class BudgetGuard:
    def __init__(self, budget_usd: float | None) -> None:
        self.budget_usd = budget_usd
        self.spent_usd = 0.0
        self.reserved_usd = 0.0
        self.refused = 0
        self._lock = threading.Lock()

    def try_reserve(self, worst_case_usd: float) -> bool:
        with self._lock:
            if self.budget_usd is not None and (
                self.spent_usd + self.reserved_usd + worst_case_usd > self.budget_usd
            ):
                self.refused += 1
                return False
            self.reserved_usd += worst_case_usd
            return True

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        with self._lock:
            self.reserved_usd = max(0.0, self.reserved_usd - reserved_usd)
            self.spent_usd += actual_usd

    def refusal_reason(self) -> str:
        return (f"budget cap reached: ${self.spent_usd:.4f} spent of "
                f"${self.budget_usd:.4f}; call not made")
