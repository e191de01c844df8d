"""Canonical data contracts shared by every stage.

Every input format is parsed into a :class:`Trajectory` whose ``steps`` carry character
offsets into one rendered ``raw_response`` text. Clip segmentation, tag repair and the
embedded ``<clip_evaluation>`` output all work on those offsets, so a new format only has
to produce steps; nothing downstream knows where a trajectory came from: what a later
stage needs from the format (how a repaired response is re-cut into steps, how routing reads
an expectation) travels on the trajectory, and ``source_format`` is description only.

In Parquet ``steps`` is a nested column (``list<struct>``), written and read by pyarrow, so
no stage decodes step JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

ReparseRule = Literal["xml_tags"]
"""How a tag-repaired response is cut into steps again (see ``formats.reparser``)."""

StepKind = Literal["thought", "tool_call", "tool_result", "answer", "text", "user", "system"]

FINAL_TOOL_TYPE = "final"
GENERIC_TOOL_TYPE = "generic"


class Step(BaseModel):
    """One canonical step of a trajectory, located in the trajectory's ``raw_response``."""

    model_config = ConfigDict(extra="forbid")

    kind: StepKind
    content: str = Field(description="The step's text (for a tool call: the call's full text).")
    start: int = Field(ge=0, description="Char offset of the step's first char in raw_response.")
    end: int = Field(ge=0, description="Char offset one past the step's last char.")
    tool_name: str | None = Field(
        default=None, description="The concrete tool or action, e.g. 'microsandbox_execute'."
    )
    tool_type: str | None = Field(
        default=None, description="Rubric family from the tool registry, e.g. 'microsandbox'."
    )
    tool_input: str | None = Field(
        default=None, description="The call's parameters as text (JSON where the source has it)."
    )
    tool_call_id: str | None = None
    turn: int | None = Field(
        default=None, description="For a tool call, where the source has messages: the "
        "number (0, 1, ...) of the tool-calling assistant message that made it; calls sharing "
        "a turn were made in parallel and have no order among themselves (routing's strict "
        "mode). None: a call of its own.")
    label: float | None = Field(
        default=None,
        description="A per-step label the source carries, on one scale: +1 good, 0 neutral, "
        "-1 bad.",
    )


class Trajectory(BaseModel):
    """One agent run in canonical form: the row contract of ``raw_trajectories``."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    batch: str
    source_file: str
    source_line: int = Field(description="1-based line (or record index) in the source file.")
    source_format: str
    task_id: str
    task_description: str
    raw_response: str
    steps: list[Step]
    success: bool | None = None
    final_result: str | None = None
    duration: float | None = None
    timestamp: str | None = None
    expected_tools: list[str] | None = None
    expected_calls: list[dict[str, Any]] | None = None
    reward: float | None = None
    final_label: float | None = None
    agent_version: str | None = None
    reparse: ReparseRule | None = Field(
        default=None, description="Set by formats whose response is the user's own tagged "
        "text: preprocessing may repair the tags and re-cut the steps with this rule.")
    empty_expectation_means_no_call: bool = Field(
        default=False, description="An empty expected_tools means 'call no tool' (BFCL "
        "irrelevance, routing cases), not 'no particular tool required'.")
    expected_arguments_are_options: bool = Field(
        default=False, description="Each expected argument lists the acceptable values "
        "(BFCL), rather than being the one value expected.")
    extra: dict[str, Any] = Field(default_factory=dict)

    def to_row(self) -> dict[str, Any]:
        """A Parquet-friendly row: steps stay nested (list of structs); the free-form
        values (``extra``, expectations of any shape) become JSON strings."""
        row = self.model_dump(exclude={"steps", "extra", "expected_tools", "expected_calls"})
        row["steps"] = steps_to_rows(self.steps)
        row["extra"] = json.dumps(self.extra, ensure_ascii=False, default=str)
        row["expected_tools"] = (
            json.dumps(self.expected_tools) if self.expected_tools is not None else None
        )
        row["expected_calls"] = (
            json.dumps(self.expected_calls, ensure_ascii=False, default=str)
            if self.expected_calls is not None
            else None
        )
        return row


class QuarantinedRecord(BaseModel):
    """An input record that could not become a trajectory; kept so nothing disappears."""

    model_config = ConfigDict(extra="forbid")

    batch: str
    source_file: str
    source_line: int
    source_format: str | None
    reason: str
    error: str
    excerpt: str = Field(description="A bounded excerpt of the offending record.")


class ParseResult(BaseModel):
    """What a format parser returns for one file: every record lands in exactly one list."""

    trajectories: list[Trajectory] = Field(default_factory=list)
    quarantined: list[QuarantinedRecord] = Field(default_factory=list)
    rows: list[dict[str, Any]] = Field(
        default_factory=list, description="Trajectories as ``raw_trajectories`` rows "
        "(``Trajectory.to_row``) instead of models, when the caller asked for rows.")

    @property
    def records_read(self) -> int:
        return len(self.trajectories) + len(self.rows) + len(self.quarantined)


_STEP_LIST = TypeAdapter(list[Step])

STEP_ARROW_TYPE = pa.struct([
    ("kind", pa.large_string()), ("content", pa.large_string()), ("start", pa.int64()),
    ("end", pa.int64()), ("tool_name", pa.large_string()), ("tool_type", pa.large_string()),
    ("tool_input", pa.large_string()), ("tool_call_id", pa.large_string()),
    ("turn", pa.int64()), ("label", pa.float64()),
])
"""One :class:`Step` as an Arrow struct, its fields in the model's order, so a ``steps``
cell read back from Arrow is the dict ``steps_to_rows`` makes. Fixed rather than inferred
per batch: inference types a field that is None in every step of a batch as ``null``, so
two batches' tables disagree on the schema, and compiled stages need one type to work on."""

STEPS_ARROW_TYPE = pa.list_(STEP_ARROW_TYPE)
"""The ``steps`` column: a list of :data:`STEP_ARROW_TYPE` per trajectory."""


def steps_to_rows(steps: list[Step]) -> list[dict[str, Any]]:
    """The ``steps`` cell: plain dicts that pyarrow writes as ``list<struct>``."""
    return _STEP_LIST.dump_python(steps)


def steps_from_rows(value: Iterable[Mapping[str, Any]] | None) -> list[Step]:
    """Steps back from the ``steps`` column (dicts, as pyarrow reads a ``list<struct>``).

    Validated in one pydantic call; no JSON is involved.
    """
    return _STEP_LIST.validate_python(list(value) if value is not None else [])
