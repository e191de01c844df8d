"""The judges file: a YAML list under ``judges:`` of judge configurations.

A judge is configured, not coded. Keys are never in this file, only the *name* of the
environment variable that holds one (``api_key_env``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from eval_pipeline.rubrics import ALL_EVALUATIONS, ASSESSMENT_KINDS, EVAL_KIND_CLIP

Provider = Literal["heuristic", "openai", "openai_compatible", "anthropic"]
OutputMode = Literal["json_schema", "json_object", "tool", "text"]
JudgeMode = Literal["live", "batch"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A field that is 50 kB of tool output costs a judge as much as the rest of the prompt many
# times over and can overflow a small model's context; cut above this by default.
DEFAULT_INPUT_MAX_CHARS = 50_000
# A cut keeps half of this from the start of a field, more than the 1,000 characters the
# sequence prompt shows of a step, so the sequence prompt never shows a cut (and a limit
# this low already cuts ordinary clips).
MIN_INPUT_MAX_CHARS = 2_500


class JudgeConfig(BaseModel):
    # strict: a YAML ``concurrency: yes`` or ``max_tokens: "2k"`` is a mistake to report,
    # not a value to coerce.
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(description="Asset-safe name: lower case, digits, underscores.")
    provider: Provider = "heuristic"
    model: str = "heuristic-v1"
    base_url: str | None = None
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable holding the API key."
    )
    preset: str | None = Field(
        default=None, description="openai_compatible preset: deepseek, kimi, gemini, vllm ..."
    )
    output_mode: OutputMode | None = Field(
        default=None,
        description="Force the reply mode: json_schema, json_object, tool (a forced tool or "
        "function call) or text (plain text: JSON or the seed's 'LABEL: x' form). None: the "
        "preset's mode, with a fallback when the server refuses it (see docs/judges.md).",
    )
    schema_bounds: bool | None = Field(
        default=None,
        description="Send the score bounds (minimum/maximum) in the wire schema; None: the "
        "preset's setting. Turn off for a host that refuses the keywords.",
    )
    score_steps: int | None = Field(
        default=None, ge=1, le=100,
        description="Send each score as an enum of steps+1 evenly spaced values in [0, 1], "
        "for grammar engines that ignore bounds on numbers (llama.cpp); None: the preset's.")
    text_max_chars: int | None = Field(
        default=None, ge=1,
        description="maxLength on the reply's free-text fields (reasoning, summary, "
        "explanation) in the wire schema, for grammar engines: a small model cannot run on "
        "until max_tokens cuts its JSON off. None: the preset's (local servers: 2000).")
    project: str | None = Field(default=None, description="Vertex AI: the Google Cloud project")
    location: str | None = Field(
        default=None, description="Vertex AI: the region (e.g. us-central1) or global")
    temperature: float = Field(default=0.1, ge=0.0, le=2.0)
    max_tokens: int = Field(default=2000, ge=1)
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    concurrency: int = Field(default=4, ge=1)
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    input_price_per_mtok: float | None = Field(
        default=None, ge=0,
        description="USD per million input tokens; None uses the preset default."
    )
    output_price_per_mtok: float | None = Field(default=None, ge=0)
    budget_usd: float | None = Field(default=None, gt=0,
                                     description="Stop issuing calls past this.")
    context_budget_chars: int | None = Field(
        default=None, ge=0,
        description="Cap on the earlier-clip summaries in a clip prompt (characters): the "
        "most recent that fit are kept. None: unbounded, as the original tool.")
    input_max_chars: int = Field(
        default=DEFAULT_INPUT_MAX_CHARS, ge=MIN_INPUT_MAX_CHARS,
        description="Longest trajectory field (clip, task description, thought, tool input, "
        "result) an LLM judge is sent, in characters; a longer one keeps its head and tail "
        "around a marker saying how much was left out, and the row records it "
        "(truncated_chars). The heuristic judge reads every field whole.")
    repeats: int = Field(
        default=1, ge=1,
        description="Ask each judgment this many times (each repeat its own call and cache "
        "entry) to measure the judge's stability: the row keeps the mean over the repeats "
        "that answered, their per-metric standard deviation (score_std) and whether they "
        "fall on both sides of the pass threshold (straddles). Cost and calls multiply. "
        "In batch mode the repeats are lines of the same wave, so waves do not.")
    evaluations: list[str] = Field(
        default_factory=lambda: list[str](ALL_EVALUATIONS),
        description="Evaluation kinds this judge produces: clip_rubric, thought_to_tool, "
        "query_to_thought, sequence_optimality, category_assessment, trajectory_assessment "
        "(default: all six).",
    )
    assessments: bool = Field(
        default=True,
        description="Make the category and trajectory assessments (category_assessment, "
        "trajectory_assessment) after each trajectory's clips: one request per tool "
        "category used and one per trajectory. false drops both from evaluations, to save "
        "their cost; see docs/judges.md, Assessments.")

    mode: JudgeMode = Field(
        default="live",
        description="live: one request per judgment, answered in seconds. batch: the "
        "provider's batch API (OpenAI Batch, Anthropic Message Batches, or an "
        "OpenAI-compatible server with /v1/files and /v1/batches): half the price, answers "
        "within 24 hours; see docs/judges.md, Batch mode.")
    batch_waves: int | None = Field(
        default=None, ge=1,
        description="Batch mode: at most this many waves (provider batches in sequence) "
        "per run. None: the full context chain, one wave per clip position (clip k of every "
        "trajectory in wave k). N: each clip carries the summaries of the earlier clips of "
        "its stretch of N (1: no context chain, everything in one wave).")
    batch_poll_s: float = Field(
        default=30.0, gt=0,
        description="Batch mode: seconds between polls of a pending batch (CLI wait loop "
        "and the batch results sensor's interval floor).")

    def key_env(self) -> str | None:
        """The variable that holds this judge's key: ``api_key_env``, or the preset's usual
        one (OPENAI_API_KEY, ...) when the entry leaves it out; None for keyless judges."""
        from eval_pipeline.judges.presets import key_env

        return key_env(self)

    @field_validator("evaluations")
    @classmethod
    def _known_evaluations(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in ALL_EVALUATIONS]
        if unknown:
            raise ValueError(f"unknown evaluation kinds {unknown}; known: "
                             f"{', '.join(ALL_EVALUATIONS)}")
        if not value:
            raise ValueError("evaluations must name at least one evaluation kind")
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate evaluation kinds in {value}")
        # One canonical order, so the same set always hashes to the same code_version.
        return [k for k in ALL_EVALUATIONS if k in value]

    @model_validator(mode="after")
    def _assessments_read_the_clips(self) -> JudgeConfig:
        if not self.assessments and any(k in ASSESSMENT_KINDS for k in self.evaluations):
            kept = [k for k in self.evaluations if k not in ASSESSMENT_KINDS]
            if not kept:
                raise ValueError("evaluations must name at least one evaluation kind "
                                 "besides the assessments, which assessments: false drops")
            self.evaluations = kept
        asked = [k for k in ASSESSMENT_KINDS if k in self.evaluations]
        if asked and EVAL_KIND_CLIP not in self.evaluations:
            raise ValueError(f"{' and '.join(asked)} assess the clips' evaluations, so "
                             "evaluations must include clip_rubric (or set assessments: "
                             "false)")
        return self

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        # The value is never repeated: a key pasted here instead of its variable's name must
        # not reach an error message.
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError("must be the name of an environment variable (letters, digits, "
                             "underscores), not the key itself; the value is not shown")
        return value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host, e.g. "
                             "http://localhost:8000/v1")
        return value

    @field_validator("name")
    @classmethod
    def _asset_safe(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"judge name {value!r} must match {_NAME.pattern} (it becomes an asset key)"
            )
        return value


class JudgesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judges: list[JudgeConfig] = Field(min_length=1)

    @field_validator("judges")
    @classmethod
    def _unique(cls, judges: list[JudgeConfig]) -> list[JudgeConfig]:
        names = [j.name for j in judges]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            # Each name becomes an asset key: two judges cannot share one.
            raise ValueError(f"judge {dupes[0]!r}, field name: {names.count(dupes[0])} judges "
                             "have this name; names must be unique (each names an asset)")
        return judges


DEFAULT_JUDGES = [JudgeConfig(name="heuristic")]


def without_assessments(judges: list[JudgeConfig]) -> list[JudgeConfig]:
    """The judges with ``assessments: false`` (the CLI's ``--no-assessments``: one run
    without the category and trajectory assessments, whatever the judges file says)."""
    try:
        return [JudgeConfig.model_validate({**j.model_dump(exclude_unset=True),
                                            "assessments": False}) for j in judges]
    except ValidationError as exc:
        raise JudgesFileError(describe_errors(exc, {"judges": [
            j.model_dump(exclude_unset=True) for j in judges]})) from None


class JudgesFileError(ValueError):
    """A judges file that cannot be used, said in one line naming the judge and the field.

    The line never repeats a value that could be a secret, so it is safe for a terminal,
    a log or the UI.
    """


def load_judges(path: str | Path | None) -> list[JudgeConfig]:
    """The judges of a judges file (None: the heuristic judge), checked in full before
    anything runs: a mistake found after the first batch would waste the batches before."""
    if path is None:
        return list(DEFAULT_JUDGES)
    text = Path(path).read_text("utf-8")
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        raise JudgesFileError(_yaml_problem(exc)) from None
    return parse_judges(data)


def parse_judges(data: object) -> list[JudgeConfig]:
    """Validate a parsed judges file; :class:`JudgesFileError` with one line if it is bad."""
    if data is None:
        raise JudgesFileError("the file is empty; it needs a list of judges under 'judges:'")
    refuse_inline_secrets(data)
    try:
        judges = JudgesFile.model_validate(data).judges
    except ValidationError as exc:
        raise JudgesFileError(describe_errors(exc, data)) from None
    for judge in judges:
        _check_endpoint(judge)
    return judges


# -- one readable line per mistake ---------------------------------------------------------

class _StrictLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys in a mapping; a judges file with
    ``concurrency`` twice has a mistake in it, so that is refused instead."""


def _no_duplicate_keys(loader: yaml.SafeLoader, node: yaml.MappingNode,
                       deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"field {key!r} is given twice in one mapping",
                key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                              _no_duplicate_keys)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    # PyYAML's own message quotes the offending line, which may hold a key; keep only
    # the position and the problem.
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or type(exc).__name__
    return f"not valid YAML{where}: {problem}"


def _judge_label(data: object, index: object) -> str:
    entries = data.get("judges") if isinstance(data, dict) else None
    if isinstance(index, int) and isinstance(entries, list) and index < len(entries):
        entry = entries[index]
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) \
                and _NAME.match(entry["name"]) and not looks_like_secret(entry["name"]):
            return f"judge {entry['name']!r}"
    return f"judge #{index + 1 if isinstance(index, int) else index}"


def _shown(value: object) -> str:
    """A value fit to repeat in the message: numbers, booleans, short plain words."""
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str) and len(value) <= 40 and not looks_like_secret(value):
        return repr(value)
    return ""


def _message(error: Any, field: str) -> str:
    kind, value = error["type"], error.get("input")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(field, JudgeConfig.model_fields, n=1)
        return ("unknown field" + (f" (did you mean {close[0]}?)" if close else
                                   "; see docs/judges.md for the fields a judge takes"))
    if kind == "literal_error" and field == "provider":
        known = ", ".join(sorted(get_args(Provider)))
        return f"unknown provider {_shown(value) or '(not shown)'} (known: {known})"
    if kind == "missing":
        return "required"
    bound = error.get("ctx") or {}
    plain = {"greater_than_equal": f"must be at least {bound.get('ge')}",
             "greater_than": f"must be more than {bound.get('gt')}",
             "less_than_equal": f"must be at most {bound.get('le')}",
             "less_than": f"must be less than {bound.get('lt')}",
             "int_type": "must be a whole number", "float_type": "must be a number",
             "bool_type": "must be true or false", "string_type": "must be text",
             "list_type": "must be a list"}
    text = plain.get(kind) or error["msg"].removeprefix("Value error, ")
    text = text[:1].lower() + text[1:]
    shown = _shown(value) if kind != "value_error" else ""
    return f"{text}, got {shown}" if shown else text


def describe_errors(exc: ValidationError, data: object) -> str:
    """pydantic's errors as one line: the first, naming the judge and the field, and how
    many more there are (fix one, the next is shown). No traceback, no docs URL, no value
    that might be a secret."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = first["loc"]
    if loc[:1] == ("judges",) and len(loc) >= 3:
        field = ".".join(str(p) for p in loc[2:])
        line = f"{_judge_label(data, loc[1])}, field {field}: {_message(first, str(loc[2]))}"
    elif loc[:1] == ("judges",) and len(loc) == 2 and first["type"] == "value_error":
        # a rule across fields (the assessments need clip_rubric)
        line = f"{_judge_label(data, loc[1])}, field evaluations: {_message(first, '')}"
    elif loc[:1] == ("judges",) and len(loc) == 2:
        line = f"{_judge_label(data, loc[1])}: must be a mapping of fields (name:, provider: ...)"
    elif loc == ("judges",) and first["type"] == "value_error":
        line = _message(first, "judges")
    elif loc == ("judges",):
        line = f"field judges: {_message(first, 'judges')} (a list of judges)"
    elif loc == ():
        line = "the file must be a mapping with a list of judges under 'judges:'"
    else:
        line = f"field {'.'.join(str(p) for p in loc)}: {_message(first, str(loc[-1]))}"
    more = len(errors) - 1
    line = " ".join(line.split())
    return f"{line} (and {more} more)" if more else line


# -- keys never in the file ----------------------------------------------------------------

# Fields people write a key into by habit. api_key_env is the one that belongs.
_SECRET_FIELD = re.compile(
    r"^(?:api[_-]?key|key|apikey|token|access[_-]?token|auth|authorization|bearer|secret|"
    r"password|passwd|[a-z_]*_(?:key|token|secret|password))$", re.IGNORECASE)
# Key shapes of the providers this project talks to, and long unbroken letter-and-digit runs
# (hex or base62 tokens); model names have separators and stay short.
_SECRET_VALUE = re.compile(
    r"(?:\bsk-[A-Za-z0-9_\-]{12,}|\bsk-ant-|\bAIza[0-9A-Za-z_\-]{20,}|\bya29\.|"
    r"\b(?:gsk|xai|hf|ghp|github_pat)_[A-Za-z0-9_]{16,}|\bBearer\s+\S{8,}|"
    r"\b(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{32,}\b)")
_URL_SECRET = re.compile(r"[?&](?:key|api[_-]?key|token|access[_-]?token|sig)=", re.IGNORECASE)


def looks_like_secret(value: str) -> bool:
    return bool(_SECRET_VALUE.search(value))


def _walk(value: object, path: tuple[object, ...] = ()) -> Iterator[tuple[tuple[object, ...],
                                                                          object]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index))


def refuse_inline_secrets(data: object) -> None:
    """Refuse a key written into the judges file, naming the field, never the value.

    A judges file is committed, shared and pasted into issues; keys belong in environment
    variables, named by ``api_key_env``. Runs before validation, so no later message (an
    unknown field, a wrong type) can quote the key either.
    """
    advice = ("a key must not be written in the judges file (the value is not shown); put "
              "it in an environment variable and name that variable with api_key_env")
    for path, value in _walk(data):
        if not path:
            continue
        in_judge = path[0] == "judges" and len(path) >= 2
        label = _judge_label(data, path[1]) if in_judge else "the file"
        field = ".".join(str(p) for p in (path[2:] if in_judge else path))
        where = f"{label}, field {field}" if field else label
        key = path[-1]
        if isinstance(key, str) and key != "api_key_env" and _SECRET_FIELD.match(key) \
                and value not in (None, ""):
            raise JudgesFileError(f"{where}: {advice}")
        if isinstance(value, str):
            if key == "api_key_env" and not _ENV_NAME.match(value):
                raise JudgesFileError(
                    f"{label}, field api_key_env: must be the name of an environment "
                    "variable (letters, digits, underscores) that holds the key, not the "
                    "key itself (the value is not shown)")
            if key == "base_url" and (urlsplit(value).password is not None
                                      or _URL_SECRET.search(value)):
                raise JudgesFileError(f"{label}, field base_url: credentials in the URL; "
                                      f"{advice}")
            if looks_like_secret(value):
                raise JudgesFileError(f"{where}: the value looks like a key; {advice}")


def _check_endpoint(judge: JudgeConfig) -> None:
    """What only the presets can tell (an unknown preset, a missing base_url or project,
    an output_mode the provider lacks, a budget without a price), now, not at the first
    call of the first batch."""
    if judge.provider == "heuristic":
        if judge.mode == "batch":
            raise JudgesFileError(f"judge {judge.name!r}, field mode: the heuristic judge "
                                  "has no batch API (mode: batch is for openai, anthropic "
                                  "and openai_compatible judges)")
        return
    from eval_pipeline.judges.presets import resolve_endpoint
    from eval_pipeline.judges.pricing import price_for

    try:
        endpoint = resolve_endpoint(judge)
    except ValueError as exc:
        raise JudgesFileError(str(exc)) from None
    if judge.budget_usd is not None and price_for(judge, endpoint.model,
                                                  local=endpoint.local) is None:
        raise JudgesFileError(
            f"judge {judge.name!r}, field budget_usd: model {endpoint.model!r} has no known "
            "price, so a budget cannot be kept; set input_price_per_mtok and "
            "output_price_per_mtok")
