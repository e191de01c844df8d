"""pandas pieces kept across a run's batches, joined as they come (#12.3).

An export that keeps one DataFrame or Series per batch until the end of a run holds
thousands of small pandas objects on a large drop. Their overhead (an index, a block
manager, a few KiB each), and the heap pages they pin between each batch's large
short-lived allocations, made the CLI's memory grow with the drop: 88 MiB of live Python
objects and about 300 MiB of RSS after 1,053 batches of a 200 MB drop, measured with
tracemalloc. :class:`Pieces` joins them every :data:`JOIN_EVERY` additions, so a run holds
a few objects whatever its size.

The result is the one ``pd.concat(pieces, ignore_index=True)`` would give: every piece
is read in the concatenation's dtypes (``exact`` reads), so joining in steps gives the
same values and dtypes as joining once.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import pandas as pd

JOIN_EVERY = 64
"""Pieces held before they are joined into one: each join copies what was kept so far, so
a run of N batches copies about N / JOIN_EVERY times its kept rows (small: a few columns
per trajectory)."""

PandasT = TypeVar("PandasT", pd.DataFrame, pd.Series)


class Pieces(Generic[PandasT]):
    """DataFrames (or Series) added batch by batch, read back as their concatenation."""

    def __init__(self, every: int | None = None) -> None:
        self._every = JOIN_EVERY if every is None else every
        self._pieces: list[PandasT] = []

    def append(self, piece: PandasT) -> None:
        self._pieces.append(piece)
        if len(self._pieces) >= self._every:
            self._pieces = [pd.concat(self._pieces, ignore_index=True)]

    def __bool__(self) -> bool:
        """Whether any piece was added (as a list of them would be true)."""
        return bool(self._pieces)

    def joined(self) -> PandasT | None:
        """Every piece in order, one index 0..n-1; None when none was added."""
        if not self._pieces:
            return None
        if len(self._pieces) == 1:
            return self._pieces[0]
        return pd.concat(self._pieces, ignore_index=True)
