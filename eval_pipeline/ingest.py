"""Batch-level table builders: file -> raw table -> preprocessed table -> clips.

Plain functions over DataFrames so the Dagster assets stay thin and the same code runs in
tests, the CLI and the UI.
"""

from __future__ import annotations

import fnmatch
import json
import numbers
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, Field

from eval_pipeline.clips import Clip, ClipRow, segment_rows
from eval_pipeline.formats import ArrowParseResult, parse_file, row_reparser
from eval_pipeline.judges.base import ClipTask, ClipView
from eval_pipeline.models import (
    QuarantinedRecord,
    Step,
    Trajectory,
    steps_from_rows,
    steps_to_rows,
)
from eval_pipeline.preprocess import (
    PreprocessConfig,
    PreprocessStats,
    Screening,
    screen,
    summarize,
)
from eval_pipeline.splitting import BatchManifest, drop_fingerprint
from eval_pipeline.steps_column import steps_array, with_arrow_steps
from eval_pipeline.tool_registry import ToolRegistry, default_registry, load_registry

QUARANTINE_COLUMNS = list(QuarantinedRecord.model_fields)
REPORT_COLUMNS = [
    "trajectory_id", "batch", "task_id", "source_file", "source_line", "reason", "detail",
    "tool_call_count", "duplicate_calls",
]
PREPROCESSED_EXTRA = [
    "tool_call_count", "has_duplicates", "format_corrected", "preprocessing_flags",
    "preprocessing_metadata", "beta_threshold",
]
CLIP_COLUMNS = ["trajectory_id", "batch", "task_id", *Clip.model_fields]


def _unchanged_drop(manifest: BatchManifest) -> bool:
    drop = Path(manifest.drop_file)
    return drop.is_file() and drop_fingerprint(drop) == manifest.fingerprint


class ReadOptions(BaseModel):
    """How input files are read: forced or per-file formats, and the tool registry."""

    input_format: str | None = Field(default=None, description="Force one format for all.")
    format_overrides: dict[str, str] = Field(
        default_factory=dict, description="Glob on the drop's name or path -> format name.")
    tools_file: str | None = Field(
        default=None, description="A tools.yaml replacing the packaged tool registry.")

    def registry(self) -> ToolRegistry:
        return _registry(self.tools_file)

    def format_for(self, drop: Path) -> str | None:
        if self.input_format:
            return self.input_format
        for pattern, name in self.format_overrides.items():
            if fnmatch.fnmatch(drop.name, pattern) or fnmatch.fnmatch(drop.as_posix(), pattern):
                return name
        return None


@lru_cache(maxsize=8)
def _registry(tools_file: str | None) -> ToolRegistry:
    return load_registry(tools_file) if tools_file else default_registry()


def read_batch(path: Path, manifest: BatchManifest | None, batch: str,
               options: ReadOptions | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Parse a batch file; line numbers and file names point back at the user's drop.

    The table's ``steps`` column is Arrow (``STEPS_DTYPE``) for every format: the XML-tag
    format builds it in Arrow (``formats/xml_arrow.py``), with its responses; any other
    format's step rows are converted once here."""
    options = options or ReadOptions()
    drop = Path(manifest.drop_file) if manifest else path
    source_file = drop.name
    if manifest and manifest.lines is None and _unchanged_drop(manifest):
        # A whole-file batch is read from the drop itself, where its sibling files are.
        path = drop
    parsed = parse_file(path, batch, format_name=options.format_for(drop),
                        registry=options.registry(), source_file=source_file, as_rows=True,
                        arrow_steps=True)
    lines = manifest.lines if manifest else None

    def original(line: int) -> int:
        return lines[line - 1] if lines and 0 < line <= len(lines) else line

    raw = parsed.rows
    if lines:
        # Ids and lines of a split batch point at the drop, so they survive re-splitting.
        stem = Path(source_file).stem
        for row in raw:
            line = original(row["source_line"])
            digest = row["trajectory_id"].rsplit(":", 1)[-1]
            row["source_line"] = line
            row["trajectory_id"] = f"{stem}:{line}:{digest}"
    quarantined = [q.model_copy(update={"source_line": original(q.source_line)}).model_dump()
                   for q in parsed.quarantined]
    arrow = parsed if isinstance(parsed, ArrowParseResult) else None
    frame = _frame(raw, list(Trajectory.model_fields),
                   {} if arrow is None else {"steps": arrow.steps,
                                             "raw_response": arrow.responses})
    return (with_arrow_steps(frame),
            pd.DataFrame(quarantined, columns=QUARANTINE_COLUMNS))


_STR = pd.Series([""]).dtype
"""pandas' default string dtype (``str``), which a column of Python strings gets."""


def _frame(rows: list[dict[str, object]], columns: list[str],
           arrow: Mapping[str, pa.ChunkedArray | None] | None = None) -> pd.DataFrame:
    """A DataFrame from row dicts, handed to pandas column by column: the same frame as
    ``pd.DataFrame(rows, columns=...)`` without pandas probing every dict (checked equal on
    the corpora; up to 2 x faster on the tau-bench file, equal on small ones). ``arrow``:
    columns already built in Arrow (the steps, the responses), taken as they are instead
    of the rows' values: the ``steps`` one as ``STEPS_DTYPE``, a string one as ``str``."""
    if not rows:  # empty lists would make float columns; the empty table keeps object ones
        return pd.DataFrame([], columns=columns)
    given = {c: a for c, a in (arrow or {}).items() if a is not None}
    data: dict[str, Any] = {}
    for c in columns:
        if c == "steps" and c in given:
            data[c] = pd.arrays.ArrowExtensionArray(steps_array(given[c]))
        elif c in given:
            # pandas 3 takes the dtype (its stubs do not say so yet): ``str``, not ``string``.
            data[c] = pd.arrays.ArrowStringArray(given[c], dtype=_STR)  # type: ignore[call-arg]
        else:
            data[c] = [r.get(c) for r in rows]
    return pd.DataFrame(data, columns=columns)


def _na_to_none(value: object) -> object:
    return None if isinstance(value, float) and value != value else value


_STEP_KEYS = frozenset(Step.model_fields)


def _step_rows(value: object) -> list[dict[str, Any]]:
    """A ``steps`` cell as the list of step rows it holds. Rows with exactly the Step
    fields (what ``Trajectory.to_row`` wrote, in memory or read back from Parquet) are
    taken as they are; anything else (an older table) goes through the Step model."""
    rows = list(value) if value is not None else []  # type: ignore[call-overload]
    if all(isinstance(r, dict) and r.keys() == _STEP_KEYS for r in rows):
        return rows
    return steps_to_rows(steps_from_rows(rows))


def preprocess_batch(raw: pd.DataFrame, config: PreprocessConfig, registry: ToolRegistry
                     ) -> tuple[pd.DataFrame, pd.DataFrame, PreprocessStats]:
    """The three rules on every row, read column by column.

    A kept row is the raw row with the preprocessing columns added (and, where the tags
    were repaired, the repaired response and its re-cut steps): the same values as a round
    trip through the Trajectory model gave, without one (#12.1; ``test_stage_digests``).
    The responses stay Arrow strings where they were: a kept response is taken from the
    raw column, a repair that only appended closing tags is appended there, and only a
    response repaired inside is converted from Python (#12.1).
    """
    fields = list(Trajectory.model_fields)
    n = len(raw)
    columns: dict[str, list[Any]] = {
        c: ([_na_to_none(v) for v in raw[c].tolist()] if c in raw.columns else [None] * n)
        for c in fields}
    reparsers = {rule: row_reparser(rule, registry) for rule in set(columns["reparse"])}
    outcomes: list[Screening] = []
    kept_idx: list[int] = []
    removed_rows: list[dict[str, object]] = []
    extra_columns: dict[str, list[Any]] = {c: [] for c in PREPROCESSED_EXTRA}
    kept_steps: list[list[dict[str, Any]]] = []
    repaired_texts: dict[int, tuple[str, str]] = {}  # kept position -> (text, repaired)
    texts = columns["raw_response"]
    for i in range(n):
        steps = _step_rows(columns["steps"][i])
        found = screen(texts[i], steps, config, registry, reparsers[columns["reparse"][i]])
        outcomes.append(found)
        flags = found.flags
        if not found.kept:
            removed_rows.append({
                "trajectory_id": columns["trajectory_id"][i], "batch": columns["batch"][i],
                "task_id": columns["task_id"][i], "source_file": columns["source_file"][i],
                "source_line": columns["source_line"][i], "reason": found.removal_reason,
                "detail": "; ".join(flags), "tool_call_count": found.tool_call_count,
                "duplicate_calls": json.dumps(found.duplicate_calls, ensure_ascii=False),
            })
            continue
        if found.steps is not None:
            repaired_texts[len(kept_idx)] = (texts[i], found.text)
            kept_steps.append(found.steps)
        else:
            kept_steps.append(steps)
        kept_idx.append(i)
        extra: str = columns["extra"][i] or "{}"
        fixed = bool(found.format_fixes)
        duplicated = bool(found.duplicate_calls)
        for name, value in (
            ("tool_call_count", found.tool_call_count),
            ("has_duplicates", duplicated),
            ("format_corrected", fixed),
            # Judges read the limit the run used (a sequence over it is not optimal).
            ("beta_threshold", config.beta_threshold),
            ("preprocessing_flags", json.dumps(flags)),
            ("preprocessing_metadata", json.dumps({
                "tool_call_count": found.tool_call_count,
                "has_duplicates": duplicated,
                "format_corrected": fixed,
                "format_fixes": found.format_fixes,
                "flags": flags,
                "tag_analysis": found.tag_analysis,
                # What the parser had to repair to read the record at all.
                "parser_notes": json.loads(extra).get("tag_notes", []),
            }, ensure_ascii=False)),
        ):
            extra_columns[name].append(value)
    removed = pd.DataFrame(removed_rows, columns=REPORT_COLUMNS)
    if not kept_idx:  # the empty table keeps object columns, as pandas makes it from []
        return (pd.DataFrame([], columns=fields + PREPROCESSED_EXTRA), removed,
                summarize(outcomes))
    out: dict[str, Any] = {}
    for c in fields:
        # Columns passed through as they are: their strings stay in Arrow.
        taken = (None if c in _REWRITTEN else _taken_strings(raw, c, kept_idx))
        out[c] = taken if taken is not None else [columns[c][i] for i in kept_idx]
    out["extra"] = [e or "{}" for e in out["extra"]]
    for key in ("expected_tools", "expected_calls"):
        out[key] = [v if isinstance(v, str) else None for v in out[key]]
    out["steps"] = kept_steps
    response = _arrow_strings(raw, "raw_response")
    if response is None:
        for position, (_original, text) in repaired_texts.items():
            out["raw_response"][position] = text
    else:
        out["raw_response"] = _repaired_responses(response, kept_idx, repaired_texts)
    out.update(extra_columns)
    return (pd.DataFrame(out, columns=fields + PREPROCESSED_EXTRA), removed,
            summarize(outcomes))


_REWRITTEN = frozenset({"raw_response", "steps", "extra", "expected_tools", "expected_calls"})
"""Raw columns preprocessing writes anew rather than passing through."""

_STR = pd.StringDtype(storage="pyarrow", na_value=float("nan"))
"""pandas' default string dtype, which a column of Python strings gets."""


def _arrow_strings(frame: pd.DataFrame, column: str, nulls: bool = False) -> pa.Array | None:
    """The column's Arrow strings (no copy) when it is a string column (the column pandas
    makes from Python strings), without nulls unless ``nulls``; else None."""
    if column not in frame.columns or frame[column].dtype != _STR or (
            not nulls and frame[column].hasnans):
        return None
    values = pa.array(frame[column].array)
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _taken_strings(frame: pd.DataFrame, column: str, rows: list[int]) -> pd.Series | None:
    """``frame[column]`` at ``rows``, taken in Arrow, when it equals the column pandas makes
    from those rows' Python values: a string column with a string among them (all missing
    makes an object column of None). None otherwise. Spares converting every string to
    Python and back (#12.1)."""
    values = _arrow_strings(frame, column, nulls=True)
    if values is None:
        return None
    taken = values.take(pa.array(rows, pa.int64()))
    if taken.null_count == len(taken):
        return None
    return pd.Series(pd.array(taken, dtype=_STR))


def _repaired_responses(response: pa.Array, kept: list[int],
                        repaired: dict[int, tuple[str, str]]) -> pd.Series:
    """The kept rows' responses (``response`` taken at ``kept``), those repaired replaced
    (kept position -> (original, repaired text)), as the string column pandas makes from
    the Python strings (``test_stage_digests``).

    The UTF-8 bytes are copied once, row by row (a batch has a few hundred rows), from the
    raw column's buffer: a repair that only appended to the original (closers at the end:
    most repairs) appends its few bytes, and only responses repaired inside are encoded
    from Python. Taking, appending and replacing with Arrow kernels copied the text three
    times; converting the Python strings re-encoded all of it (#12.1).
    """
    if len(kept) == len(response) and not repaired:
        return pd.Series(pd.array(response, dtype=_STR))
    if response.type != pa.large_string():
        response = response.cast(pa.large_string())
    first = response.offset
    offsets = np.frombuffer(response.buffers()[1], np.int64)[first:first + len(response) + 1]
    bounds = offsets.tolist()
    data = memoryview(response.buffers()[2])
    pieces: list[bytes | memoryview] = []
    ends = [0]
    size = 0
    for position, row in enumerate(kept):
        start, end = bounds[row], bounds[row + 1]
        change = repaired.get(position)
        if change is None:
            pieces.append(data[start:end])
            size += end - start
        elif change[1].startswith(change[0]):
            pieces.append(data[start:end])
            tail = change[1][len(change[0]):].encode()
            pieces.append(tail)
            size += end - start + len(tail)
        else:
            whole = change[1].encode()
            pieces.append(whole)
            size += len(whole)
        ends.append(size)
    values = pa.LargeStringArray.from_buffers(
        len(kept), pa.py_buffer(np.array(ends, np.int64)), pa.py_buffer(b"".join(pieces)))
    return pd.Series(pd.array(values, dtype=_STR))


def clips_table(preprocessed: pd.DataFrame) -> pd.DataFrame:
    """Clips of every trajectory; only the five columns they need are read."""
    columns = ["trajectory_id", "batch", "task_id", "raw_response", "steps"]
    # Built column by column from one tuple per clip: a DataFrame from one dict per clip
    # cost three quarters of the stage (pyinstrument), a Clip model per clip a sixth.
    rows: list[ClipRow] = []
    owners: list[int] = []  # the row of each clip's trajectory
    for i, (text, steps) in enumerate(zip(*(preprocessed[c].tolist() for c in columns[3:]),
                                          strict=True)):
        clips = segment_rows(text, _step_rows(steps))
        rows.extend(clips)
        owners += [i] * len(clips)
    out: dict[str, object] = {}
    for name in columns[:3]:  # the trajectory's ids, repeated per clip in Arrow if strings
        taken = _taken_strings(preprocessed, name, owners)
        if taken is None:
            values = preprocessed[name].tolist()
            out[name] = [values[i] for i in owners]
        else:
            out[name] = taken
    fields = list(Clip.model_fields)
    columns_of_clips = list(zip(*rows, strict=True)) if rows else [() for _ in fields]
    out.update({name: list(column)
                for name, column in zip(fields, columns_of_clips, strict=True)})
    return pd.DataFrame(out, columns=CLIP_COLUMNS)


def _none_if_na(value: object) -> object:
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else value


def _optional_str(value: object) -> str | None:
    value = _none_if_na(value)
    return None if value is None else str(value)


def _threshold(value: object) -> int | None:
    """A recorded limit, or None for tables written before it was recorded."""
    value = _none_if_na(value)
    return int(float(value)) if isinstance(value, numbers.Real) else None


def clip_tasks(clips: pd.DataFrame, preprocessed: pd.DataFrame) -> list[ClipTask]:
    """Judge inputs, each clip knowing the calls made before it in its trajectory."""
    tasks_by_tid = dict(zip(preprocessed["trajectory_id"], preprocessed["task_description"],
                            strict=True))
    limits = (dict(zip(preprocessed["trajectory_id"], preprocessed["beta_threshold"],
                       strict=True)) if "beta_threshold" in preprocessed.columns else {})
    tasks: list[ClipTask] = []
    for tid, group in clips.groupby("trajectory_id", sort=False):
        earlier: list[str] = []
        for clip in group.sort_values("clip_index").to_dict("records"):
            view = ClipView(
                content=clip["content"], thought=clip["thought"], tool_call=clip["tool_call"],
                tool_name=_optional_str(clip["tool_name"]), action_input=clip["action_input"],
                result=clip["result"], has_answer=bool(clip["has_answer"]),
                answer=clip["answer"], earlier_calls=list(earlier),
            )
            tasks.append(ClipTask(trajectory_id=str(tid), clip_index=int(clip["clip_index"]),
                                  tool_type=clip["tool_type"],
                                  task_description=tasks_by_tid.get(tid, ""), clip=view,
                                  beta_threshold=_threshold(limits.get(tid))))
            if clip["tool_call"]:
                earlier.append(f"{clip['tool_name']}:{' '.join(clip['action_input'].split())}")
    return tasks
