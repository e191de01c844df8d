"""Span annotations (as :func:`eval_pipeline.exports.phoenix.span_annotations` builds them)
logged to a Phoenix server.

``sync=True`` throughout: Phoenix then answers each chunk with the annotations' ids, and a
span it does not know is an HTTP 404 instead of an annotation dropped in silence. An
annotation is keyed by (name, span, identifier), so logging the same rows again updates
them: a rerun leaves no duplicates.
"""

from __future__ import annotations

import json

import pandas as pd

from eval_pipeline.exports.common import records
from eval_pipeline.phoenix.connection import PhoenixConnection

CHUNK = 100


OPTIONAL = ("label", "score", "explanation", "metadata", "identifier")


def sendable(frame: pd.DataFrame) -> list[pd.DataFrame]:
    """The rows as the client reads them, in groups with the same fields present: a field a
    row lacks is left out of its group's frame, never sent as pandas' NaN (which the client
    would send as the label "nan" or a NaN score the JSON encoder refuses); metadata as
    dicts. The client iterates rows with ``iterrows``, which may turn a ``None`` in an
    object column back into NaN, so no missing value is left in a frame at all."""
    groups: dict[tuple[str, ...], list[dict[str, object]]] = {}
    for row in records(frame):
        meta = row.get("metadata")
        row["metadata"] = json.loads(meta) if isinstance(meta, str) and meta else None
        present = tuple(f for f in OPTIONAL if row.get(f) not in (None, "", {}))
        groups.setdefault(present, []).append(
            {k: row[k] for k in ("span_id", "name", "annotator_kind", *present)})
    return [pd.DataFrame(rows) for rows in groups.values()]


def log_annotations(connection: PhoenixConnection, frame: pd.DataFrame) -> int:
    """Log every row; the number Phoenix confirmed. Raises
    :class:`~eval_pipeline.phoenix.connection.PhoenixError` (one line) on any failure."""
    if not len(frame):
        return 0
    client = connection.client()
    written = 0
    for rows in sendable(frame):
        for start in range(0, len(rows), CHUNK):
            part = rows.iloc[start:start + CHUNK]
            with connection.errors("logging span annotations"):
                inserted = client.spans.log_span_annotations_dataframe(dataframe=part,
                                                                       sync=True)
            written += len(inserted or [])
    return written


def read_annotations(connection: PhoenixConnection, span_ids: list[str],
                     names: list[str] | None = None) -> pd.DataFrame:
    """The annotations on ``span_ids`` (index ``span_id``; ``annotation_name``,
    ``identifier``, ``result.label``, ``result.score``, ``result.explanation``,
    ``metadata``, ...), as Phoenix's UI shows them beside the traces."""
    client = connection.client()
    return connection.call("reading span annotations", lambda: (
        client.spans.get_span_annotations_dataframe(
            span_ids=span_ids, project_identifier=connection.project,
            include_annotation_names=names)))
