"""Category and trajectory assessments (issue #8 item 1): what they are asked, how every
judge kind answers them, when they are sent, and how the switch turns them off."""

from __future__ import annotations

import asyncio
import json

import pytest

from eval_pipeline import rubrics
from eval_pipeline.judges.assessments import (
    Answered,
    assessment_requests,
    category_request,
    trajectory_request,
)
from eval_pipeline.judges.base import ClipResult, ClipTask, ClipView
from eval_pipeline.judges.cache import JudgeCache
from eval_pipeline.judges.config import (
    JudgeConfig,
    JudgesFileError,
    parse_judges,
    without_assessments,
)
from eval_pipeline.judges.estimate import estimate_cost
from eval_pipeline.judges.heuristic import (
    HeuristicJudge,
    category_assessment_scores,
    trajectory_assessment_scores,
)
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.rubrics import assessment_rubrics
from eval_pipeline_tests.judges import fake_servers as fs
from eval_pipeline_tests.judges.fake_servers import FakeLLMServer
from eval_pipeline_tests.judges.helpers import anthropic_config, openai_config, run, unfenced

CATEGORY = "category_assessment"
TRAJECTORY = "trajectory_assessment"
ASSESSED = ["clip_rubric", CATEGORY, TRAJECTORY]
CATEGORY_METRICS = assessment_rubrics()[CATEGORY].metric_names
TRAJECTORY_METRICS = assessment_rubrics()[TRAJECTORY].metric_names
TASK = "Sort the list [3, 1, 2] in Python and report the sorted list"
CODE = '{"code": "print(sorted([3,1,2]))"}'


def _clip(i: int, tool_type: str, **view: object) -> ClipTask:
    return ClipTask(trajectory_id="t", clip_index=i, tool_type=tool_type, task_description=TASK,
                    clip=ClipView(**{"content": f"CLIP-{i}-CONTENT", **view}))  # type: ignore[arg-type]


def trajectory() -> list[ClipTask]:
    """microsandbox, deepsearch, microsandbox, then the answer: two categories, the first
    one's clips not adjacent."""
    return [
        _clip(0, "microsandbox", thought="Sort the list in Python", tool_call="x",
              tool_name="microsandbox", action_input=CODE, result="[1, 2, 3]"),
        _clip(1, "deepsearch", thought="Check the docs", tool_call="x", tool_name="deepsearch",
              action_input='{"query": "python sorted"}', result="sorted() returns a list"),
        _clip(2, "microsandbox", tool_call="x", tool_name="microsandbox", action_input=CODE,
              result="Traceback (most recent call last):\nValueError: boom",
              earlier_calls=[f"microsandbox:{CODE}"]),
        _clip(3, "final", thought="Done.", has_answer=True, answer="[1, 2, 3]",
              content="CLIP-3-CONTENT <answer>[1, 2, 3]</answer>"),
    ]


def ok(scores: dict[str, float], summary: str = "") -> Answered:
    return Answered("ok", json.dumps(scores), summary)


FAILED = Answered("failed", "{}", "")


# -- what the prompts carry -------------------------------------------------------------------

def test_category_prompt_has_its_clips_and_their_evaluations_and_no_other_clip():
    tasks = trajectory()
    rows = {0: ok({"code_correctness": 0.8125}, "CLIP-0-SUMMARY"), 1: ok({"x": 0.1}),
            2: FAILED}
    request = category_request("microsandbox", [tasks[0], tasks[2]], rows)
    user = unfenced(request.user_prompt)
    assert request.evaluation_kind == CATEGORY and request.tool_type == "microsandbox"
    assert request.clip_index == -1 and request.metrics == CATEGORY_METRICS
    assert "one tool category: microsandbox" in user and TASK in user
    assert "CLIP-0-CONTENT" in user and "CLIP-2-CONTENT" in user
    assert "CLIP-1-CONTENT" not in user and "CLIP-3-CONTENT" not in user
    # clip 0's own evaluation: its scores (rounded) and summary; clip 2 failed: no score
    assert 'Evaluation: scores {"code_correctness": 0.812}' in user
    assert "CLIP-0-SUMMARY" in user
    clip2 = user.split("Clip 2 (category microsandbox, tool microsandbox):")[1]
    assert clip2.split("Evaluation Criteria")[0].count("Evaluation: failed; no score") == 1
    for name in CATEGORY_METRICS:  # the rubric and the answer's shape
        assert name.replace("_", " ").title() in user and f'"{name}": 0.0' in user
    assert request.system_prompt == rubrics.template("assessment_system").strip()
    # the structured inputs a non-LLM judge reads
    assert [(c.clip_index, c.status, c.scores) for c in request.assessed_clips] == [
        (0, "ok", {"code_correctness": 0.8125}), (2, "failed", {})]
    # the trajectory's text stays fenced: the clip and the judge's summary are data blocks
    assert request.user_prompt.count("<data-") >= 3


def test_trajectory_prompt_has_every_clip_and_the_category_results():
    tasks = trajectory()
    rows = {0: ok({"a": 0.5}), 1: ok({"b": 1.0}), 2: FAILED, 3: ok({"c": 0.25})}
    categories = {"microsandbox": ok(dict.fromkeys(CATEGORY_METRICS, 0.4), "MS-SUMMARY"),
                  "deepsearch": FAILED}
    request = trajectory_request(tasks, rows, categories)
    user = unfenced(request.user_prompt)
    assert request.evaluation_kind == TRAJECTORY and request.tool_type == "trajectory"
    assert request.metrics == TRAJECTORY_METRICS
    for i in range(4):
        assert f"CLIP-{i}-CONTENT" in user
    assert "Clip 3 (the final answer)" in user
    assert "Category microsandbox (2 clips): scores" in user and "MS-SUMMARY" in user
    assert "Category deepsearch (1 clip): assessment failed; no score." in user
    assert [r.category for r in request.category_results] == ["microsandbox", "deepsearch"]
    # not requested: the prompt says so rather than showing nothing
    alone = unfenced(trajectory_request(tasks, rows, None).user_prompt)
    assert "category assessments were not requested" in alone


def test_a_long_clip_is_shortened_in_the_assessment_prompt_with_a_marker():
    long = "HEAD" + "x" * 20_000 + "TAIL"
    task = _clip(0, "microsandbox", content=long)
    user = category_request("microsandbox", [task], {0: FAILED}).user_prompt
    assert "HEAD" in user and "TAIL" in user and long not in user
    assert "characters left out ...]" in user


def test_no_tool_call_means_no_category_request_and_an_empty_trajectory_none():
    final = [_clip(0, "final", has_answer=True, answer="42")]
    requests = assessment_requests(final, ASSESSED)
    assert [r.evaluation_kind for r in requests] == [TRAJECTORY]
    assert "the agent called no tool" in requests[0].user_prompt
    assert assessment_requests([], ASSESSED) == []
    with pytest.raises(ValueError):
        category_request("microsandbox", [], {})


# -- the heuristic judge, computed by hand ----------------------------------------------------

def test_heuristic_category_figures_by_hand():
    tasks = trajectory()
    clips = [ClipResult(clip_index=0, tool_type="microsandbox", clip=tasks[0].clip,
                        status="ok", scores={"a": 0.8, "b": 0.6}),
             ClipResult(clip_index=2, tool_type="microsandbox", clip=tasks[2].clip,
                        status="failed")]
    scores, notes = category_assessment_scores(TASK, clips)
    # task words {sort, list, python, report, sorted}; clip 0 shares sort, list, python,
    # sorted (0.8, relevance 1.0) and returned output; clip 2 shares sorted (0.2,
    # relevance 0.4), got a traceback, states no thought and repeats clip 0's call.
    assert scores == {
        "tool_effectiveness": 0.5,        # 1 of 2 calls returned output
        "usage_appropriateness": 0.5,     # (0.5 + 0.5 + 0 + 0) / 2
        "result_quality": 0.7,            # mean of clip 0's own scores; clip 2 failed
        "task_contribution": 0.6,         # (1.0 x 1 + 0.4 x 0.5) / 2
    }
    assert "1 of 2 clip evaluations succeeded" in notes
    # no clip evaluation succeeded: the results' outcomes, (0.9 + 0.15) / 2
    unjudged = [c.model_copy(update={"status": "failed", "scores": {}}) for c in clips]
    assert category_assessment_scores(TASK, unjudged)[0]["result_quality"] == 0.525
    with pytest.raises(ValueError):
        category_assessment_scores(TASK, [])


def test_heuristic_trajectory_figures_by_hand():
    tasks = trajectory()
    statuses = {0: ({"a": 0.8}, "ok"), 1: ({"a": 0.4}, "ok"), 2: ({}, "failed"),
                3: ({"task_completion": 0.9, "response_quality": 0.7}, "ok")}
    clips = [ClipResult(clip_index=t.clip_index, tool_type=t.tool_type, clip=t.clip,
                        status=statuses[t.clip_index][1], scores=statuses[t.clip_index][0])
             for t in tasks]
    scores, _ = trajectory_assessment_scores(TASK, clips)
    assert scores == {
        "task_completion": 0.85,          # it ends with a non-empty answer
        "strategy_coherence": 0.75,       # clips 0, 1, 3: 1.0 each; clip 2: 0
        "tool_usage_efficiency": 0.667,   # clips 0 and 1 useful; clip 2 errored, repeated
        "answer_quality": 0.8,            # the final clip's own mean (0.9 + 0.7) / 2
    }
    failed_final = [*clips[:3], clips[3].model_copy(update={"status": "failed",
                                                            "scores": {}})]
    assert trajectory_assessment_scores(TASK, failed_final)[0]["answer_quality"] == 0.85
    no_answer = [ClipResult(clip_index=0, tool_type="final", status="ok", scores={"x": 1.0},
                            clip=ClipView(content=""))]
    only = trajectory_assessment_scores(TASK, no_answer)[0]
    assert only["task_completion"] == 0.1 and only["tool_usage_efficiency"] == 1.0


def test_heuristic_judge_answers_assessment_requests_and_says_it_is_a_heuristic():
    tasks = trajectory()
    judge = HeuristicJudge(JudgeConfig(name="h"))
    request = category_request("microsandbox", [tasks[0], tasks[2]],
                               {0: ok({"a": 0.8, "b": 0.6}), 2: FAILED})
    reply = asyncio.run(judge.score(request))
    assert list(reply.scores) == CATEGORY_METRICS
    assert reply.scores["result_quality"] == 0.7
    assert reply.reasoning.startswith("Heuristic judge (rule-based, not an LLM).")
    assert "tool_effectiveness = share" in reply.reasoning
    assert reply.summary == "The agent used microsandbox: 2 call(s), 1 returned output."


def test_heuristic_run_orders_rows_and_reads_its_own_clip_rows():
    tasks = trajectory()
    rows = asyncio.run(run_judge(HeuristicJudge(JudgeConfig(name="h")), tasks,
                                 evaluations=ASSESSED))
    assert [(r.evaluation_kind, r.clip_index, r.tool_type) for r in rows] == [
        ("clip_rubric", 0, "microsandbox"), ("clip_rubric", 1, "deepsearch"),
        ("clip_rubric", 2, "microsandbox"), ("clip_rubric", 3, "final"),
        # categories in the order of their last clip (deepsearch's is clip 1)
        (CATEGORY, -1, "deepsearch"), (CATEGORY, -1, "microsandbox"),
        (TRAJECTORY, -1, "trajectory")]
    by_kind = {(r.evaluation_kind, r.tool_type): r for r in rows}
    clip_means = {r.clip_index: json.loads(r.scores) for r in rows[:4]}
    microsandbox = json.loads(by_kind[(CATEGORY, "microsandbox")].scores)
    # every clip was judged ok: result_quality is the mean of clips 0 and 2's own means
    expected = (sum(clip_means[0].values()) / len(clip_means[0])
                + sum(clip_means[2].values()) / len(clip_means[2])) / 2
    assert microsandbox["result_quality"] == round(expected, 3)
    assert all(r.status == "ok" and r.provider == "heuristic" for r in rows)


# -- LLM judges through the fake servers ----------------------------------------------------

@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_llm_judges_answer_assessments_in_the_rubric_shape(openai_server, anthropic_server,
                                                           provider):
    server = openai_server if provider == "openai" else anthropic_server
    make = openai_config if provider == "openai" else anthropic_config
    rows = run(make(server, evaluations=ASSESSED), trajectory())
    assessed = [r for r in rows if r.evaluation_kind != "clip_rubric"]
    assert [(r.evaluation_kind, r.tool_type) for r in assessed] == [
        (CATEGORY, "deepsearch"), (CATEGORY, "microsandbox"), (TRAJECTORY, "trajectory")]
    for row in assessed:
        assert row.status == "ok" and row.summary.startswith("clip summary")
        metrics = CATEGORY_METRICS if row.evaluation_kind == CATEGORY else TRAJECTORY_METRICS
        assert json.loads(row.scores) == dict.fromkeys(metrics, 0.8)
        assert row.template_version == rubrics.assessment_templates_version()
    # the trajectory request went last and carried what the categories' answers said
    last = fs._user_prompt(server.requests[-1].body)
    assert "Category microsandbox (2 clips): scores" in last and "clip summary" in last
    schema = json.dumps(server.requests[-1].body)
    assert all(m in schema for m in TRAJECTORY_METRICS)


def test_numbers_as_strings_any_case_and_prose_parse(openai_server):
    config = openai_config(openai_server, evaluations=ASSESSED, output_mode="text")
    tasks = [trajectory()[0]]  # one clip: its rubric, its category, the trajectory
    openai_server.push(fs.OK,
                       fs.styled("prose", strings=True, metric_names="title"),
                       fs.styled("fenced", strings=True, metric_names="upper"))
    rows = run(config, tasks)
    assert [r.status for r in rows] == ["ok", "ok", "ok"]
    category, whole = rows[1], rows[2]
    assert '"Tool Effectiveness": "0.8"' in category.raw_response
    assert json.loads(category.scores) == dict.fromkeys(CATEGORY_METRICS, 0.8)
    assert json.loads(whole.scores) == dict.fromkeys(TRAJECTORY_METRICS, 0.8)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_missing_metric_is_repaired_once_then_a_failed_row(openai_server, anthropic_server,
                                                             provider):
    server = openai_server if provider == "openai" else anthropic_server
    make = openai_config if provider == "openai" else anthropic_config
    tasks = [trajectory()[0]]
    # the clip, then its category twice without a metric (answer and repair)
    server.push(fs.OK, fs.scores(drop_metric=True), fs.scores(drop_metric=True))
    rows = run(make(server, evaluations=ASSESSED), tasks)
    category = rows[1]
    assert category.evaluation_kind == CATEGORY and category.status == "failed"
    assert not category.success and category.scores == "{}" and category.summary == ""
    # the fake drops the schema's first metric (keys sorted): result_quality
    assert "missing metrics: ['result_quality']" in category.error
    assert "invalid output after one repair attempt" in category.error
    assert category.attempts == 2
    # the trajectory assessment still went out, showing the category as failed
    assert rows[2].status == "ok"
    assert "Category microsandbox (1 clip): assessment failed; no score." in \
        fs._user_prompt(server.requests[-1].body)


def test_a_failed_clip_goes_to_its_category_marked_failed(openai_server):
    tasks = trajectory()
    openai_server.push(fs.status(400))  # clip 0 fails for good (not retried)
    rows = run(openai_config(openai_server, evaluations=ASSESSED), tasks)
    assert rows[0].status == "failed" and json.loads(rows[0].scores) == {}
    microsandbox = next(r for r in rows if r.tool_type == "microsandbox"
                        and r.evaluation_kind == CATEGORY)
    assert microsandbox.status == "ok"
    sent = next(unfenced(fs._user_prompt(r.body)) for r in openai_server.requests
                if "one tool category: microsandbox" in fs._user_prompt(r.body))
    clip0 = sent.split("Clip 0 (category microsandbox, tool microsandbox):")[1]
    assert clip0.split("Clip 2")[0].count("Evaluation: failed; no score") == 1
    assert "Evaluation: scores" in clip0.split("Clip 2")[1]  # clip 2 answered


def test_a_category_goes_out_after_its_last_clip_while_the_chain_goes_on():
    server = FakeLLMServer("openai", latency_s=0.3).start()
    try:
        rows = run(openai_config(server, evaluations=ASSESSED, concurrency=4), trajectory())
        assert all(r.status == "ok" for r in rows)
        arrivals = []
        for recorded in server.requests:
            user = fs._user_prompt(recorded.body)
            if "one tool category: " in user:
                name = user.split("one tool category: ")[1].split(".")[0]
            elif "whole trajectory" in user:
                name = "trajectory"
            else:
                name = f"clip {user.split('CLIP-')[1].split('-')[0]}"
            arrivals.append((name, recorded.at))
    finally:
        server.stop()
    at = dict(arrivals)
    order = [name for name, _ in arrivals]
    # the chain: each clip after the one before it answered
    assert [n for n in order if n.startswith("clip")] == ["clip 0", "clip 1", "clip 2",
                                                          "clip 3"]
    # deepsearch's only clip is clip 1: its assessment goes out with clip 2, before clip 3
    assert at["clip 1"] + 0.3 <= at["deepsearch"] < at["clip 3"]
    # microsandbox's last clip is clip 2: after it answered, beside the final clip
    assert at["microsandbox"] >= at["clip 2"] + 0.3
    # the trajectory waits for every clip and both categories to answer
    assert order[-1] == "trajectory"
    assert at["trajectory"] >= max(at["clip 3"], at["microsandbox"]) + 0.3


# -- the switch, versions, cache and cost -----------------------------------------------------

def test_assessments_false_drops_them_and_they_need_the_clips():
    assert JudgeConfig(name="h").evaluations[-2:] == [CATEGORY, TRAJECTORY]
    off = JudgeConfig(name="h", assessments=False)
    assert CATEGORY not in off.evaluations and "clip_rubric" in off.evaluations
    with pytest.raises(JudgesFileError, match="evaluations must include clip_rubric"):
        parse_judges({"judges": [{"name": "h", "evaluations": ["thought_to_tool", CATEGORY]}]})
    ran = without_assessments([JudgeConfig(name="h"), JudgeConfig(name="g",
                                                                  evaluations=ASSESSED)])
    assert [c.evaluations for c in ran] == [
        ["clip_rubric", "thought_to_tool", "query_to_thought", "sequence_optimality"],
        ["clip_rubric"]]
    rows = asyncio.run(run_judge(HeuristicJudge(off), trajectory(),
                                 evaluations=off.evaluations))
    assert not {CATEGORY, TRAJECTORY} & {r.evaluation_kind for r in rows}
    # the UI's launchpad: the judge resource's assessments field, for one run
    from eval_pipeline.defs.pipeline.resources import LLMJudgeResource

    resource = LLMJudgeResource(name="h", assessments=False)
    assert CATEGORY not in resource.judge_config().evaluations


def test_editing_an_assessment_template_re_versions_only_what_uses_it(monkeypatch):
    from eval_pipeline.defs.pipeline.assets.judging import judge_code_version

    with_them, without = JudgeConfig(name="h"), JudgeConfig(name="h", assessments=False)
    before = (rubrics.templates_version(), rubrics.assessment_templates_version(),
              rubrics.all_templates_version(), judge_code_version(with_them),
              judge_code_version(without))
    original = rubrics.template
    monkeypatch.setattr(rubrics, "template", lambda name: original(name) + (
        " (edited)" if name == "category" else ""))
    after = (rubrics.templates_version(), rubrics.assessment_templates_version(),
             rubrics.all_templates_version(), judge_code_version(with_them),
             judge_code_version(without))
    assert after[0] == before[0]  # the clip and ReAct rows keep their version
    assert after[1] != before[1] and after[2] != before[2]
    assert after[3] != before[3] and after[4] == before[4]


def test_a_rerun_asks_nothing_and_a_template_edit_asks_only_the_assessments(
        openai_server, tmp_path, monkeypatch):
    cache = JudgeCache(tmp_path / "cache.sqlite")
    config = openai_config(openai_server, evaluations=ASSESSED)
    tasks = trajectory()
    first = run(config, tasks, cache=cache)
    assert openai_server.calls == len(first) == 7
    again = run(config, tasks, cache=cache)
    assert openai_server.calls == 7 and all(r.cached for r in again)
    # the dry run renders the same prompts from the cached clip answers: all found
    estimate = estimate_cost(tasks, [config], cache=cache).judges[0]
    assert (estimate.calls, estimate.cached) == (0, 7)

    original = rubrics.template
    monkeypatch.setattr(rubrics, "template", lambda name: original(name) + (
        "\nBe strict." if name == "category" else ""))
    edited = run(config, tasks, cache=cache)
    assert openai_server.calls == 7 + 3  # two categories and the trajectory
    assert [r.cached for r in edited] == [True] * 4 + [False] * 3
    cache.close()


def test_dry_run_counts_the_assessments_and_the_switch(openai_server):
    tasks = trajectory()
    on = estimate_cost(tasks, [openai_config(openai_server, evaluations=ASSESSED)])
    off = estimate_cost(tasks, [openai_config(openai_server, evaluations=["clip_rubric"])])
    assert on.judges[0].calls == 4 + 2 + 1 and off.judges[0].calls == 4
    assert on.judges[0].est_tokens_in > off.judges[0].est_tokens_in
