"""Run a routing suite through a model: the routing evals document's runner, as data.

Per case, as the document's runner does: the prompt and the tool definitions go to the
model; each tool it calls is answered with the case's canned result; the loop goes on until
the model answers without calling a tool (or ``max_turns`` requests were made). The
conversation is recorded as a trajectory (the chat format's steps, so the calls of one
assistant message share a ``turn`` and the modes treat them as unordered) and checked by
:func:`eval_pipeline.routing.check_routing`, which gives every trajectory and argument mode's
verdict at once.

A case whose model call fails (an HTTP error after the retries, a refusal, an answer cut
off at ``max_tokens``) has no verdict: it is an ``error`` with the error's text, counted
apart from the FAILs, never a pass or a fail made up for it.

Requests go through the judges' machinery, one
:class:`~eval_pipeline.judges.judgment.JudgeRuntime` per suite run built from the entry as a
judge's is (:func:`~eval_pipeline.judges.judgment.guarded_call`): the entry's
``concurrency`` (conversations at once), its per-minute request and token limits and
adaptive 429 handling, the judges' retry policy (``max_retries`` failures, 429s bounded by
time, Retry-After honoured), the circuit breaker (after repeated failures, or at once on a
bad key or unknown model, no further call is made: every case not yet done is an
``error`` saying "circuit breaker open: <reason>", instead of each retrying a dead
provider) and ``budget_usd`` (each request's worst case reserved before it is sent; a
case whose next request does not fit is an ``error`` saying "budget cap reached").
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from eval_pipeline.formats.chat import render_messages
from eval_pipeline.judges._common import estimate_tokens
from eval_pipeline.judges.base import JudgeError
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import redact
from eval_pipeline.judges.judgment import JudgeRuntime, guarded_call
from eval_pipeline.routing import (
    TRAJECTORY_MODES,
    ArgumentMode,
    RoutingResult,
    TrajectoryMode,
    check_routing,
)
from eval_pipeline.routing_suite.protocol import Message, ModelTurn, ToolCallingModel
from eval_pipeline.routing_suite.spec import RoutingSuite, SuiteCase, ToolDefinition
from eval_pipeline.tool_registry import default_registry

CaseStatus = Literal["pass", "fail", "error"]


@dataclass
class CaseOutcome:
    """One case as it ran: the verdict (``result``; None when the model call failed), the
    recorded conversation, and what it cost."""

    suite: str
    case: SuiteCase
    status: CaseStatus
    result: RoutingResult | None
    expected_tools: list[str]
    actual_tools: list[str]
    conversation: list[Message]
    error: str | None = None
    turns: int = 0
    stopped_at_max_turns: bool = False
    final_answer: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    latency_s: float = 0.0


@dataclass
class SuiteRun:
    """Every case of one suite against one model."""

    suite: str
    suite_file: str
    model_name: str  # the judges-file entry
    provider: str
    model: str
    match_mode: TrajectoryMode
    argument_mode: ArgumentMode
    outcomes: list[CaseOutcome] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(o.status == "pass" for o in self.outcomes)

    @property
    def failed(self) -> int:
        return sum(o.status == "fail" for o in self.outcomes)

    @property
    def errors(self) -> int:
        return sum(o.status == "error" for o in self.outcomes)

    def passed_in_mode(self, mode: TrajectoryMode) -> int:
        """Cases that pass in ``mode`` with each case's own argument mode."""
        return sum(bool(o.result.mode_results[mode][o.result.argument_mode])
                   for o in self.outcomes if o.result is not None)

    def table(self) -> pd.DataFrame:
        return suite_table([self])


def trajectory_id(suite: str, case: str, model: str) -> str:
    digest = hashlib.sha256(f"{suite}\x00{case}\x00{model}".encode()).hexdigest()[:16]
    return f"suite-{digest}"


def _steps(conversation: Sequence[Message]) -> list[Any]:
    return render_messages(list(conversation), default_registry()).steps


def suite_runtime(config: JudgeConfig, retry_base_s: float = 0.5,
                  breaker_threshold: int = 3) -> JudgeRuntime:
    """The machinery of one suite run, built from the entry as a judge's is (its limiter,
    retries, breaker, budget and price); fresh per run, as its limiter binds to the running
    event loop. No cache: a suite measures what the model does today."""
    return JudgeRuntime.from_config(config, retry_base_s=retry_base_s,
                                    breaker_threshold=breaker_threshold)


async def _ask(model: ToolCallingModel, conversation: Sequence[Message],
               tools: Sequence[ToolDefinition], runtime: JudgeRuntime) -> ModelTurn:
    """One model request, guarded as a judge's request is (:func:`guarded_call`)."""
    estimate = estimate_tokens(json.dumps(list(conversation), ensure_ascii=False),
                               json.dumps([t.openai() for t in tools], ensure_ascii=False))
    return await guarded_call(lambda: model.turn(conversation, tools), runtime,
                              estimated_input_tokens=estimate)


async def run_case(model: ToolCallingModel, suite: RoutingSuite, case: SuiteCase, *,
                   mode: TrajectoryMode = "superset", argument_mode: ArgumentMode = "exact",
                   runtime: JudgeRuntime | None = None) -> CaseOutcome:
    """Ask, answer the calls with canned results, repeat; then check the calls made.
    ``runtime``: the suite run's (:func:`suite_runtime`), shared by its cases so its
    breaker, budget and limits span them; a fresh one for the entry when None."""
    runtime = runtime or suite_runtime(model.config)
    expected_tools, expected_calls, rules = case.expectation()
    mode, argument_mode = suite.modes_for(case, mode, argument_mode)
    system = case.system if case.system is not None else suite.system
    conversation: list[Message] = ([{"role": "system", "content": system}] if system else [])
    conversation.append({"role": "user", "content": case.prompt})
    max_turns = case.max_turns or suite.max_turns
    turns = tokens_in = tokens_out = 0
    error: str | None = None
    final_answer = ""
    stopped = False
    started = time.monotonic()
    while True:
        if turns >= max_turns:
            stopped = True
            break
        try:
            answer = await _ask(model, conversation, suite.tools_for(case), runtime)
        except JudgeError as exc:
            error = redact(str(exc), getattr(model, "secrets", ()))
            tokens_in += getattr(exc, "tokens_in", 0)
            tokens_out += getattr(exc, "tokens_out", 0)
            break
        turns += 1
        tokens_in += answer.tokens_in
        tokens_out += answer.tokens_out
        conversation.append(answer.message())
        if not answer.calls:
            final_answer = answer.text
            break
        for call in answer.calls:
            conversation.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                                 "content": suite.tool_result(case, call.name)})
    latency = time.monotonic() - started
    steps = _steps(conversation)
    actual = [s.tool_name or "?" for s in steps if s.kind == "tool_call"]
    result = None
    if error is None:
        result = check_routing(
            trajectory_id(suite.name, case.name, model.name), case.name, steps,
            expected_tools, expected_calls, mode, empty_means_no_call=True,
            arguments_are_options=case.arguments_are_options,
            argument_mode=argument_mode, rules=rules, prompt=case.prompt)
    price = runtime.price
    return CaseOutcome(
        suite=suite.name, case=case,
        status="error" if result is None else "pass" if result.passed else "fail",
        result=result,
        expected_tools=result.expected_tools if result is not None else (
            list(expected_tools) + [c["name"] for c in expected_calls or []
                                    if c["name"] not in expected_tools]),
        actual_tools=actual, conversation=conversation, error=error, turns=turns,
        stopped_at_max_turns=stopped, final_answer=final_answer,
        tokens_in=tokens_in, tokens_out=tokens_out,
        cost_usd=price.cost(tokens_in, tokens_out) if price is not None else None,
        latency_s=round(latency, 3))


async def run_suite(model: ToolCallingModel, suite: RoutingSuite, *, suite_file: str = "",
                    mode: TrajectoryMode = "superset", argument_mode: ArgumentMode = "exact",
                    retry_base_s: float = 0.5, breaker_threshold: int = 3) -> SuiteRun:
    """Every case of ``suite``, up to the entry's ``concurrency`` conversations at once
    (each conversation's requests in order). Outcomes keep the suite's case order. One
    runtime for the run: its breaker, budget and limits span every case."""
    config = model.config
    runtime = suite_runtime(config, retry_base_s, breaker_threshold)
    conversations = asyncio.Semaphore(config.concurrency)

    async def one(case: SuiteCase) -> CaseOutcome:
        async with conversations:
            return await run_case(model, suite, case, mode=mode, argument_mode=argument_mode,
                                  runtime=runtime)

    outcomes = await asyncio.gather(*(one(c) for c in suite.cases))
    run_mode, run_argument_mode = suite.match_mode or mode, suite.argument_mode or argument_mode
    return SuiteRun(suite=suite.name, suite_file=suite_file, model_name=model.name,
                    provider=model.provider, model=model.model, match_mode=run_mode,
                    argument_mode=run_argument_mode, outcomes=list(outcomes))


SUITE_COLUMNS = [
    "suite", "suite_file", "case", "prompt", "model_under_test", "provider", "model",
    "status", "passed", "error", "reason", "match_mode", "argument_mode",
    *(f"{m}_passed" for m in TRAJECTORY_MODES), "mode_results", "bfcl_passed",
    "partial_credit", "expected_calls_matched", "expected_calls_total",
    "expected_tools", "actual_tools", "expected_groups", "actual_groups", "missing",
    "unexpected", "arguments_checked", "arguments_passed", "argument_failures",
    "turns", "stopped_at_max_turns", "final_answer", "tokens_in", "tokens_out", "cost_usd",
    "latency_s", "trajectory_id", "messages",
]
_VERDICT_COLUMNS = ("passed", *(f"{m}_passed" for m in TRAJECTORY_MODES), "bfcl_passed",
                    "arguments_passed")
_COUNT_COLUMNS = ("expected_calls_matched", "expected_calls_total", "arguments_checked")
_JSON_COLUMNS = ("mode_results", "expected_tools", "actual_tools", "expected_groups",
                 "actual_groups", "missing", "unexpected", "argument_failures", "messages")


def suite_table(runs: Sequence[SuiteRun]) -> pd.DataFrame:
    """One row per case and model: the verdict in every mode, or the error, and the
    recorded conversation (``messages``, OpenAI-shaped JSON that the chat format reads)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        for o in run.outcomes:
            r = o.result
            row: dict[str, Any] = {
                "suite": run.suite, "suite_file": run.suite_file, "case": o.case.name,
                "prompt": o.case.prompt, "model_under_test": run.model_name,
                "provider": run.provider, "model": run.model, "status": o.status,
                "error": o.error, "turns": o.turns,
                "stopped_at_max_turns": o.stopped_at_max_turns,
                "final_answer": o.final_answer, "tokens_in": o.tokens_in,
                "tokens_out": o.tokens_out, "cost_usd": o.cost_usd,
                "latency_s": o.latency_s,
                "trajectory_id": trajectory_id(run.suite, o.case.name, run.model_name),
                "messages": o.conversation, "expected_tools": o.expected_tools,
                "actual_tools": o.actual_tools,
            }
            if r is not None:
                row.update(r.model_dump(exclude={"trajectory_id", "task_id", "prompt",
                                                 "expected_tools", "actual_tools"}))
            else:
                row["match_mode"] = o.case.match_mode or run.match_mode
                row["argument_mode"] = o.case.argument_mode or run.argument_mode
            rows.append(row)
    table = pd.DataFrame(rows, columns=SUITE_COLUMNS)
    # Nullable types: an error row has no verdict, which is neither False nor NaN.
    for column in _VERDICT_COLUMNS:
        table[column] = table[column].astype("boolean")
    for column in _COUNT_COLUMNS:
        table[column] = table[column].astype("Int64")
    for column in _JSON_COLUMNS:
        table[column] = [None if v is None or (isinstance(v, float) and pd.isna(v))
                         else json.dumps(v, ensure_ascii=False) for v in table[column]]
    return table


def _loaded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _present(value: Any) -> bool:
    return value is not None and not (pd.api.types.is_scalar(value) and pd.isna(value))


def runs_from_table(table: pd.DataFrame) -> list[SuiteRun]:
    """The runs back from stored ``routing_suite_results`` rows, to print their report
    (the CLI prints it from the table the asset wrote, as the UI shows it)."""
    runs: dict[tuple[str, str], SuiteRun] = {}
    for row in table.to_dict("records"):
        key = (str(row["suite"]), str(row["model_under_test"]))
        run = runs.get(key)
        if run is None:
            run = runs[key] = SuiteRun(
                suite=key[0], suite_file=str(row["suite_file"]), model_name=key[1],
                provider=str(row["provider"]), model=str(row["model"]),
                match_mode=row["match_mode"], argument_mode=row["argument_mode"])
        case = SuiteCase.model_construct(name=str(row["case"]), prompt=str(row["prompt"]))
        result = None
        if row["status"] != "error":
            data = {k: (_loaded(row[k]) if k in _JSON_COLUMNS else row[k])
                    if _present(row[k]) else None
                    for k in RoutingResult.model_fields if k in row}
            data.update(trajectory_id=row["trajectory_id"], task_id=row["case"],
                        prompt=row["prompt"])
            result = RoutingResult.model_validate(data)
        run.outcomes.append(CaseOutcome(
            suite=key[0], case=case, status=row["status"], result=result,
            expected_tools=_loaded(row["expected_tools"]),
            actual_tools=_loaded(row["actual_tools"]),
            conversation=_loaded(row["messages"]) or [],
            error=row["error"] if _present(row["error"]) else None,
            turns=int(row["turns"]), stopped_at_max_turns=bool(row["stopped_at_max_turns"]),
            final_answer=str(row["final_answer"] or ""), tokens_in=int(row["tokens_in"]),
            tokens_out=int(row["tokens_out"]),
            cost_usd=float(row["cost_usd"]) if _present(row["cost_usd"]) else None,
            latency_s=float(row["latency_s"])))
    return list(runs.values())
