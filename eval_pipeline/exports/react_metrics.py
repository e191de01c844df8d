"""``react_metrics.txt``: the report's ReAct figures printed the way the ReAct framework
prints them (percentages, "Combined accuracy (both correct)", "Tool Usage Breakdown"),
one block per batch and one for all batches, so its users read the same lines here."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

REACT_METRICS_FILE = "react_metrics.txt"


def _percent(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "n/a (not scored)"
    return f"{float(value) * 100:.2f}%"


def react_metrics_block(row: dict[str, Any]) -> str:
    """One report row's block."""
    title = "All batches" if row["batch"] == "ALL" else f"Batch {row['batch']}"
    lines = [
        f"== {title} ==",
        f"Query-to-Thought accuracy: {_percent(row['query_to_thought_accuracy'])}",
        f"Thought-to-Tool accuracy: {_percent(row['thought_to_tool_accuracy'])}",
        f"Sequence Optimality accuracy: {_percent(row['sequence_optimality_accuracy'])}",
        f"Combined accuracy (both correct): {_percent(row['combined_accuracy'])}",
        "",
        "Tool Usage Breakdown:",
    ]
    usage = json.loads(row["tool_usage"]) if isinstance(row.get("tool_usage"), str) else {}
    if not usage:
        lines.append("  (no tool calls judged)")
    for tool, entry in usage.items():
        share = entry["share_correct"]
        judged = (f"{_percent(share)} correct of {entry['scored']} judged" if share is not None
                  else "not judged")
        lines.append(f"  {tool}: {entry['calls']} uses ({judged})")
    return "\n".join(lines)


def react_metrics_text(report: pd.DataFrame) -> str:
    """Every batch's block, then the overall one."""
    rows = [{str(k): v for k, v in r.items()} for r in report.to_dict("records")]
    ordered = [r for r in rows if r["batch"] != "ALL"] + [r for r in rows if r["batch"] == "ALL"]
    return "\n\n".join(react_metrics_block(r) for r in ordered) + "\n"
