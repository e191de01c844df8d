"""The shared record loop: every JSON-based parser quarantines the same way.

A parser subclass only says how one JSON object becomes a trajectory (``build``); reading,
quarantining, repair notes, unregistered-tool reports and duplicate task ids are handled
here once, so ``len(trajectories) + len(quarantined) == records read`` holds for every
format without each parser re-implementing it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import ValidationError

from eval_pipeline.formats.base import (
    ParseContext,
    RawRecord,
    file_stem,
    iter_json_document,
    iter_records,
    trajectory_id,
)
from eval_pipeline.models import (
    GENERIC_TOOL_TYPE,
    ParseResult,
    QuarantinedRecord,
    ReparseRule,
    Step,
    Trajectory,
)

T = TypeVar("T")

#: The fields of a raw_trajectories row that have a default, at it (``extra`` is set per
#: row); a row builder gives the others.
_ROW_DEFAULTS: dict[str, Any] = {
    name: field.default for name, field in Trajectory.model_fields.items()
    if not field.is_required() and name != "extra"}
_ROW_FIELDS = len(Trajectory.model_fields)


class RecordError(Exception):
    """A record that cannot become a trajectory; ``reason`` is the quarantine category."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def require(value: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """Fetch a required field or raise the quarantine reason a reader expects."""
    if key not in value or value[key] is None:
        raise RecordError("missing_field", f"required field {key!r} is missing")
    got = value[key]
    kinds = _as_tuple(kind)
    if (isinstance(got, bool) and bool not in kinds) or not isinstance(got, kinds):
        raise RecordError(
            "wrong_type", f"field {key!r} must be {_names(kind)}, got {type(got).__name__}"
        )
    return got


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _as_tuple(kind))


def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
        return value.strip().lower() == "true"
    if isinstance(value, int | float):
        return bool(value)
    return None


def as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def as_str(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def unregistered_tools(steps: list[Step]) -> list[str]:
    """Tool names the registry does not know: scored with ``generic`` and reported."""
    return sorted({s.tool_name or "?" for s in steps
                   if s.kind == "tool_call" and s.tool_type == GENERIC_TOOL_TYPE})


class JsonRecordsParser:
    """Base for formats whose records are JSON objects (JSONL, a JSON list, or keyed)."""

    name: ClassVar[str] = ""
    #: True for formats that are one JSON document per file (a list or a keyed object):
    #: a file that does not parse becomes one quarantined record instead of many.
    whole_file: ClassVar[bool] = False
    keyed: ClassVar[bool] = False
    #: What later stages need to know about this format's records; they travel on each
    #: trajectory so no stage after parsing branches on the format's name.
    reparse: ClassVar[ReparseRule | None] = None
    empty_expectation_means_no_call: ClassVar[bool] = False
    expected_arguments_are_options: ClassVar[bool] = False

    def records(self, path: Path) -> Iterator[RawRecord]:
        data = path.read_bytes()
        if self.whole_file:
            return iter_json_document(data, keyed=self.keyed)
        return iter_records(data)

    def build(self, value: dict[str, Any], rec: RawRecord, ctx: ParseContext,
              index: int) -> Trajectory:
        raise NotImplementedError

    def trajectory(self, rec: RawRecord, ctx: ParseContext, index: int, **fields: Any
                   ) -> Trajectory:
        """A trajectory with the identity fields every format shares filled in."""
        fields.setdefault("task_id", f"{file_stem(ctx.source_file)}:{rec.line}")
        fields.setdefault("task_description", "")
        return Trajectory(
            trajectory_id=trajectory_id(ctx.source_file, index, rec.content),
            batch=ctx.batch,
            source_file=ctx.source_file,
            source_line=rec.line,
            source_format=self.name,
            reparse=self.reparse,
            empty_expectation_means_no_call=self.empty_expectation_means_no_call,
            expected_arguments_are_options=self.expected_arguments_are_options,
            **fields,
        )

    def row(self, rec: RawRecord, ctx: ParseContext, index: int, **fields: Any
            ) -> dict[str, Any]:
        """:meth:`trajectory`'s row (``Trajectory.to_row``) built without the model, for
        fields already of the schema's types; ``extra`` stays a dict until
        :func:`finish_row` writes it. A format's row fast path: validating a model and
        dumping it again per record was a third of parsing (#12.1)."""
        row = {**_ROW_DEFAULTS, "extra": {}}
        row.update(
            trajectory_id=trajectory_id(ctx.source_file, index, rec.content),
            batch=ctx.batch,
            source_file=ctx.source_file,
            source_line=rec.line,
            source_format=self.name,
            task_id=f"{file_stem(ctx.source_file)}:{rec.line}",
            task_description="",
            reparse=self.reparse,
            empty_expectation_means_no_call=self.empty_expectation_means_no_call,
            expected_arguments_are_options=self.expected_arguments_are_options,
        )
        row.update(fields)
        if len(row) != _ROW_FIELDS:
            missing = sorted(set(Trajectory.model_fields) - set(row))
            unknown = sorted(set(row) - set(Trajectory.model_fields))
            raise TypeError(f"a row needs exactly the Trajectory fields: missing {missing}, "
                            f"unknown {unknown}")
        return row

    def column_defaults(self, ctx: ParseContext) -> dict[str, Any]:
        """The fields :meth:`row` gives every record of the file alike, for a format that
        builds a batch's rows as columns (``xml_arrow``): it adds the others."""
        return {**_ROW_DEFAULTS, "batch": ctx.batch, "source_file": ctx.source_file,
                "source_format": self.name, "reparse": self.reparse,
                "empty_expectation_means_no_call": self.empty_expectation_means_no_call,
                "expected_arguments_are_options": self.expected_arguments_are_options}

    def parse_rows(self, path: Path, ctx: ParseContext) -> ParseResult:
        """:meth:`parse` with the trajectories as table rows (``ParseResult.rows``)."""
        result = self.parse(path, ctx)
        result.rows = [t.to_row() for t in result.trajectories]
        result.trajectories = []
        return result

    def duplicate_key(self, traj: Trajectory) -> str:
        """What makes two records the same task run (tau-bench adds the trial)."""
        return traj.task_id

    def parse(self, path: Path, ctx: ParseContext) -> ParseResult:
        result = ParseResult()
        first_by_task: dict[str, str] = {}
        for index, rec in enumerate(self.records(path)):
            traj = self.attempt(self.build, rec, ctx, index, result.quarantined)
            if traj is None:
                continue
            finish(traj, rec.repairs, first_by_task, self.duplicate_key(traj))
            result.trajectories.append(traj)
        return result

    def attempt(self, build: Callable[[dict[str, Any], RawRecord, ParseContext, int], T],
                rec: RawRecord, ctx: ParseContext, index: int,
                quarantined: list[QuarantinedRecord]) -> T | None:
        """``build`` on a readable record, or None with the record quarantined for why
        it could not be read or built."""
        if rec.error or rec.value is None:
            quarantined.append(ctx.quarantine(
                rec.line, rec.reason or "unreadable", rec.error or "no value", rec.text,
                self.name))
            return None
        try:
            return build(rec.value, rec, ctx, index)
        except RecordError as exc:
            quarantined.append(
                ctx.quarantine(rec.line, exc.reason, str(exc), rec.text, self.name))
        except ValidationError as exc:
            quarantined.append(ctx.quarantine(
                rec.line, "wrong_type", f"field does not fit the schema: {exc}"[:2000],
                rec.text, self.name))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError,
                RecursionError) as exc:
            quarantined.append(ctx.quarantine(
                rec.line, "malformed_record", f"{type(exc).__name__}: {exc}"[:2000],
                rec.text, self.name))
        return None


extra_json = json.JSONEncoder(ensure_ascii=False, default=str).encode
"""``json.dumps(extra, ensure_ascii=False, default=str)`` (how a row's ``extra`` is written)
without building an encoder per call."""


def unregistered_row_tools(steps: list[dict[str, Any]]) -> list[str]:
    """:func:`unregistered_tools` of step rows."""
    return sorted({s["tool_name"] or "?" for s in steps
                   if s["kind"] == "tool_call" and s["tool_type"] == GENERIC_TOOL_TYPE})


def finish_row(row: dict[str, Any], repairs: tuple[str, ...], first_by_task: dict[str, str],
               key: str | None = None, unknown: list[str] | None = None) -> None:
    """:func:`finish` on a row from :meth:`JsonRecordsParser.row`; writes its ``extra``.
    ``unknown``: the row's unregistered tool names when its steps are not in the row
    (``xml_arrow`` builds them in Arrow), else read from its step rows."""
    extra: dict[str, Any] = row["extra"]
    if repairs:
        extra.setdefault("repairs", []).extend(repairs)
    if unknown is None:
        unknown = unregistered_row_tools(row["steps"])
    if unknown:
        extra["unregistered_tools"] = unknown
    key = row["task_id"] if key is None else key
    first = first_by_task.get(key)
    if first is None:
        first_by_task[key] = row["trajectory_id"]
    else:
        extra["duplicate_of"] = first
    row["extra"] = extra_json(extra)
    if row["expected_tools"] is not None:
        row["expected_tools"] = json.dumps(row["expected_tools"])
    if row["expected_calls"] is not None:
        row["expected_calls"] = json.dumps(row["expected_calls"], ensure_ascii=False,
                                           default=str)


def finish(traj: Trajectory, repairs: tuple[str, ...], first_by_task: dict[str, str],
           key: str | None = None) -> None:
    """Record repairs, unknown tools and duplicate task ids on a kept trajectory."""
    if repairs:
        traj.extra.setdefault("repairs", []).extend(repairs)
    unknown = unregistered_tools(traj.steps)
    if unknown:
        traj.extra["unregistered_tools"] = unknown
    key = traj.task_id if key is None else key
    first = first_by_task.get(key)
    if first is None:
        first_by_task[key] = traj.trajectory_id
    else:
        traj.extra["duplicate_of"] = first
