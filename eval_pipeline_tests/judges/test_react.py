"""The ReAct evaluations: templates, heuristic rules, runner rows, providers and the cache."""

from __future__ import annotations

import asyncio
import json

import pytest

from eval_pipeline import rubrics
from eval_pipeline.judges.base import ClipView, JudgeError, JudgeReply, JudgeRequest
from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.estimate import estimate_cost
from eval_pipeline.judges.heuristic import HeuristicJudge
from eval_pipeline.judges.runner import (
    ClipTask,
    InvalidReply,
    build_react_requests,
    run_judge,
    summarize_rows,
    validate_reply,
)
from eval_pipeline.judges.schema import wire_schema
from eval_pipeline.rubrics import ALL_EVALUATIONS, REACT_EVALUATIONS
from eval_pipeline_tests.judges.fake_servers import Act, label, sleep
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run, unfenced

TASK = "Find the population of Paris and compute its square root"


def clip(i: int, *, thought: str = "", tool: str | None = "search", tool_type: str = "generic",
         action_input: str = "", result: str = "ok", has_answer: bool = False,
         tid: str = "t0", task: str = TASK) -> ClipTask:
    return ClipTask(
        trajectory_id=tid, clip_index=i, tool_type=tool_type, task_description=task,
        clip=ClipView(content=f"<think>{thought}</think> call {i}", thought=thought,
                      tool_call=f"<{tool}>{action_input}</{tool}>" if tool else "",
                      tool_name=tool, action_input=action_input, result=result,
                      has_answer=has_answer),
    )


def final(i: int, tid: str = "t0", answer: str = "2.1 million; root 1449") -> ClipTask:
    return ClipTask(trajectory_id=tid, clip_index=i, tool_type="final", task_description=TASK,
                    clip=ClipView(content=f"<answer>{answer}</answer>", has_answer=True,
                                  answer=answer))


def trajectory(tid: str = "t0") -> list[ClipTask]:
    return [
        clip(0, tid=tid, thought="I will search for the population of Paris.",
             action_input='{"query": "population of Paris"}',
             result="Paris has 2,102,650 inhabitants"),
        clip(1, tid=tid, tool="microsandbox_execute", tool_type="microsandbox",
             thought="Now compute the square root of the population with code.",
             action_input='{"code": "import math\\nprint(math.sqrt(2102650))"}',
             result="1450.05"),
        clip(2, tid=tid, thought="", action_input='{"query": "Paris"}', result="Paris"),
        final(3, tid=tid),
    ]


def heuristic(request: JudgeRequest) -> JudgeReply:
    return asyncio.run(HeuristicJudge(JudgeConfig(name="h")).score(request))


def by_kind(requests: list[JudgeRequest], kind: str) -> list[JudgeRequest]:
    return [r for r in requests if r.evaluation_kind == kind]


# -- templates -------------------------------------------------------------------------

def test_each_kind_renders_the_seed_template_with_the_json_shape():
    requests = [r.model_copy(update={"user_prompt": unfenced(r.user_prompt)})
                for r in build_react_requests(trajectory())]
    t2t = by_kind(requests, "thought_to_tool")[0]
    assert "Your job is to determine if the \"Action\" (tool choice) makes sense" in t2t.user_prompt
    assert "[Original Question]: " + TASK in t2t.user_prompt
    assert "[Agent's Thought]: I will search for the population of Paris." in t2t.user_prompt
    assert "[Tool Called]: search" in t2t.user_prompt
    assert '[Tool Action Input]: {"query": "population of Paris"}' in t2t.user_prompt
    # {tool_definitions}: every tool seen in the trajectory, described from the registry
    assert "\nsearch: an unrecognised tool (tool type: generic)\n" in t2t.user_prompt
    assert "\nmicrosandbox_execute: MicroSandbox tool" in t2t.user_prompt

    q2t = by_kind(requests, "query_to_thought")[0]
    assert "analyzing an agent's understanding of user requests" in q2t.user_prompt
    assert "[Agent's Current Thought]: I will search" in q2t.user_prompt

    seq = by_kind(requests, "sequence_optimality")[0]
    assert "took the optimal sequence of steps" in seq.user_prompt
    assert "Step 1: I will search for the population of Paris." in seq.user_prompt
    assert ('Step 2: microsandbox_execute - {"code": "import math\\nprint(math.sqrt(2102650))"}'
            " -> Result: 1450.05") in seq.user_prompt
    assert "Step 3: (no thought stated)" in seq.user_prompt

    for request, (positive, negative) in ((t2t, ("correct", "incorrect")),
                                          (q2t, ("correct", "incorrect")),
                                          (seq, ("optimal", "suboptimal"))):
        assert "GitHub" not in request.user_prompt
        assert "{" + "original_question" not in request.user_prompt  # every field filled
        assert request.labels == [positive, negative]
        assert request.metrics == [request.evaluation_kind]
        assert f'(EXACTLY "{positive}" or "{negative}")' in request.user_prompt
        # The seed's answer as JSON: an explanation, then a label; no score to contradict it
        example = json.loads(request.user_prompt.split("Return your response as JSON:")[1])
        assert example == {"explanation": example["explanation"], "label": positive}
        assert "EXPLANATION first, then your LABEL" in request.user_prompt
        schema = wire_schema(request.metrics, request.labels)
        assert schema["properties"]["label"]["enum"] == [positive, negative]
        assert schema["required"] == ["explanation", "label"]
        assert "scores" not in schema["properties"]
    # The rubric schema keeps its old shape (no label), so cached rubric answers stay valid.
    assert "label" not in wire_schema(["code_correctness"])["properties"]


def test_react_templates_are_versioned(monkeypatch):
    before = rubrics.templates_version()
    original = rubrics.template

    def edited(name: str) -> str:
        text = original(name)
        return text + " (edited)" if name == "sequence_optimality" else text

    monkeypatch.setattr(rubrics, "template", edited)
    assert rubrics.templates_version() != before


# -- requests per kind ------------------------------------------------------------------

def test_requests_per_kind_skip_the_final_clip_and_thoughtless_clips():
    requests = build_react_requests(trajectory())
    assert [(r.evaluation_kind, r.clip_index) for r in requests] == [
        ("thought_to_tool", 0), ("query_to_thought", 0),
        ("thought_to_tool", 1), ("query_to_thought", 1),
        ("thought_to_tool", 2),  # clip 2 states no thought: no query_to_thought
        ("sequence_optimality", -1),
    ]
    seq = requests[-1]
    assert seq.tool_type == "trajectory" and len(seq.sequence) == 3
    assert build_react_requests(trajectory(), ["clip_rubric"]) == []
    assert [r.evaluation_kind for r in build_react_requests(
        trajectory(), ["sequence_optimality"])] == ["sequence_optimality"]


# -- heuristic rules --------------------------------------------------------------------

def _one(kind: str, tasks: list[ClipTask]) -> JudgeReply:
    return heuristic(by_kind(build_react_requests(tasks), kind)[0])


def test_heuristic_thought_to_tool_rules():
    good = _one("thought_to_tool", [clip(0, thought="I will search for the population of "
                                    "Paris.", action_input='{"query": "population of Paris"}')])
    assert good.label == "correct" and good.scores == {"thought_to_tool": 1.0}
    assert good.reasoning.startswith("Heuristic judge (rule-based, not an LLM).")
    assert "names the tool 'search'" in good.reasoning
    assert "well-formed JSON" in good.reasoning

    no_thought = _one("thought_to_tool", [clip(0, action_input='{"query": "Paris"}')])
    assert no_thought.label == "incorrect" and no_thought.scores == {"thought_to_tool": 0.0}
    assert "no thought precedes the call" in no_thought.reasoning

    unrelated = _one("thought_to_tool", [clip(0, tool="browser_navigate",
                                              thought="Let me compute the average.",
                                              action_input='{"url": "https://weather.com"}')])
    assert unrelated.label == "incorrect"
    assert "does not name the tool" in unrelated.reasoning
    assert "shares 0 key term(s)" in unrelated.reasoning

    broken = _one("thought_to_tool", [clip(0, thought="Search for the population of Paris",
                                           action_input='{"query": "population of')])
    assert broken.label == "incorrect" and "does not parse" in broken.reasoning

    bad_code = _one("thought_to_tool", [clip(0, tool="microsandbox_execute",
                                             tool_type="microsandbox",
                                             thought="Run code to print the root",
                                             action_input="print(math.sqrt(4)")])
    assert bad_code.label == "incorrect" and "code does not parse" in bad_code.reasoning


def test_heuristic_query_to_thought_rules():
    aligned = _one("query_to_thought", [clip(0, thought="First find the population of Paris.")])
    assert aligned.label == "correct" and aligned.scores == {"query_to_thought": 1.0}
    assert "overlap" in aligned.reasoning and "not an LLM" in aligned.reasoning
    off = _one("query_to_thought", [clip(0, thought="I wonder about the weather in Tokyo.")])
    assert off.label == "incorrect" and off.scores == {"query_to_thought": 0.0}
    assert "shares 0 of the task's" in off.reasoning


def _seq(tasks: list[ClipTask]) -> JudgeReply:
    return _one("sequence_optimality", tasks)


def test_heuristic_sequence_optimality_rules():
    clean = _seq(trajectory())
    assert clean.label == "optimal" and clean.scores == {"sequence_optimality": 1.0}
    assert "3 tool call(s) (beta threshold 15)" in clean.reasoning

    same = '{"query": "population of Paris"}'
    repeated = _seq([clip(0, thought="a", action_input=same), clip(1, thought="b",
                                                                    action_input=same)])
    assert repeated.label == "suboptimal" and repeated.scores == {"sequence_optimality": 0.0}
    assert "1 consecutive identical call(s)" in repeated.reasoning

    retried = _seq([clip(0, action_input=same, result="Error: rate limited"),
                    clip(1, action_input='{"query": "other"}'),
                    clip(2, action_input=same, result="Error: rate limited")])
    assert retried.label == "suboptimal"
    assert "1 identical retry(ies) of a failed call" in retried.reasoning
    assert "0 consecutive identical call(s)" in retried.reasoning

    after_answer = _seq([clip(0, action_input=same), clip(1, action_input='{"q": "x"}',
                                                           has_answer=True)])
    assert after_answer.label == "suboptimal"
    assert "1 tool call(s) after an answer" in after_answer.reasoning

    runaway = _seq([clip(i, action_input=f'{{"query": "page {i}"}}') for i in range(16)])
    assert runaway.label == "suboptimal" and "over the threshold" in runaway.reasoning


# -- the runner ---------------------------------------------------------------------------

def _heuristic_rows(tasks, evaluations=ALL_EVALUATIONS):
    judge = HeuristicJudge(JudgeConfig(name="heuristic"))
    return asyncio.run(run_judge(judge, tasks, evaluations=evaluations))


def test_runner_rows_per_kind():
    tasks = trajectory("t0") + trajectory("t1")[:2] + [final(2, tid="t1")]
    rows = _heuristic_rows(tasks)
    kinds = [(r.trajectory_id, r.evaluation_kind) for r in rows]
    assert kinds.count(("t0", "clip_rubric")) == 4 and kinds.count(("t1", "clip_rubric")) == 3
    assert kinds.count(("t0", "thought_to_tool")) == 3  # one per tool clip, not the final
    assert kinds.count(("t1", "thought_to_tool")) == 2
    assert kinds.count(("t0", "query_to_thought")) == 2  # clip 2 states no thought
    assert kinds.count(("t1", "query_to_thought")) == 2
    seq = [r for r in rows if r.evaluation_kind == "sequence_optimality"]
    assert [(r.trajectory_id, r.clip_index, r.tool_type) for r in seq] == [
        ("t0", -1, "trajectory"), ("t1", -1, "trajectory")]
    assert all(r.status == "ok" and r.provider == "heuristic" for r in rows)
    react = [r for r in rows if r.evaluation_kind in REACT_EVALUATIONS]
    assert all(r.previous_context == "" for r in react)  # no context chain for ReAct
    assert {r.label for r in react} <= {"correct", "incorrect", "optimal", "suboptimal"}
    # the clip chain is untouched: the rubric rows carry the earlier summaries
    t0 = [r for r in rows if r.trajectory_id == "t0" and r.evaluation_kind == "clip_rubric"]
    assert t0[0].previous_context == "" and "[Previous:" in t0[1].previous_context

    narrowed = _heuristic_rows(tasks, ["clip_rubric"])
    assert {r.evaluation_kind for r in narrowed} == {"clip_rubric"} and len(narrowed) == 7
    only_seq = _heuristic_rows(tasks, ["sequence_optimality"])
    assert [r.evaluation_kind for r in only_seq] == ["sequence_optimality"] * 2


class FlakyReact:
    """A judge that answers the rubric, fails every thought_to_tool request, answers
    query_to_thought with a score that disagrees with its label, and sequence_optimality
    with a label that is not one of the kind's two."""

    name = "flaky"
    provider = "openai"
    model = "fake"
    reply_mode = "json_schema"
    reply_mode_note = None

    def __init__(self) -> None:
        self.inner = HeuristicJudge(JudgeConfig(name="flaky"))

    async def score(self, request: JudgeRequest) -> JudgeReply:
        if request.evaluation_kind == "thought_to_tool":
            raise JudgeError("HTTP 400: bad request")
        if request.evaluation_kind == "query_to_thought":
            return JudgeReply(scores={"query_to_thought": 0.0}, label=" Correct ",
                              raw_response="label correct, score 0")
        if request.evaluation_kind == "sequence_optimality":
            return JudgeReply(scores={"sequence_optimality": 1.0}, label="maybe",
                              raw_response="label maybe")
        return await self.inner.score(request)

    async def aclose(self) -> None:
        return None


def test_react_rows_take_their_score_from_the_label_and_fail_without_one():
    rows = asyncio.run(run_judge(FlakyReact(), trajectory()))
    t2t = [r for r in rows if r.evaluation_kind == "thought_to_tool"]
    assert len(t2t) == 3 and all(r.status == "failed" and r.scores == "{}" for r in t2t)
    assert all(r.label is None and "HTTP 400" in r.error for r in t2t)
    # the label decides; the score beside it is ignored, never a reason to fail
    q2t = [r for r in rows if r.evaluation_kind == "query_to_thought"]
    assert len(q2t) == 2 and all(r.status == "ok" and r.attempts == 1 for r in q2t)
    assert all(json.loads(r.scores) == {"query_to_thought": 1.0} for r in q2t)
    (seq,) = [r for r in rows if r.evaluation_kind == "sequence_optimality"]
    assert seq.status == "failed" and seq.scores == "{}" and seq.attempts == 2
    assert "label must be one of ['optimal', 'suboptimal'], got 'maybe'" in seq.error
    assert summarize_rows(rows).failed == 4


def test_validate_reply_derives_the_score_from_the_label():
    labels = ["correct", "incorrect"]
    metric = ["thought_to_tool"]
    for reply, expected in ((JudgeReply(scores={"thought_to_tool": 0.74}, label="incorrect"),
                             0.0),
                            (JudgeReply(scores={"thought_to_tool": 0.0}, label="CORRECT\n"),
                             1.0),
                            (JudgeReply(scores={}, label='"correct".'), 1.0),
                            (JudgeReply(scores={"x": "285"}, label="Incorrect"), 0.0)):
        assert validate_reply(reply, metric, labels) == {"thought_to_tool": expected}
    for bad in (JudgeReply(scores={"thought_to_tool": 1.0}, label="yes"),
                JudgeReply(scores={"thought_to_tool": 1.0}),
                JudgeReply(scores={}, label="in correct")):
        with pytest.raises(InvalidReply, match="label must be one of"):
            validate_reply(bad, metric, labels)


# -- LLM providers through the fake servers ---------------------------------------------

def test_llm_judges_answer_react_prompts_and_rerun_from_cache(openai_server, anthropic_server,
                                                              tmp_path):
    tasks = trajectory()
    cache = JudgeCache(tmp_path / "cache.sqlite")
    configs = [(openai_server, openai_config(openai_server, evaluations=list(ALL_EVALUATIONS))),
               (anthropic_server, anthropic_config(anthropic_server,
                                                   evaluations=list(ALL_EVALUATIONS)))]
    for server, config in configs:
        rows = run(config, tasks, cache=cache)
        counts = {k: sum(r.evaluation_kind == k for r in rows) for k in ALL_EVALUATIONS}
        # and the assessments: one per tool category used (two) and one per trajectory
        assert counts == {"clip_rubric": 4, "thought_to_tool": 3, "query_to_thought": 2,
                          "sequence_optimality": 1, "category_assessment": 2,
                          "trajectory_assessment": 1}
        assert server.calls == len(rows) == 13
        assert all(r.status == "ok" and not r.cached for r in rows)
        react = [r for r in rows if r.evaluation_kind in REACT_EVALUATIONS]
        assert {json.dumps(json.loads(r.scores)) for r in react} >= {
            '{"thought_to_tool": 1.0}', '{"sequence_optimality": 1.0}'}
        assert {r.label for r in react} == {"correct", "optimal"}
        # the ReAct requests carried the label enum in their structured-output schema
        sent = [req.body for req in server.requests]
        enums = [json.dumps(b).count('"enum": ["optimal", "suboptimal"]') for b in sent]
        assert sum(1 for e in enums if e) == 1

        again = run(config, tasks, cache=cache)
        assert server.calls == 13, "a rerun of unchanged work must not call"
        assert all(r.cached for r in again)
        assert [(r.evaluation_kind, r.label) for r in again] == [
            (r.evaluation_kind, r.label) for r in rows]
    cache.close()


def test_llm_negative_label_and_a_score_that_contradicts_it(openai_server):
    config = openai_config(openai_server, evaluations=["sequence_optimality"])
    openai_server.push(label("suboptimal"))
    (row,) = run(config, trajectory())
    assert row.status == "ok" and row.label == "suboptimal"
    assert json.loads(row.scores) == {"sequence_optimality": 0.0}

    # issue 7: a schema-following server sent "score 0.74" beside label "incorrect" and
    # every ReAct row failed; the label decides, the stray score is ignored
    openai_server.push(label("suboptimal", score=0.74),
                       Act(kind="ok", label="optimal", scores={"sequence_optimality": 0.0}))
    (row,) = run(config, trajectory("t9"))
    (again,) = run(config, trajectory("t8"))
    assert (row.status, row.label, row.repaired, row.attempts) == ("ok", "suboptimal",
                                                                   False, 1)
    assert json.loads(row.scores) == {"sequence_optimality": 0.0}
    assert '"score": 0.74' in row.raw_response
    assert again.status == "ok" and json.loads(again.scores) == {"sequence_optimality": 1.0}


def test_react_requests_run_concurrently_under_the_judge_limit(openai_server):
    config = openai_config(openai_server, evaluations=["sequence_optimality"], concurrency=3)
    tasks = [t for i in range(6) for t in trajectory(f"t{i}")]
    openai_server.push(*[sleep(0.3) for _ in range(6)])
    rows = run(config, tasks)
    assert [r.evaluation_kind for r in rows] == ["sequence_optimality"] * 6
    assert all(r.status == "ok" for r in rows)
    assert openai_server.max_in_flight == 3  # independent requests, capped by concurrency


def test_dry_run_counts_react_calls_and_their_cache_hits(openai_server, tmp_path):
    config = openai_config(openai_server, evaluations=list(ALL_EVALUATIONS))
    tasks = trajectory("t0") + trajectory("t1")
    before = estimate_cost(tasks, [config]).judges[0]
    # per trajectory: 4 rubric, 3 thought-to-tool, 2 query-to-thought, 1 sequence, and
    # the assessments of its 2 tool categories and of the whole trajectory
    assert before.calls == 2 * (4 + 3 + 2 + 1 + 2 + 1) and before.cached == 0
    narrowed = estimate_cost(tasks, [openai_config(openai_server,
                                                   evaluations=["thought_to_tool"])])
    assert narrowed.judges[0].calls == 6
    cache = JudgeCache(tmp_path / "cache.sqlite")
    run(config, tasks, cache=cache)
    after = estimate_cost(tasks, [config], cache=cache).judges[0]
    assert after.calls == 0 and after.cached == before.calls
    cache.close()
