"""A spend cap for one judge within one run.

Before each call the worst case it can cost (estimated input plus ``max_tokens`` output) is
reserved; the actual cost replaces the reservation when the call returns. Reserving the
worst case is what makes the cap a cap: in-flight calls can never push spend past it.
A call that does not fit waits for in-flight calls to settle (they usually cost far less
than reserved) and is refused only if it cannot fit even with nothing in flight.
"""

from __future__ import annotations

import asyncio


class BudgetGuard:
    def __init__(self, budget_usd: float | None) -> None:
        self.budget_usd = budget_usd
        self.spent_usd = 0.0
        self.reserved_usd = 0.0
        self._changed: asyncio.Condition | None = None

    def _fits(self, amount: float) -> bool:
        return self.budget_usd is None or (
            self.spent_usd + self.reserved_usd + amount <= self.budget_usd)

    async def reserve(self, worst_case_usd: float) -> bool:
        """Reserve ``worst_case_usd``; False means the call must not be made."""
        if self.budget_usd is None:
            return True
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            while not self._fits(worst_case_usd):
                if self.reserved_usd <= 0:
                    return False
                await self._changed.wait()
            self.reserved_usd += worst_case_usd
            return True

    async def settle(self, reserved_usd: float, actual_usd: float) -> None:
        self.spent_usd += actual_usd
        if self.budget_usd is None:
            return
        self.reserved_usd = max(0.0, self.reserved_usd - reserved_usd)
        if self.reserved_usd < 1e-12:
            self.reserved_usd = 0.0
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    def refusal_reason(self) -> str:
        return (f"budget cap reached: ${self.spent_usd:.4f} spent of "
                f"${self.budget_usd or 0:.4f}; call not made")
