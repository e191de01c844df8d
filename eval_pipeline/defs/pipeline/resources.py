"""Dagster resources for judges: configuration in the UI, keys only through EnvVar.

One resource per judge (``judge_<name>``). Its fields mirror the judges-file entry so the
launchpad shows (and can override) every setting, while ``api_key`` is bound to
``dg.EnvVar(api_key_env)``: the UI shows the variable's name, never its value, and a run
without the variable fails at start instead of midway. This is the only module of the
judge layer that imports dagster.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from eval_pipeline import progress
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.assessments import assessment_requests
from eval_pipeline.judges.base import Judge
from eval_pipeline.judges.cache import JudgeCache, default_cache_path
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import redact
from eval_pipeline.judges.requests import (
    Truncation,
    build_react_requests,
    build_request,
    fit_tasks,
    prompt_hash,
    record_truncation,
)
from eval_pipeline.judges.runner import (
    ClipTask,
    JudgeJob,
    JudgeRuntime,
    JudgmentRow,
    run_job,
)
from eval_pipeline.phoenix.connection import PhoenixConnection
from eval_pipeline.rubrics import EVAL_KIND_CLIP

if TYPE_CHECKING:  # the batch package imports both SDKs; only batch-mode judges need them
    from eval_pipeline.judges.batch.engine import BatchRun

# JudgeConfig fields carried by the resource; None means "not set in the judges file".
_CONFIG_FIELDS = tuple(JudgeConfig.model_fields)


class LLMJudgeResource(dg.ConfigurableResource):
    """One judge: provider client, cache, limits, retries, breaker and budget."""

    name: str
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = Field(default=None, description="Name of the key's variable")
    preset: str | None = None
    output_mode: str | None = None
    schema_bounds: bool | None = None
    score_steps: int | None = None
    text_max_chars: int | None = None
    project: str | None = None
    location: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None
    max_retries: int | None = None
    concurrency: int | None = None
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    input_price_per_mtok: float | None = None
    output_price_per_mtok: float | None = None
    budget_usd: float | None = None
    context_budget_chars: int | None = None
    input_max_chars: int | None = None
    repeats: int | None = Field(
        default=None, description="Times each judgment is asked (default 1): see "
        "docs/judges.md, Repeats")
    evaluations: list[str] | None = Field(
        default=None, description="Evaluation kinds to produce (default: all six)")
    mode: str | None = Field(default=None, description="live (default) or batch: the "
                             "provider's batch API, half price; see docs/judges.md")
    batch_waves: int | None = None
    batch_poll_s: float | None = None
    assessments: bool | None = Field(
        default=None, description="false: no category or trajectory assessments "
        "(default true); set it here in the launchpad to turn them off for one run")
    api_key: str | None = Field(default=None, description="Bound from EnvVar(api_key_env)")
    cache_path: str | None = Field(
        default=None, description="SQLite judge cache; default $DAGSTER_HOME/storage")
    cache_enabled: bool = True
    retry_base_s: float = Field(default=0.5, description="First backoff wait, doubled each try")
    breaker_threshold: int = Field(
        default=3, description="Consecutive failed calls that stop the judge")
    check_endpoint: bool = Field(
        default=False, description="Before the judgments step, send one 1-token request to "
        "the judge's endpoint (once per process): an unreachable base_url or a refused key "
        "fails the run at once, in one line, instead of leaving failed rows. On in the UI's "
        "code location; the CLI checks with --check-judges instead.")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Fail at once, naming the judge and its base URL, when its endpoint cannot be
        used: a run launched from the UI would otherwise do its ingest work and then fail
        every judgment on an open breaker."""
        if not self.check_endpoint:
            return
        config = self.judge_config()
        if config.provider != "heuristic":
            # Here, not at the top: it imports both provider SDKs, a second of CPU in
            # every process that loads the definitions (each CLI worker, #12.4).
            from eval_pipeline.judges.check import check_judge_once

            check_judge_once(config, self.api_key)

    def judge_config(self) -> JudgeConfig:
        values = {f: getattr(self, f) for f in _CONFIG_FIELDS}
        return JudgeConfig(**{k: v for k, v in values.items() if v is not None})

    def build(self) -> Judge:
        """The provider client; the caller closes it (a :class:`JudgeJob` run does)."""
        return make_judge(self.judge_config(), self.api_key)

    def fit(self, tasks: Sequence[ClipTask]) -> tuple[list[ClipTask], Truncation]:
        """The tasks as this judge is sent them: an LLM judge's oversized fields cut to
        ``input_max_chars``; the heuristic reads them whole (no context window, no cost)."""
        config = self.judge_config()
        limit = None if config.provider == "heuristic" else config.input_max_chars
        return fit_tasks(tasks, limit)

    def open_cache(self) -> JudgeCache | None:
        if not self.cache_enabled or self.judge_config().provider == "heuristic":
            return None
        return JudgeCache(Path(self.cache_path) if self.cache_path else default_cache_path())

    def runtime(self, cache: JudgeCache | None = None) -> JudgeRuntime:
        """Fresh per run: the rate limiters bind to the running event loop."""
        return JudgeRuntime.from_config(self.judge_config(), cache=cache,
                                        retry_base_s=self.retry_base_s,
                                        breaker_threshold=self.breaker_threshold)

    def job(self, cache: JudgeCache | None = None) -> JudgeJob:
        """This judge's share of a run, for ``run_judges``; the caller closes ``cache``."""
        return JudgeJob(self.build(), self.runtime(cache), self.judge_config().evaluations)

    async def run(self, tasks: Sequence[ClipTask]) -> list[JudgmentRow]:
        """Judge every clip with cache, limits and budget: a row for every judgment, failed
        rows (never an exception) when the provider fails or the breaker opens."""
        tasks, truncation = self.fit(tasks)
        cache = self.open_cache()
        try:
            return record_truncation((await run_job(self.job(cache), tasks)).rows, truncation)
        finally:
            if cache is not None:
                cache.close()


    async def run_result(self, tasks: Sequence[ClipTask]) -> JudgeOutcome:
        """Like :meth:`run`, but never raises: a dead provider or an open breaker leaves a
        failed row, with the error, for every judgment it did not make."""
        config = self.judge_config()
        identity = {"judge": config.name, "provider": config.provider,
                    "model": config.model or ""}
        mode, note = "", None
        tasks, truncation = self.fit(tasks)
        try:
            judge = self.build()
            identity = {"judge": judge.name, "provider": judge.provider, "model": judge.model}
            cache = self.open_cache()
            try:
                # The CLI's progress bar counts the judgments as they come back.
                job = JudgeJob(judge, self.runtime(cache), config.evaluations,
                               progress=progress.current().judgment_callback())
                rows = (await run_job(job, tasks, config.concurrency)).rows
            finally:
                if cache is not None:
                    cache.close()
                mode = getattr(judge, "reply_mode", "")
                note = getattr(judge, "reply_mode_note", None)
            return JudgeOutcome(config.name, record_truncation(rows, truncation), mode, note)
        except Exception as exc:  # the other judges' work must survive any failure here
            error = redact(f"{type(exc).__name__}: {exc}", (self.api_key,))
            rows = []
        rows += failed_rows(tasks, config.evaluations, rows, error, identity)
        return JudgeOutcome(config.name, record_truncation(rows, truncation), mode, note,
                            failed=error)


@dataclass
class JudgeOutcome:
    """What one judge did in a run; ``failed`` says why it stopped, if it did."""

    name: str
    rows: list[JudgmentRow]
    reply_mode: str
    reply_mode_note: str | None
    failed: str | None = None


def failed_rows(tasks: Sequence[ClipTask], evaluations: Sequence[str],
                done: Sequence[JudgmentRow], error: str, identity: dict[str, str]
                ) -> list[JudgmentRow]:
    """A failed row for every requested judgment not in ``done`` (every judgment accounted
    for, no score invented)."""
    have = {(r.trajectory_id, r.clip_index, r.evaluation_kind, r.tool_type) for r in done}
    by_trajectory: dict[str, list[ClipTask]] = {}
    for task in tasks:
        by_trajectory.setdefault(task.trajectory_id, []).append(task)
    requests = []
    for trajectory in by_trajectory.values():
        if EVAL_KIND_CLIP in evaluations:
            requests += [build_request(t, "") for t in trajectory]
        requests += build_react_requests(trajectory, evaluations)
        requests += assessment_requests(trajectory, evaluations)
    return [JudgmentRow(
        trajectory_id=r.trajectory_id, clip_index=r.clip_index,
        evaluation_kind=r.evaluation_kind, tool_type=r.tool_type,
        judge=identity["judge"], provider=identity["provider"], model=identity["model"],
        status="failed", success=False, scores="{}", error=error,
        prompt_hash=prompt_hash(r), template_version=r.template_version,
        prompt_chars=len(r.system_prompt) + len(r.user_prompt),
    ) for r in requests
        if (r.trajectory_id, r.clip_index, r.evaluation_kind, r.tool_type) not in have]


def judge_resource(config: JudgeConfig, **settings: object) -> LLMJudgeResource:
    values = config.model_dump(exclude_unset=True)
    values["name"] = config.name
    key_env = config.key_env()  # api_key_env, or the preset's usual variable
    api_key = dg.EnvVar(key_env) if key_env else None
    return LLMJudgeResource(**values, api_key=api_key, **settings)  # type: ignore[arg-type]


def judge_resources(configs: Sequence[JudgeConfig], **settings: object
                    ) -> dict[str, LLMJudgeResource]:
    """``judge_<name>`` for every configured judge; ``settings`` e.g. cache_path=..."""
    return {f"judge_{c.name}": judge_resource(c, **settings) for c in configs}


# --- Phoenix (#17) -------------------------------------------------------------------------

PHOENIX_URL_ENV = "EVAL_PIPELINE_PHOENIX_URL"
"""Base URL of the Phoenix server; when set, the UI's code location reads its traces
(phoenix_sensor) and writes the evaluations back (phoenix_annotations)."""
PHOENIX_PROJECT_ENV = "EVAL_PIPELINE_PHOENIX_PROJECT"
PHOENIX_API_KEY_ENV = "PHOENIX_API_KEY"
"""Phoenix's own name for its key, so a team's existing setting works as it is."""


class PhoenixResource(dg.ConfigurableResource):
    """An Arize Phoenix server: the source of traces and the sink of their evaluations.

    ``api_key`` is bound to ``dg.EnvVar`` (``PHOENIX_API_KEY``): the UI shows the variable's
    name, never its value; it goes only into the client's header."""

    base_url: str = Field(description="e.g. http://127.0.0.1:6006")
    api_key: str | None = Field(default=None, description="Bound from EnvVar(PHOENIX_API_KEY)")
    project: str = Field(default="default", description="The Phoenix project to read from")
    settle_seconds: float = Field(
        default=10.0, ge=0.0, description="A trace is read once its root span has ended this "
        "long ago (children exported after their root are still in it)")
    lookback_seconds: float = Field(
        default=3600.0, ge=0.0, description="Root spans are listed from this long before the "
        "latest one taken, so a long-running trace is found when it ends; keep it above the "
        "longest agent run")
    max_traces_per_tick: int = Field(default=500, ge=1)
    drops_dir: str | None = Field(
        default=None, description="Where the pulled span drops are kept; default: "
        "<store>/phoenix/<project>/")
    timeout_s: float = Field(default=30.0, gt=0.0)

    def connection(self) -> PhoenixConnection:
        return PhoenixConnection(base_url=self.base_url, api_key=self.api_key,
                                 project=self.project, timeout_s=self.timeout_s)


def phoenix_resource_from_env() -> PhoenixResource | None:
    """The UI's Phoenix resource when ``EVAL_PIPELINE_PHOENIX_URL`` is set, else None (no
    Phoenix source or sink in the graph)."""
    if not os.environ.get(PHOENIX_URL_ENV):
        return None
    key = dg.EnvVar(PHOENIX_API_KEY_ENV) if os.environ.get(PHOENIX_API_KEY_ENV) else None
    return PhoenixResource(
        base_url=dg.EnvVar(PHOENIX_URL_ENV),
        api_key=key,
        project=os.environ.get(PHOENIX_PROJECT_ENV) or "default")


# -- batch mode (#18): the provider's batch API instead of live requests -------------------

def _ledger_path(resource: LLMJudgeResource) -> Path:
    from eval_pipeline.judges.batch.ledger import ledger_path_for

    return ledger_path_for(Path(resource.cache_path) if resource.cache_path
                           else default_cache_path())


async def run_batch(resource: LLMJudgeResource, tasks: Sequence[ClipTask],
                    partitions: Sequence[str], log: Callable[[str], None] | None = None
                    ) -> tuple[BatchRun, JudgeOutcome | None]:
    """Advance a batch-mode judge's job on these partitions (collect what has ended,
    submit the next wave); the outcome, with every row, once the job is done.

    A function beside the resource rather than a method, so the resource's fields (what
    the launchpad shows) stay as they are for the other judges."""
    from eval_pipeline.judges.batch.engine import advance
    from eval_pipeline.judges.batch.ledger import BatchLedger

    config = resource.judge_config()
    fitted, truncation = resource.fit(tasks)
    judge = resource.build()
    cache = resource.open_cache()
    try:
        with BatchLedger(_ledger_path(resource)) as ledger:
            state = await advance(config, judge, fitted, partitions, ledger, cache, log=log)
    finally:
        if cache is not None:
            cache.close()
        await judge.aclose()
    if state.state != "done":
        return state, None
    rows = record_truncation(state.rows, truncation)
    return state, JudgeOutcome(config.name, rows, judge.reply_mode, judge.reply_mode_note)


async def poll_batches(resource: LLMJudgeResource
                       ) -> dict[str, tuple[list[str], list[str]]]:
    """Ask the provider about the judge's batches in flight; open job -> (its partitions,
    the ids of its batches that have now ended), for every job a run can move on."""
    from eval_pipeline.judges.batch.engine import poll
    from eval_pipeline.judges.batch.ledger import BatchLedger

    path = _ledger_path(resource)
    if not path.exists():
        return {}
    judge = resource.build()
    try:
        with BatchLedger(path) as ledger:
            ended = await poll(judge, ledger)
            return {job.job: (job.partitions, [b.batch_id for b in ended[job.job]])
                    for job in ledger.open_jobs(judge.name) if job.job in ended}
    finally:
        await judge.aclose()
