"""What several exports share: plain records from tables, the trajectory facts they key on,
and file names that are safe on every file system."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from eval_pipeline.frame_columns import TEXT_DTYPE, array_values, column_array

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def records(table: pd.DataFrame | None, columns: Sequence[str] | None = None
            ) -> list[dict[str, Any]]:
    """Rows as plain dicts with pandas' missing values as None (JSON and CSV need None).

    The values ``to_dict("records")`` gives, read one column at a time (:func:`_values`):
    selecting the columns and ``to_dict`` were a fifth of a run's exports (#12)."""
    if table is None or not len(table):
        return []
    names = [c for c in table.columns if columns is None or c in columns]
    keys = [str(name) for name in names]
    values = [_values(table, name) for name in names]
    return [{k: None if _missing(v) else v for k, v in zip(keys, row, strict=True)}
            for row in zip(*values, strict=True)]


def _values(table: pd.DataFrame, name: str) -> list[Any]:
    """One column's values as ``to_dict("records")`` gives them: iterated as the column
    iterates (numbers and booleans of NumPy columns as Python scalars, texts as ``str`` or
    NaN), then, in object and extension columns, NumPy scalars made Python ones
    (:func:`_native`, as ``to_dict`` makes them)."""
    array = column_array(table, name)
    if isinstance(array, np.ndarray):
        if array.dtype.kind in "biuf":
            return array.tolist()
        if array.dtype.kind != "O":
            return list(table[name])  # timestamps and durations: as iterating gives them
        return [_native(v) for v in array.tolist()]
    if array.dtype == TEXT_DTYPE:
        return array_values(array)  # str or NaN, which _native leaves as they are
    return [_native(v) for v in table[name]]


def _native(value: Any) -> Any:
    """pandas' ``maybe_box_native`` (private), which ``to_dict`` applies to the values of
    object and extension columns: NumPy numbers and booleans as Python ones, NumPy dates
    and durations as pandas', ``pd.NA`` as None; anything else as it is."""
    if isinstance(value, np.generic):
        if isinstance(value, np.floating):
            return float(value)
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.datetime64):
            return pd.Timestamp(value)
        if isinstance(value, np.timedelta64):
            return pd.Timedelta(value)
    return None if value is pd.NA else value


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or value is pd.NA


def safe_name(text: str) -> str:
    """A file-name part: a model such as ``Qwen/Qwen2.5-7B`` or a task id with spaces or
    slashes must not make a sub-folder or an unreadable name."""
    return _UNSAFE.sub("_", text).strip("_") or "_"


class TrajectoryInfo(BaseModel):
    """The trajectory facts every export keys its rows on."""

    trajectory_id: str
    batch: str = ""
    task_id: str = ""
    trace_id: str | None = None
    step_span_ids: list[str | None] = []
    root_span_id: str | None = None
    """The trace's root span, where trace-level results go back to Phoenix. Tables parsed
    before it was recorded fall back to the first step's span (the root's when the root
    carried the task, as agent frameworks' root spans do)."""


def trajectory_info(trajectories: pd.DataFrame | None) -> dict[str, TrajectoryInfo]:
    """By trajectory id; the trace id and per-step span ids a span export carried (in
    ``extra``), none for sources without them."""
    out: dict[str, TrajectoryInfo] = {}
    for row in records(trajectories, ["trajectory_id", "batch", "task_id", "extra"]):
        extra = _json_object(row.get("extra"))
        trace = extra.get("trace_id")
        spans = extra.get("step_span_ids")
        steps = [str(s) if s else None for s in spans] if isinstance(spans, list) else []
        root = extra.get("root_span_id") or (steps[0] if steps else None)
        out[str(row["trajectory_id"])] = TrajectoryInfo(
            trajectory_id=str(row["trajectory_id"]), batch=str(row.get("batch") or ""),
            task_id=str(row.get("task_id") or ""),
            trace_id=str(trace) if trace else None,
            step_span_ids=steps, root_span_id=str(root) if root else None)
    return out


def _json_object(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        try:
            loaded = json.loads(value)
        except json.JSONDecodeError:
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return {}


def clip_span_ids(clips: pd.DataFrame | None, info: Mapping[str, TrajectoryInfo],
                  trajectories: pd.DataFrame | None) -> dict[tuple[str, int], str]:
    """The span each clip is judged on: the span that made its tool call (the LLM span
    that chose the tool, as the ReAct framework logs its evaluations; a TOOL span when the
    call is only seen there), or for the final clip the span of its last step. Only for
    trajectories whose source carried span ids."""
    kinds = _step_kinds(trajectories, info)
    out: dict[tuple[str, int], str] = {}
    for clip in records(clips, ["trajectory_id", "clip_index", "step_start", "step_end"]):
        tid = str(clip["trajectory_id"])
        spans = info[tid].step_span_ids if tid in info else []
        if not spans:
            continue
        first, last = int(clip["step_start"]), int(clip["step_end"])
        inside = range(first, min(last, len(spans)))
        step_kinds = kinds.get(tid, [])
        call = next((i for i in inside if i < len(step_kinds)
                     and step_kinds[i] == "tool_call" and spans[i]), None)
        chosen = call if call is not None else next(
            (i for i in reversed(inside) if spans[i]), None)
        if chosen is not None:
            span = spans[chosen]
            if span:
                out[(tid, int(clip["clip_index"]))] = span
    return out


def _step_kinds(trajectories: pd.DataFrame | None, info: Mapping[str, TrajectoryInfo]
                ) -> dict[str, list[str]]:
    if trajectories is None or "steps" not in trajectories.columns:
        return {}
    out: dict[str, list[str]] = {}
    for tid, steps in zip(trajectories["trajectory_id"].tolist(),
                          trajectories["steps"].tolist(), strict=True):
        if str(tid) in info and info[str(tid)].step_span_ids and steps is not None:
            out[str(tid)] = [str(s["kind"]) for s in steps]
    return out


def with_span_ids(clips: pd.DataFrame, trajectories: pd.DataFrame | None) -> pd.DataFrame:
    """``clips`` with ``trace_id`` and ``span_id`` (the span the clip is judged on, as
    :func:`clip_span_ids` picks it): the Phoenix ids stay on the clips, so a clip can be
    found in Phoenix and its evaluations written back. None for sources without ids; a
    batch without any is not decoded at all."""
    out = clips.copy()
    has_ids = (trajectories is not None and "extra" in trajectories.columns
               and trajectories["extra"].astype(str).str.contains(
                   '"trace_id"', regex=False).any())
    if not len(clips) or not has_ids:
        out["trace_id"] = pd.Series([None] * len(clips), index=clips.index, dtype=object)
        out["span_id"] = pd.Series([None] * len(clips), index=clips.index, dtype=object)
        return out
    info = trajectory_info(trajectories)
    spans = clip_span_ids(clips, info, trajectories)
    tids, indices = clips["trajectory_id"].tolist(), clips["clip_index"].tolist()
    out["trace_id"] = pd.Series([info[str(t)].trace_id if str(t) in info else None
                                 for t in tids], index=clips.index, dtype=object)
    out["span_id"] = pd.Series([spans.get((str(t), int(i))) for t, i in
                                zip(tids, indices, strict=True)], index=clips.index,
                               dtype=object)
    return out
