"""``build_report`` as it was before #12.5's cached rows, kept verbatim as the reference the
report from the index must reproduce exactly: every batch's row from its whole table, and
the ``ALL`` row from all tables concatenated in the order given, with the whole metadata."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd

from eval_pipeline.report import REPORT_COLUMNS, _row


def reference_build_report(summaries: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frames = {k: v for k, v in summaries.items() if v is not None and len(v)}
    metas = {k: [json.loads(m) for m in v["evaluation_metadata"]] for k, v in frames.items()}
    rows = [_row(str(k), v, metas[k]) for k, v in sorted(frames.items())]
    if frames:
        rows.append(_row("ALL", pd.concat(list(frames.values()), ignore_index=True),
                         [m for k in frames for m in metas[k]]))
    return pd.DataFrame(rows, columns=REPORT_COLUMNS)
