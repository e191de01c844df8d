"""The summaries' index that ``evaluation_report`` reads (#12.5).

Derived from each batch's ``trajectory_summaries`` when it is written (by the IO manager,
see :mod:`eval_pipeline.defs.pipeline.partition_index`): the batch's report row, and the
compact per-trajectory figures the ``ALL`` row needs (:class:`eval_pipeline.report.
BatchReport`). A report over N batches of which k were written since the last one reads the
index once, recomputes no batch row (the k were computed as they were written; only batches
the index cannot answer for are derived from their files) and computes the ``ALL`` row from
the figures. The report equals :func:`eval_pipeline.report.build_report` over the batches'
own tables (the tests compare them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eval_pipeline.defs.pipeline.partition_index import (
    PARTITION,
    IndexedPartitions,
    PartitionIndexer,
)
from eval_pipeline.report import (
    REPORT_INPUT_COLUMNS,
    batch_report,
    report_from_batches,
    row_from_json,
    row_to_json,
)

ROWS = "report_rows"
"""Index table: one row per batch, its report row as JSON (``null`` for an empty batch)."""
FIGURES = "report_figures"
"""Index table: one row per trajectory, the figures the ``ALL`` row reads."""
ROW = "report_row"


def derive_report_tables(summaries: pd.DataFrame, batch: str) -> dict[str, pd.DataFrame]:
    """A batch's index tables from its summaries (the report's input columns)."""
    part = batch_report(batch, summaries)
    return {
        ROWS: pd.DataFrame({ROW: [row_to_json(part.row) if part is not None else "null"]}),
        FIGURES: part.figures if part is not None else pd.DataFrame(),
    }


REPORT_INDEXER = PartitionIndexer(columns=tuple(REPORT_INPUT_COLUMNS),
                                  derive=derive_report_tables, marker=ROWS, others=(FIGURES,))
REPORT_INDEXER_REF = f"{__name__}:REPORT_INDEXER"
"""How ``trajectory_summaries`` names its indexer (asset metadata) and the report its input."""


def report_from_index(loaded: IndexedPartitions) -> pd.DataFrame:
    """The report from the index of the batches loaded: their rows, and the ``ALL`` row over
    their figures in load order (the order the report concatenated the batches in)."""
    rows_table = loaded.tables[ROWS]
    rows = {str(batch): row_from_json(text)
            for batch, text in zip(rows_table[PARTITION], rows_table[ROW], strict=True)
            if text != "null"}
    figures = loaded.tables[FIGURES]
    if len(figures):
        position = {key: i for i, key in enumerate(loaded.keys)}
        order = np.argsort(np.array([position[str(p)] for p in figures[PARTITION]]),
                           kind="stable")
        figures = figures.take(order).drop(columns=[PARTITION]).reset_index(drop=True)
    return report_from_batches(rows, [figures])
