"""Batch-level table builders: file -> raw table -> preprocessed table -> clips.

Plain functions over DataFrames so the Dagster assets stay thin and the same code runs in
tests, the CLI and the UI.
"""

from __future__ import annotations

import fnmatch
import json
import numbers
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, Field

from eval_pipeline.clips import Clip, ClipRow, segment_rows
from eval_pipeline.clips_arrow import char_lengths, clip_batch
from eval_pipeline.formats import (
    ArrowColumnsResult,
    ArrowParseResult,
    parse_file,
    row_reparser,
)
from eval_pipeline.formats.base import one_array
from eval_pipeline.frame_columns import column_values
from eval_pipeline.judges.base import ClipTask, ClipView
from eval_pipeline.models import (
    STEP_ARROW_TYPE,
    STEPS_ARROW_TYPE,
    QuarantinedRecord,
    Step,
    Trajectory,
    steps_from_rows,
    steps_to_rows,
)
from eval_pipeline.preprocess import (
    PreprocessConfig,
    PreprocessStats,
    decide,
    screen,
    summarize_findings,
)
from eval_pipeline.preprocess_arrow import ANSWER_CLOSED_AT_END, BatchScreen, screen_batch
from eval_pipeline.splitting import BatchManifest, drop_fingerprint
from eval_pipeline.steps_column import as_steps_column, steps_array, with_arrow_steps
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

    quarantined = [q.model_copy(update={"source_line": original(q.source_line)}).model_dump()
                   for q in parsed.quarantined]
    fields = list(Trajectory.model_fields)
    if isinstance(parsed, ArrowColumnsResult):
        columns = parsed.columns
        if lines:
            # Ids and lines of a split batch point at the drop, so they survive re-splitting.
            stem = Path(source_file).stem
            at = [original(line) for line in columns["source_line"]]
            columns["trajectory_id"] = [
                f"{stem}:{line}:{tid.rsplit(':', 1)[-1]}"
                for line, tid in zip(at, columns["trajectory_id"], strict=True)]
            columns["source_line"] = at
        frame = _columns_frame(
            {c: _frame_values(c, columns[c]) for c in fields}, fields)
    else:
        raw = parsed.rows
        if lines:
            stem = Path(source_file).stem
            for row in raw:
                line = original(row["source_line"])
                digest = row["trajectory_id"].rsplit(":", 1)[-1]
                row["source_line"] = line
                row["trajectory_id"] = f"{stem}:{line}:{digest}"
        arrow = parsed if isinstance(parsed, ArrowParseResult) else None
        frame = _frame(raw, fields, {} if arrow is None else {
            "steps": arrow.steps, "raw_response": arrow.responses})
    return (with_arrow_steps(frame),
            pd.DataFrame(quarantined, columns=QUARANTINE_COLUMNS) if quarantined
            else _EMPTY_QUARANTINE.copy())


_EMPTY_QUARANTINE = pd.DataFrame([], columns=QUARANTINE_COLUMNS)
"""The quarantine of a batch with none, copied (a tenth of the time of making it anew,
which most batches did)."""


def _frame_values(column: str, values: Any) -> Any:
    """A column of an :class:`ArrowColumnsResult` as the frame takes it: the steps as
    ``STEPS_DTYPE``, Arrow strings as ``str`` (the dtype and values pandas makes of the
    same Python strings, a null as NaN), lists and numpy arrays as they are."""
    if column == "steps":
        return pd.arrays.ArrowExtensionArray(steps_array(values))
    if isinstance(values, pa.Array | pa.ChunkedArray):
        if values.type != pa.large_string():
            values = values.cast(pa.large_string())
        if isinstance(values, pa.Array):
            values = pa.chunked_array([values])
        return pd.arrays.ArrowStringArray(values, dtype=_STR)  # type: ignore[call-arg]
    return values


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
        if c == "steps":
            # Arrow steps (what with_arrow_steps would convert the column to, without a
            # second frame): given, or converted from the rows' step rows.
            data[c] = pd.arrays.ArrowExtensionArray(steps_array(
                given[c] if c in given else [r.get(c) for r in rows]))
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


def preprocess_batch(raw: pd.DataFrame, config: PreprocessConfig, registry: ToolRegistry,
                     *, kernels: bool = True
                     ) -> tuple[pd.DataFrame, pd.DataFrame, PreprocessStats]:
    """The three rules on every row, read column by column.

    A kept row is the raw row with the preprocessing columns added (and, where the tags
    were repaired, the repaired response and its re-cut steps): the same values as a round
    trip through the Trajectory model gave, without one (#12.1; ``test_stage_digests``).
    The responses stay Arrow strings where they were: a kept response is taken from the
    raw column, a repair that only appended closing tags is appended there, and only a
    response repaired inside is converted from Python (#12.1).

    ``steps`` is read as Arrow (``with_arrow_steps``: a table with Python steps is
    converted first) and handed on as Arrow. The common case of a response (well-formed
    tags or only an ``<answer>`` closed at the end, ASCII tag names) is decided for the
    whole batch by ``preprocess_arrow.screen_batch`` without converting its steps or text
    to Python; every other response goes through ``screen`` as before (#12.1).
    ``kernels=False`` sends every response through ``screen``: the reference the tests
    hold the kernels to (``test_prep_arrow.py``).

    The rules' findings are kept as one list per finding (not an object per row), the
    decisions and statistics made from them, and only the kept rows' columns built; the
    columns passed through are taken in Arrow or numpy where that gives the dtype pandas
    would infer from the kept rows' values (#12.1).
    """
    raw = with_arrow_steps(raw)
    fields = list(Trajectory.model_fields)
    n = len(raw)
    response = _arrow_strings(raw, "raw_response")
    columns = _PythonColumns(raw)
    steps = _steps_list_array(raw, n)
    rules = columns["reparse"]
    reparsers = {rule: row_reparser(rule, registry) for rule in set(rules)}
    batch = (_screen_batch(raw, response, steps, rules, config, registry)
             if kernels else None)
    texts: list[Any] = columns["raw_response"] if response is None else []
    extras = columns["extra"]
    notes = _parser_notes([e or "{}" for e in extras])
    # What the rules found, per row: the kernels' findings, then screen's for the rest.
    if batch is not None:
        counts: list[int] = batch.tool_calls.tolist()
        duplicates: list[list[str]] = list(batch.duplicates)
        tags: list[dict[str, int]] = list(batch.tag_counts)
        closed: list[bool] = batch.answer_closed.tolist()
        slow: list[int] = np.flatnonzero(~batch.fast).tolist()
    else:
        counts, duplicates, tags = [0] * n, [[]] * n, [{}] * n
        closed, slow = [False] * n, list(range(n))
    fixes: list[list[str]] = [[ANSWER_CLOSED_AT_END] if c else [] for c in closed]
    python_steps: dict[int, list[dict[str, Any]]] = {}  # row -> steps re-cut in Python
    repaired_texts: dict[int, tuple[str, str]] = {}  # row -> (text, repaired)
    for i in slow:
        text = texts[i] if response is None else response[i].as_py()
        found = screen(text, _RowSteps(steps, i), config, registry, reparsers[rules[i]])
        counts[i], duplicates[i], tags[i] = (found.tool_call_count, found.duplicate_calls,
                                             found.tag_analysis)
        fixes[i] = found.format_fixes
        if found.steps is not None:
            python_steps[i] = found.steps
            repaired_texts[i] = (text, found.text)
    # decide() depends on the count and the duplicates' number only: once per pair.
    decisions: dict[tuple[int, int], tuple[str | None, list[str]]] = {}
    decided = [decisions.get((count, len(found))) or decisions.setdefault(
                   (count, len(found)), decide(count, found, config))
               for count, found in zip(counts, duplicates, strict=True)]
    stats = summarize_findings([d[0] for d in decided], [d[1] for d in decided],
                               duplicates, fixes)
    kept_idx = [i for i, (reason, _flags) in enumerate(decided) if reason is None]
    removed = _removed_rows(raw, [i for i, d in enumerate(decided) if d[0] is not None],
                            decided, counts, duplicates)
    if not kept_idx:  # the empty table keeps object columns, as pandas makes it from []
        return pd.DataFrame([], columns=fields + PREPROCESSED_EXTRA), removed, stats
    kept = np.array(kept_idx, np.int64)
    out: dict[str, Any] = {}
    for c in fields:
        if c not in _REWRITTEN:
            out[c] = _passed_through(raw, columns, c, kept)
    out["extra"] = _str_column([extras[i] or "{}" for i in kept_idx])
    for key in ("expected_tools", "expected_calls"):
        values = columns[key]
        out[key] = [v if isinstance(v, str) else None for v in map(values.__getitem__,
                                                                      kept_idx)]
    positions = {row: position for position, row in enumerate(kept_idx)}
    kept_python = {positions[i]: s for i, s in python_steps.items() if i in positions}
    kept_closed = [p for p, i in enumerate(kept_idx) if closed[i]]
    kept_repaired = {positions[i]: t for i, t in repaired_texts.items() if i in positions}
    out["steps"] = _kept_steps(steps, kept_idx, kept_python, kept_closed)
    if response is None:
        out["raw_response"] = [texts[i] for i in kept_idx]
        for position, (_original, text) in kept_repaired.items():
            out["raw_response"][position] = text
        for position in kept_closed:
            out["raw_response"][position] += ANSWER_CLOSER
    else:
        out["raw_response"] = _repaired_responses(response, kept_idx, kept_repaired,
                                                  kept_closed)
    has_duplicates = [bool(duplicates[i]) for i in kept_idx]
    corrected = [bool(fixes[i]) for i in kept_idx]
    metadata: list[str] = []
    flags_json: list[str] = []
    for i, duplicated, fixed in zip(kept_idx, has_duplicates, corrected, strict=True):
        flags = decided[i][1]
        flags_json.append(json.dumps(flags) if flags else "[]")
        metadata.append(_JSON_TEXT({
            "tool_call_count": counts[i],
            "has_duplicates": duplicated,
            "format_corrected": fixed,
            "format_fixes": fixes[i],
            "flags": flags,
            "tag_analysis": tags[i],
            # What the parser had to repair to read the record at all.
            "parser_notes": (notes[i] if notes[i] is not _UNREAD else json.loads(
                extras[i] or "{}").get("tag_notes", [])),
        }))
    # Typed as pandas types the Python values (ints, bools, strings), without inferring.
    out["tool_call_count"] = np.array([counts[i] for i in kept_idx], np.int64)
    out["has_duplicates"] = np.array(has_duplicates, bool)
    out["format_corrected"] = np.array(corrected, bool)
    out["preprocessing_flags"] = _str_column(flags_json)
    out["preprocessing_metadata"] = _str_column(metadata)
    # Judges read the limit the run used (a sequence over it is not optimal).
    out["beta_threshold"] = np.full(len(kept_idx), config.beta_threshold, np.int64)
    return _columns_frame(out, fields + PREPROCESSED_EXTRA), removed, stats


def _removed_rows(frame: pd.DataFrame, rows: list[int],
                  decided: list[tuple[str | None, list[str]]], counts: list[int],
                  duplicates: list[list[str]]) -> pd.DataFrame:
    """The preprocess report: one row per removed trajectory, with why (only those rows'
    ids converted to Python, not the whole columns). Handed to pandas as columns: the
    frame pandas makes of one dict per row (``test_stage_digests``), and the empty one
    as it makes it of none (object columns)."""
    if not rows:
        return _EMPTY_REPORT.copy()
    at = np.array(rows, np.int64)
    out: dict[str, list[Any]] = {
        c: _python_values(frame, c, at)
        for c in ("trajectory_id", "batch", "task_id", "source_file", "source_line")}
    out["reason"] = [decided[i][0] for i in rows]
    out["detail"] = ["; ".join(decided[i][1]) for i in rows]
    out["tool_call_count"] = [counts[i] for i in rows]
    out["duplicate_calls"] = [json.dumps(duplicates[i], ensure_ascii=False) for i in rows]
    return _columns_frame(out, REPORT_COLUMNS)


_EMPTY_REPORT = pd.DataFrame([], columns=REPORT_COLUMNS)
"""The report of a batch that removed nothing (object columns, as pandas makes it of no
rows), copied: most batches remove nothing, and making it anew cost more than the rest."""


def _python_values(frame: pd.DataFrame, column: str, rows: np.ndarray) -> list[Any]:
    """:class:`_PythonColumns`' values of ``column`` at ``rows`` only."""
    if column not in frame.columns:
        return [None] * len(rows)
    strings = _arrow_strings(frame, column, nulls=True)
    if strings is not None:  # a null is None, as _na_to_none makes NaN
        return strings.take(pa.array(rows)).to_pylist()
    values = frame[column].to_numpy()
    return [_na_to_none(v) for v in values[rows].tolist()]


class _RowSteps(Sequence[dict[str, Any]]):
    """One row's step rows, converted from the Arrow ``steps`` when first read: ``screen``
    reads them only when the response needs no repair or the repair only closed its
    ``<answer>`` (most of what reaches it is repaired otherwise and read again), and
    converting every one was a twentieth of the stage."""

    def __init__(self, steps: pa.ListArray | None, row: int) -> None:
        self._steps = steps
        self._row = row
        self._rows: list[dict[str, Any]] | None = None

    def _read(self) -> list[dict[str, Any]]:
        if self._rows is None:
            self._rows = _step_rows(self._steps[self._row].as_py()
                                    if self._steps is not None else None)
        return self._rows

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self._read()[index]

    def __len__(self) -> int:
        return len(self._read())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._read())


def _passed_through(frame: pd.DataFrame, columns: _PythonColumns, column: str,
                    kept: np.ndarray) -> Any:
    """``frame[column]`` at the ``kept`` rows, as the column pandas makes from those rows'
    Python values (NaN read as None): taken in Arrow or numpy where that is the same
    dtype and values (a string, integer or boolean column; a float one unless every
    kept value is NaN, which makes an object column of None), an object column of None
    as such, anything else through its Python values. Converting every column to Python
    and back was a tenth of the stage."""
    if column not in frame.columns:
        return [None] * len(kept)
    series = frame[column]
    dtype = series.dtype
    if dtype == _STR:
        taken = _taken_series_strings(series, kept)
        if taken is not None:
            return taken
    elif isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        values = series.to_numpy().take(kept)
        if dtype.kind != "f" or not np.isnan(values).all():
            return values
        return [None] * len(kept)
    elif dtype == np.dtype(object) and all(v is None for v in series.to_numpy()):
        return [None] * len(kept)
    python = columns[column]
    return [python[i] for i in kept.tolist()]


ANSWER_CLOSER = "</answer>"


class _PythonColumns(dict[str, list[Any]]):
    """A table's columns as Python values (missing ones None), each converted when first
    asked for: the kernels leave most columns in Arrow, and converting every column of
    every batch was a tenth of the stage."""

    def __init__(self, frame: pd.DataFrame) -> None:
        super().__init__()
        self.frame = frame

    def __missing__(self, column: str) -> list[Any]:
        frame = self.frame
        values = ([_na_to_none(v) for v in frame[column].tolist()]
                  if column in frame.columns else [None] * len(frame))
        self[column] = values
        return values

_JSON_TEXT = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(..., ensure_ascii=False)`` without building an encoder per call."""


_UNREAD = object()
"""A ``tag_notes`` that :func:`_parser_notes` could not read: read per record where used."""


def _parser_notes(extras: list[str]) -> list[Any]:
    """Each ``extra``'s ``tag_notes`` (what the parser repaired), [] without any: the
    JSON texts decoded in one call as one array (a call per record was a tenth of the
    row loop). If that fails, each on its own, and one that cannot be read is
    :data:`_UNREAD` (the row loop reads it again, failing as it always did)."""
    try:
        values = json.loads("[" + ",".join(extras) + "]")
        if len(values) != len(extras):
            raise ValueError("an extra that is not one JSON value")
    except ValueError:
        values = []
        for extra in extras:
            try:
                values.append(json.loads(extra))
            except ValueError:
                values.append(None)
    return [v.get("tag_notes", []) if isinstance(v, dict) else _UNREAD for v in values]


def _steps_list_array(raw: pd.DataFrame, n: int) -> pa.ListArray | None:
    """The ``steps`` column as one Arrow list array (None: the table has no such column)."""
    if "steps" not in raw.columns:
        return None
    values = raw["steps"].array.__arrow_array__()
    array = one_array(values)
    assert len(array) == n
    return array


def _screen_batch(raw: pd.DataFrame, response: pa.Array | None, steps: pa.ListArray | None,
                  rules: list[Any], config: PreprocessConfig, registry: ToolRegistry
                  ) -> BatchScreen | None:
    """The batch kernels' decisions, or None where they do not apply to the batch (no
    steps, missing steps or responses). A row whose format repairs tags by another rule
    than the XML one, or whose ``<answer>`` closed at the end is not its last step read to
    the end, is marked for ``screen``."""
    n = len(raw)
    if n == 0 or steps is None or steps.null_count:
        return None
    if response is None:
        texts = raw["raw_response"].tolist()
        if not all(isinstance(t, str) for t in texts):
            return None
        response = pa.array(texts, pa.large_string())
    reparse = np.array([r is not None for r in rules], bool)
    batch = screen_batch(response, steps, reparse, config, registry)
    other_rule = np.array([r not in (None, "xml_tags") for r in rules], bool)
    batch.fast &= ~(other_rule & config.repair_tags)
    closed = np.flatnonzero(batch.answer_closed & batch.fast)
    if len(closed):
        # ``reanalyze_repaired``'s shortcut: the last step is the answer, read to the end.
        offsets = steps.offsets.to_numpy()
        last = offsets[closed + 1] - 1
        flat = steps.values
        at = pa.array(np.maximum(last, 0))
        answer = pc.fill_null(pc.equal(flat.field("kind").take(at), "answer"),
                              False).to_numpy(zero_copy_only=False)
        ends = flat.field("end").take(at).to_numpy(zero_copy_only=False)
        # Every response's length, read in place: taking the closed ones first copied
        # most of the batch's text (four responses in five are closed at the end, and
        # nineteen in twenty of the generated drop's hold non-ASCII text).
        lengths = char_lengths(response)[closed]  # the C kernel's count: 5 x Arrow's
        ok = (offsets[closed + 1] > offsets[closed]) & answer & (ends == lengths)
        batch.fast[closed[~ok]] = False
        batch.answer_closed[closed[~ok]] = False
    batch.answer_closed &= batch.fast
    return batch


def _kept_steps(steps: pa.ListArray | None, kept: list[int],
                python_steps: dict[int, list[dict[str, Any]]], answer_closed: list[int]
                ) -> pd.Series:
    """The kept rows' steps as the steps column: taken in Arrow, the rows re-cut in Python
    replaced, and the answers closed at the end read past their ``</answer>``."""
    if steps is None:
        return as_steps_column(pd.Series([python_steps.get(p, []) for p in range(len(kept))]))
    index = np.array(kept, np.int64)
    from_steps = np.ones(len(kept), bool)
    extra = steps
    if python_steps:
        order = sorted(python_steps)
        extra = pa.array([python_steps[p] for p in order], STEPS_ARROW_TYPE)
        index[order] = np.arange(len(order))
        from_steps[order] = False
    taken = _runs_taken(steps, extra, index, from_steps)
    if answer_closed:
        offsets = taken.offsets.to_numpy()
        flat = taken.flatten()
        last = offsets[np.array(answer_closed) + 1] - 1 - offsets[0]
        end = flat.field("end").to_numpy(zero_copy_only=False).copy()
        end[last] += len(ANSWER_CLOSER)
        fields = [flat.field(i) for i in range(flat.type.num_fields)]
        fields[flat.type.get_field_index("end")] = pa.array(end, pa.int64())
        values = pa.StructArray.from_arrays(fields, fields=list(STEP_ARROW_TYPE))
        taken = pa.ListArray.from_arrays(pa.array(offsets - offsets[0], pa.int32()), values)
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([taken])), copy=False)


def _runs_taken(base: pa.Array, extra: pa.Array, index: np.ndarray, from_base: np.ndarray
                ) -> pa.Array:
    """Row ``index[i]`` of ``base`` where ``from_base[i]``, else of ``extra``, as one array:
    each run of rows that are neighbours in their source cut as a slice and the slices
    joined by one copy (none when one slice is all), where a concatenation and a
    ``take`` copied every value twice."""
    if not len(index):
        return base.slice(0, 0)
    new_run = np.ones(len(index), bool)
    new_run[1:] = (from_base[1:] != from_base[:-1]) | (index[1:] != index[:-1] + 1)
    starts = np.flatnonzero(new_run).tolist()
    ends = [*starts[1:], len(index)]
    pieces = [(base if from_base[start] else extra).slice(int(index[start]), end - start)
              for start, end in zip(starts, ends, strict=True)]
    return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


_REWRITTEN = frozenset({"raw_response", "steps", "extra", "expected_tools", "expected_calls"})
"""Raw columns preprocessing writes anew rather than passing through."""

_STR = pd.StringDtype(storage="pyarrow", na_value=float("nan"))
"""pandas' default string dtype, which a column of Python strings gets."""


def _columns_frame(columns: dict[str, Any], names: list[str]) -> pd.DataFrame:
    """``pd.DataFrame(columns, columns=names)`` for columns of one length with the default
    index, each column made here into the array pandas would make of it (a Series' array,
    a string scalar or a list of strings as ``str``, None as an object column of None, a
    list of ints or bools as numpy) and the frame built from those arrays without the
    constructor's checks: inferring lists and broadcasting scalars was two thirds of
    making a stage's frame, checking and aligning the rest (#12.1, #12.4). A read-only
    numpy view (of an Arrow buffer) is copied, as the frame's users may write to it; a
    column of any other kind sends the whole frame through the constructor."""
    lengths = {len(v) for v in columns.values() if not _is_scalar(v)}
    n = lengths.pop() if len(lengths) == 1 else 0
    arrays = [_column_array(columns[name], n) for name in names] if n else []
    if not n or any(a is None for a in arrays):
        return pd.DataFrame({name: _handed_over(value) for name, value in columns.items()},
                            columns=names, copy=False)
    return pd.DataFrame._from_arrays(  # type: ignore[attr-defined]
        arrays, columns=_column_index(tuple(names)), index=pd.RangeIndex(n),
        verify_integrity=False)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | bool | int | float)


@lru_cache(maxsize=64)
def _column_index(names: tuple[str, ...]) -> pd.Index:
    """A stage's column names as the frame's column index, made once per stage (an Index
    is immutable, so frames share it)."""
    return pd.Index(list(names))


def _handed_over(value: Any) -> Any:
    """A column as the frame takes it without a copy: a Series as its array (no index to
    align), a read-only numpy view copied (the frame's users may write to it)."""
    if isinstance(value, pd.Series):
        return value.array
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        return value.copy()
    return value


def _column_array(value: Any, n: int) -> Any:
    """The array ``pd.DataFrame`` makes of one column of ``n`` rows, for the kinds the
    stages build (None for any other: the constructor decides)."""
    if isinstance(value, pd.Series | pd.api.extensions.ExtensionArray | np.ndarray):
        return _handed_over(value)
    if value is None:
        return np.full(n, None, object)
    if isinstance(value, str):
        return _str_column([value] * n)
    if isinstance(value, bool):
        return np.full(n, value, bool)
    if isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
        return np.full(n, value, np.int64)
    if isinstance(value, float) and value == value:
        return np.full(n, value, np.float64)
    if isinstance(value, list):
        kinds = set(map(type, value))
        if kinds == {str} or kinds == {str, type(None)}:
            return _str_column(value)
        if kinds == {type(None)}:
            return np.full(n, None, object)
        if kinds == {bool}:
            return np.array(value, bool)
        if kinds == {bool, type(None)}:
            column = np.empty(n, object)
            column[:] = value
            return column
        if kinds == {int}:
            try:
                return np.array(value, np.int64)
            except OverflowError:
                return None
    return None


def _str_column(values: Sequence[str | None]) -> pd.api.extensions.ExtensionArray:
    """Python strings as the ``str`` column pandas would make of them (None: NaN)."""
    return pd.arrays.ArrowStringArray(  # type: ignore[call-arg]
        pa.chunked_array([pa.array(values, pa.large_string())]), dtype=_STR)


def _arrow_strings(frame: pd.DataFrame, column: str, nulls: bool = False) -> pa.Array | None:
    """The column's Arrow strings (no copy) when it is a string column (the column pandas
    makes from Python strings), without nulls unless ``nulls``; else None."""
    if column not in frame.columns:
        return None
    return _series_strings(frame[column], nulls)


def _series_strings(series: pd.Series, nulls: bool = False) -> pa.Array | None:
    """:func:`_arrow_strings` of a column already taken from its frame (taking one costs
    more than most of what is done with it on a batch of ten rows)."""
    if series.dtype != _STR:
        return None
    values = one_array(pa.array(series.array))
    return values if nulls or not values.null_count else None


def _taken_strings(frame: pd.DataFrame, column: str, rows: list[int] | np.ndarray
                   ) -> pd.api.extensions.ExtensionArray | None:
    """``frame[column]`` at ``rows``, taken in Arrow, when it equals the column pandas makes
    from those rows' Python values: a string column with a string among them (all missing
    makes an object column of None). None otherwise. Spares converting every string to
    Python and back (#12.1)."""
    if column not in frame.columns:
        return None
    return _taken_series_strings(frame[column], rows)


def _taken_series_strings(series: pd.Series, rows: list[int] | np.ndarray
                          ) -> pd.api.extensions.ExtensionArray | None:
    """:func:`_taken_strings` of a column already taken from its frame."""
    values = _series_strings(series, nulls=True)
    if values is None:
        return None
    taken = values.take(pa.array(rows, pa.int64()))
    if taken.null_count == len(taken):
        return None
    if taken.type != pa.large_string():
        taken = taken.cast(pa.large_string())
    return pd.arrays.ArrowStringArray(pa.chunked_array([taken]),  # type: ignore[call-arg]
                                      dtype=_STR)


def _repaired_responses(response: pa.Array, kept: list[int],
                        repaired: dict[int, tuple[str, str]],
                        answer_closed: list[int] | None = None) -> pd.Series:
    """The kept rows' responses (``response`` taken at ``kept``), those repaired replaced
    (kept position -> (original, repaired text)) and those at ``answer_closed`` (kept
    positions) with ``</answer>`` appended, as the string column pandas makes from the
    Python strings (``test_stage_digests``).

    The UTF-8 bytes are copied once, row by row (a batch has a few hundred rows), from the
    raw column's buffer: a repair that only appended to the original (closers at the end:
    most repairs) appends its few bytes, and only responses repaired inside are encoded
    from Python. Taking, appending and replacing with Arrow kernels copied the text three
    times; converting the Python strings re-encoded all of it (#12.1).
    """
    closed = frozenset(answer_closed or ())
    if len(kept) == len(response) and not repaired and not closed:
        return pd.Series(pd.array(response, dtype=_STR))
    closer = ANSWER_CLOSER.encode()
    if response.type != pa.large_string():
        response = response.cast(pa.large_string())
    first = response.offset
    offsets = np.frombuffer(response.buffers()[1], np.int64)[first:first + len(response) + 1]
    rows = np.array(kept, np.int64)
    starts, ends = offsets[rows], offsets[rows + 1]
    sizes = ends - starts
    # Each changed row is its own piece: the original's bytes and what was appended, or
    # the repaired text; the unchanged rows between are cut in runs of neighbours.
    changed: dict[int, list[bytes | None]] = {}  # None: the original's bytes
    for position, (text, new_text) in repaired.items():
        changed[position] = ([None, new_text[len(text):].encode()]
                             if new_text.startswith(text) else [new_text.encode()])
    changed.update((position, [None, closer]) for position in closed)
    for position, parts in changed.items():
        sizes[position] = sum(int(sizes[position]) if part is None else len(part)
                              for part in parts)
    breaks = np.ones(len(rows), bool)
    breaks[1:] = rows[1:] != rows[:-1] + 1
    if changed:
        at = np.array(sorted(changed), np.int64)
        breaks[at] = True
        breaks[at[at + 1 < len(rows)] + 1] = True
    data = memoryview(response.buffers()[2] or b"")
    pieces: list[bytes | memoryview] = []
    run_starts = np.flatnonzero(breaks).tolist()
    for run, run_end in zip(run_starts, [*run_starts[1:], len(rows)], strict=True):
        if run not in changed:
            pieces.append(data[starts[run]:ends[run_end - 1]])
            continue
        for part in changed[run]:
            pieces.append(data[starts[run]:ends[run]] if part is None else part)
    values = pa.LargeStringArray.from_buffers(
        len(kept), pa.py_buffer(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)),
        pa.py_buffer(b"".join(pieces)))
    return pd.Series(pd.array(values, dtype=_STR))


def _clip_ids(frame: pd.DataFrame, owners: list[int]) -> dict[str, object]:
    """The trajectory's ids repeated for each of its clips (``owners``: each clip's row),
    taken in Arrow where they are strings."""
    out: dict[str, object] = {}
    for name in ("trajectory_id", "batch", "task_id"):
        taken = _taken_strings(frame, name, owners)
        if taken is None:
            values = frame[name].tolist()
            out[name] = [values[i] for i in owners]
        else:
            out[name] = taken
    return out


CLIP_KERNEL_MIN_ROWS = 32
"""Batches of fewer trajectories are clipped by ``segment_rows``: the kernels' few dozen
Arrow and numpy calls per batch cost more than they save on a handful of rows (corpora
batches of 10: 0.58 s with the kernels, 0.38 to 0.47 s without; the generated drop's
batches of 100: 3.3 against 8.4 ms a batch; 2026-11-25)."""


def clips_table(preprocessed: pd.DataFrame, *, kernels: bool | None = None) -> pd.DataFrame:
    """Clips of every trajectory; only the five columns they need are read.

    The clips of a batch are cut in Arrow (``clips_arrow.clip_batch``) from the Arrow
    ``steps`` column; a response it leaves to Python (``fast`` False) is cut by
    ``segment_rows`` as before, and its clips put in its place (#12.1). ``kernels=None``
    uses them from :data:`CLIP_KERNEL_MIN_ROWS` trajectories on, ``True`` always (what
    the tests hold to the reference), ``False`` never: every response is cut by
    ``segment_rows`` (the tests' reference).
    """
    frame = with_arrow_steps(preprocessed)
    n = len(frame)
    steps = _steps_list_array(frame, n)
    response = _arrow_strings(frame, "raw_response")
    if response is None and n and "raw_response" in frame.columns:
        texts = frame["raw_response"].tolist()
        if all(isinstance(t, str) for t in texts):
            response = pa.array(texts, pa.large_string())
    if kernels is None:
        kernels = n >= CLIP_KERNEL_MIN_ROWS
    if not kernels or steps is None or response is None or steps.null_count or n == 0:
        return _clips_in_python(frame)
    batch = clip_batch(response, steps)
    python_rows: list[ClipRow] = []
    python_owners: list[int] = []
    for i in np.flatnonzero(~batch.fast).tolist():
        clips = segment_rows(response[i].as_py(), _step_rows(steps[i].as_py()))
        python_rows.extend(clips)
        python_owners += [i] * len(clips)
    if not len(batch.owner) and not python_rows:
        return _clips_in_python(frame)
    fields = list(Clip.model_fields)
    python_columns = (list(zip(*python_rows, strict=True)) if python_rows
                      else [() for _ in fields])
    by_name = dict(zip(fields, python_columns, strict=True))
    owners = np.concatenate([batch.owner, np.array(python_owners, np.int64)])
    order = np.argsort(owners, kind="stable") if python_rows else None
    take = pa.array(order) if order is not None else None

    def strings(name: str, values: pa.Array) -> pd.Series:
        if python_rows:
            values = pa.concat_arrays([values.cast(pa.large_string()),
                                       pa.array(by_name[name], pa.large_string())])
        if take is not None:
            values = values.take(take)
        return pd.Series(pd.array(values, dtype=_STR))

    def plain(name: str, values: np.ndarray | list[Any]) -> list[Any] | np.ndarray:
        if not python_rows and isinstance(values, np.ndarray) and values.dtype.kind in "biu":
            # The dtype pandas infers from the Python ints or bools, without them.
            return values if values.dtype.kind == "b" else values.astype(np.int64)
        merged = list(values.tolist() if isinstance(values, np.ndarray) else values)
        merged += list(by_name[name])
        return merged if order is None else [merged[j] for j in order.tolist()]

    owner_list = owners[order].tolist() if order is not None else owners.tolist()
    out: dict[str, object] = _clip_ids(frame, owner_list)
    out.update({
        "clip_index": plain("clip_index", batch.clip_index),
        "tool_type": strings("tool_type", batch.tool_type),
        "tool_name": plain("tool_name", batch.tool_name),
        "start": plain("start", batch.start),
        "end": plain("end", batch.end),
        "content": strings("content", batch.content),
        "thought": strings("thought", batch.thought),
        "tool_call": strings("tool_call", batch.tool_call),
        "action_input": strings("action_input", batch.action_input),
        "result": strings("result", batch.result),
        "has_answer": plain("has_answer", batch.has_answer),
        "answer": strings("answer", batch.answer),
        "step_start": plain("step_start", batch.step_start),
        "step_end": plain("step_end", batch.step_end),
        "human_label": plain("human_label", [None] * len(batch.owner)),
    })
    return _columns_frame(out, CLIP_COLUMNS)


def _clips_in_python(preprocessed: pd.DataFrame) -> pd.DataFrame:
    """:func:`clips_table` by ``segment_rows`` alone (tables the batch kernels do not take:
    no clips, no steps column, a response that is not a string)."""
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
    out: dict[str, object] = _clip_ids(preprocessed, owners)
    fields = list(Clip.model_fields)
    columns_of_clips = list(zip(*rows, strict=True)) if rows else [() for _ in fields]
    out.update({name: list(column)
                for name, column in zip(fields, columns_of_clips, strict=True)})
    return _columns_frame(out, CLIP_COLUMNS)


def _none_if_na(value: object) -> object:
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else value


def _optional_str(value: object) -> str | None:
    value = _none_if_na(value)
    return None if value is None else str(value)


def _threshold(value: object) -> int | None:
    """A recorded limit, or None for tables written before it was recorded."""
    value = _none_if_na(value)
    return int(float(value)) if isinstance(value, numbers.Real) else None


_CLIP_TASK_COLUMNS = ["trajectory_id", "clip_index", "tool_type", "content", "thought",
                      "tool_call", "tool_name", "action_input", "result", "has_answer",
                      "answer"]


def clip_tasks(clips: pd.DataFrame, preprocessed: pd.DataFrame) -> list[ClipTask]:
    """Judge inputs, each clip knowing the calls made before it in its trajectory.

    Trajectories in the order they first appear, each one's clips by ``clip_index``. Read
    as one list per column: a groupby with a ``to_dict("records")`` per trajectory was a
    fifth of the stage functions' time on the corpora's batches of 10 (py-spy, #12.4)."""
    tasks_by_tid = dict(zip(preprocessed["trajectory_id"], preprocessed["task_description"],
                            strict=True))
    limits = (dict(zip(preprocessed["trajectory_id"], preprocessed["beta_threshold"],
                       strict=True)) if "beta_threshold" in preprocessed.columns else {})
    (tids, indices, tool_types, contents, thoughts, calls, names, inputs, results, answered,
     answers) = (column_values(clips, c) for c in _CLIP_TASK_COLUMNS)
    first: dict[object, int] = {}
    for tid in tids:
        first.setdefault(tid, len(first))
    order = sorted((i for i, tid in enumerate(tids) if _none_if_na(tid) is not None),
                   key=lambda i: (first[tids[i]], indices[i]))
    tasks: list[ClipTask] = []
    earlier: list[str] = []
    previous: object = None
    for i in order:
        tid = tids[i]
        if tid != previous:
            earlier, previous = [], tid
        view = ClipView(
            content=contents[i], thought=thoughts[i], tool_call=calls[i],
            tool_name=_optional_str(names[i]), action_input=inputs[i], result=results[i],
            has_answer=bool(answered[i]), answer=answers[i], earlier_calls=list(earlier),
        )
        tasks.append(ClipTask(trajectory_id=str(tid), clip_index=int(indices[i]),
                              tool_type=tool_types[i],
                              task_description=tasks_by_tid.get(tid, ""), clip=view,
                              beta_threshold=_threshold(limits.get(tid))))
        if calls[i]:
            earlier.append(f"{names[i]}:{' '.join(inputs[i].split())}")
    return tasks
