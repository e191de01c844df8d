"""The records of ``evaluated.jsonl``, drop-in for scripts written against the original tool.

The original writes ``full_response_with_evaluations`` in its single-model layout and
``full_response_with_evaluation`` (no s) in multi-model mode and in its real output files,
and ``num_clips`` beside ``total_clips`` in ``evaluation_metadata``. Both spellings are
written (the same text), and the metadata keys come in the order of the original's files
(``num_clips``, ``num_models``, ``model_names``, ``total_clips``, ...), so a script that
reads either layout keeps working.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_LEADING_KEYS = ("num_clips", "num_models", "model_names", "total_clips")


def dataeva_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``evaluation_metadata`` with ``num_clips`` added and the original's key order."""
    out: dict[str, Any] = {"num_clips": metadata.get("total_clips")}
    out.update({k: metadata[k] for k in _LEADING_KEYS[1:] if k in metadata})
    out.update({k: v for k, v in metadata.items() if k not in out})
    return out


def evaluated_record(row: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """One output line: the input ``fields``, both response keys, the metadata."""
    record = {k: row.get(k) for k in fields}
    full = row["full_response_with_evaluations"]
    record["full_response_with_evaluations"] = full
    record["full_response_with_evaluation"] = full
    record["evaluation_metadata"] = dataeva_metadata(json.loads(row["evaluation_metadata"]))
    return record
