"""Pieces kept across batches read back as their one concatenation (#12.3)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from eval_pipeline.exports.pieces import Pieces


def frames(n: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        rows = int(rng.integers(0, 4))
        out.append(pd.DataFrame({
            "batch": pd.Series([f"b{i:03d}"] * rows, dtype="str"),
            "score": rng.random(rows),
            "clips": pd.Series(rng.integers(0, 9, rows), dtype="Int64"),
        }, index=range(100 * i, 100 * i + rows)))
    return out


def test_pieces_joined_in_steps_equal_one_concatenation() -> None:
    pieces = frames(50)
    kept: Pieces[pd.DataFrame] = Pieces(every=4)
    for piece in pieces:
        kept.append(piece)
    assert len(kept._pieces) < 4  # joined as they came, not 50 objects
    joined = kept.joined()
    assert joined is not None
    pd.testing.assert_frame_equal(joined, pd.concat(pieces, ignore_index=True),
                                  check_exact=True)


def test_series_pieces_and_the_empty_case() -> None:
    empty: Pieces[pd.Series] = Pieces(every=2)
    assert not empty and empty.joined() is None
    series = [f["score"] for f in frames(9)]
    for s in series:
        empty.append(s)
    assert empty
    got = empty.joined()
    assert got is not None
    pd.testing.assert_series_equal(got, pd.concat(series, ignore_index=True))
