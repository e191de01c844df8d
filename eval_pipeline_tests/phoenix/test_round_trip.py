"""#17: the Phoenix round trip against a real Phoenix server.

A small ReAct agent is traced into a real ``phoenix serve`` over OTLP; ``phoenix_sensor``
turns its complete traces into a batch partition; the batch job runs with the heuristic
judge and an OpenAI judge on the project's fake server; ``phoenix_annotations`` writes the
evaluations back; and they are read back from the server: on the right spans, with the
judgments' labels and scores, a failed judgment without a score, and no duplicates after a
second run. Skips, with the reason, where the server's environment (.venv-phoenix) is absent;
.ci/run makes it present and fails if it is not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.defs.pipeline.resources import PhoenixResource
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.exports.phoenix import assessment_name
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.phoenix.connection import PhoenixConnection
from eval_pipeline.phoenix.sink import read_annotations
from eval_pipeline.rubrics import ALL_EVALUATIONS
from eval_pipeline_tests.judges.fake_servers import status
from eval_pipeline_tests.judges.helpers import openai_config
from eval_pipeline_tests.phoenix.phoenix_server import PhoenixServer, free_port, missing_server
from eval_pipeline_tests.phoenix.react_agent import TASKS, Task, run_agent

pytestmark = pytest.mark.slow

PROJECT = "react-agent"
KEY = "sk-phoenix-roundtrip-7a6b5c4d3e2f"


@pytest.fixture(scope="module")
def phoenix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    reason = missing_server()
    if reason:
        pytest.skip(reason)
    server = PhoenixServer(tmp_path_factory.mktemp("phoenix")).start()
    try:
        yield server
    finally:
        server.stop()


def _defs(root: Path, judges: list[JudgeConfig], base_url: str) -> dg.Definitions:
    return build_definitions(
        judges, pipeline=PipelineSettings(incoming_dir=str(root / "incoming"),
                                          batches_dir=str(root / "batches")),
        assets_dir=str(root / "assets"),
        phoenix=PhoenixResource(base_url=base_url, project=PROJECT, settle_seconds=0.0))


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None):
    sensor = defs.resolve_sensor_def("phoenix_sensor")
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                 resources={"pipeline": defs.resources["pipeline"],
                                            "phoenix": defs.resources["phoenix"]}) as context:
        return sensor(context)


def _wait_for_roots(connection: PhoenixConnection, n: int) -> list[dict]:
    spans = connection.client().spans
    deadline = time.monotonic() + 30
    while True:
        try:
            roots = spans.get_spans(project_identifier=PROJECT, parent_id="null", limit=1000)
        except Exception:  # the project appears with its first span
            roots = []
        if len(roots) >= n or time.monotonic() > deadline:
            return roots
        time.sleep(0.2)


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, key: str) -> None:
    result = defs.resolve_job_def("evaluate_batch").execute_in_process(
        partition_key=key, instance=instance)
    assert result.success


def _table(root: Path, *path: str) -> pd.DataFrame:
    return pd.read_parquet(root / "assets" / Path(*path[:-1]) / f"{path[-1]}.parquet")


def test_phoenix_round_trip(phoenix_server, openai_server, tmp_path, instance, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    connection = PhoenixConnection(base_url=phoenix_server.base_url, project=PROJECT)
    traces = run_agent(phoenix_server.otlp_endpoint, PROJECT)
    assert len(_wait_for_roots(connection, len(TASKS))) == len(TASKS)
    judges = [JudgeConfig(name="heuristic"),
              openai_config(openai_server, evaluations=list(ALL_EVALUATIONS))]
    defs = _defs(tmp_path, judges, phoenix_server.base_url)

    # 1. The source: one tick, one batch of the three traces, registered and requested.
    result = _tick(defs, instance, None)
    (added,) = result.dynamic_partitions_requests
    (key,) = added.partition_keys
    assert key == "phoenix_react-agent_00001"
    assert [r.partition_key for r in result.run_requests] == [key]
    instance.add_dynamic_partitions("batches", [key])
    openai_server.push(status(400, message="this one request is refused"))
    _run(defs, instance, key)

    trajectories = _table(tmp_path, "preprocessed_trajectories", key)
    assert sorted(json.loads(e)["trace_id"] for e in trajectories["extra"]) == sorted(traces)
    assert set(trajectories["source_format"]) == {"openinference_spans"}
    clips = _table(tmp_path, "clips", key)
    assert set(clips["trace_id"]) == set(traces) and clips["span_id"].notna().all()

    # 2. The evaluations, read back from the server.
    spans = connection.client().spans.get_spans(project_identifier=PROJECT, limit=1000)
    by_id = {s["context"]["span_id"]: s for s in spans}
    sent = _table(tmp_path, "phoenix_annotations", key)
    back = read_annotations(connection, list(by_id)).reset_index()
    assert len(back) == len(sent) > 0
    assert not back.duplicated(["span_id", "annotation_name", "identifier"]).any()
    back["identifier"] = back["identifier"].fillna("")
    got = back.set_index(["span_id", "annotation_name", "identifier"])

    heuristic = _table(tmp_path, "judgments", "heuristic", key)
    gpt = _table(tmp_path, "judgments", "gpt", key)
    failed = gpt[gpt["status"] == "failed"]
    assert len(failed) == 1 and "refused" in failed["error"].iloc[0]
    clip_span = {(r.trajectory_id, r.clip_index): r.span_id for r in clips.itertuples()}
    root_of = {json.loads(e)["trace_id"]: json.loads(e)["root_span_id"]
               for e in trajectories["extra"]}
    trace_of = {t: json.loads(e)["trace_id"] for t, e in
                zip(trajectories["trajectory_id"], trajectories["extra"], strict=True)}
    names = {"thought_to_tool": "Tool Calling Eval (Thought-to-Tool)",
             "query_to_thought": "Query Interpretation Eval (Query-to-Thought)",
             "sequence_optimality": "Sequence Optimality Eval",
             "clip_rubric": "Clip Rubric (mean over metrics)"}
    checked = 0
    for judge, table in (("heuristic", heuristic), ("gpt", gpt)):
        for row in table.itertuples():
            trace = trace_of[row.trajectory_id]
            assessment = assessment_name(row.evaluation_kind, row.tool_type)
            if row.evaluation_kind == "sequence_optimality" or assessment:
                span = root_of[trace]
                assert by_id[span]["parent_id"] is None  # trace-level: the root span
            else:
                span = clip_span[(row.trajectory_id, row.clip_index)]
            assert by_id[span]["context"]["trace_id"] == trace
            note = got.loc[(span, assessment or names[row.evaluation_kind], judge)]
            assert note["metadata"]["judge"] == judge
            assert note["annotator_kind"] == ("CODE" if judge == "heuristic" else "LLM")
            scores = json.loads(row.scores)
            if row.status == "failed":  # no score, the error says why
                assert note["result.label"] == "failed" and pd.isna(note["result.score"])
                assert "refused" in note["result.explanation"]
            elif assessment:  # one annotation per category / trajectory, on the root span
                assert note["result.score"] == pytest.approx(sum(scores.values()) / len(scores))
            elif row.evaluation_kind == "clip_rubric":
                assert note["result.score"] == pytest.approx(sum(scores.values()) / len(scores))
                for metric, value in scores.items():
                    assert got.loc[(span, f"Clip Rubric: {metric}", judge),
                                   "result.score"] == pytest.approx(value)
            else:
                assert note["result.label"] == row.label
                assert note["result.score"] == pytest.approx(scores[row.evaluation_kind])
            checked += 1
    assert checked == len(heuristic) + len(gpt)
    # Tool clips are judged on the LLM span that chose the tool (the ReAct framework's way).
    for row in heuristic[heuristic["evaluation_kind"] == "thought_to_tool"].itertuples():
        span = by_id[clip_span[(row.trajectory_id, row.clip_index)]]
        assert span["span_kind"] == "LLM"
        assert "Action: " in span["attributes"]["output.value"]
    summaries = _table(tmp_path, "trajectory_summaries", key)
    for row in summaries.itertuples():
        note = got.loc[(root_of[trace_of[row.trajectory_id]],
                        "Trajectory Score (overall_trajectory_score)", "")]
        assert note["result.score"] == pytest.approx(row.overall_trajectory_score)
        assert note["metadata"]["judges"] == ["gpt", "heuristic"]
    ids_before = set(back["id"])

    # 3. A second run: every annotation updated in place (same ids), none duplicated; the
    # judgment that failed is asked again and now scored (a rubric adds its metrics).
    _run(defs, instance, key)
    resent = _table(tmp_path, "phoenix_annotations", key)
    again = read_annotations(connection, list(by_id)).reset_index()
    again["identifier"] = again["identifier"].fillna("")
    assert len(again) == len(resent) and ids_before <= set(again["id"])
    assert not again.duplicated(["span_id", "annotation_name", "identifier"]).any()
    added = len(resent) - len(sent)
    assert added == (len(json.loads(_table(tmp_path, "judgments", "gpt", key).set_index(
        ["trajectory_id", "clip_index", "evaluation_kind"]).loc[tuple(failed.iloc[0][
            ["trajectory_id", "clip_index", "evaluation_kind"]]), "scores"]))
        if failed["evaluation_kind"].iloc[0] == "clip_rubric" else 0)
    row = failed.iloc[0]
    span = (root_of[trace_of[row["trajectory_id"]]]
            if row["evaluation_kind"] == "sequence_optimality"
            else clip_span[(row["trajectory_id"], row["clip_index"])])
    now = again.set_index(["span_id", "annotation_name", "identifier"]).loc[
        (span, names[row["evaluation_kind"]], "gpt")]
    assert now["result.label"] != "failed" and pd.notna(now["result.score"])

    # 4. Nothing is read twice; a new trace becomes a new batch of its own.
    quiet = _tick(defs, instance, result.cursor)
    assert not quiet.run_requests and not quiet.dynamic_partitions_requests
    (new_trace,) = run_agent(phoenix_server.otlp_endpoint, PROJECT,
                             [Task("What is 2 + 2?", [], "4")])
    _wait_for_roots(connection, len(TASKS) + 1)
    later = _tick(defs, instance, quiet.cursor or result.cursor)
    (added,) = later.dynamic_partitions_requests
    assert added.partition_keys == ["phoenix_react-agent_00002"]
    drop = tmp_path / "phoenix" / "react-agent" / "phoenix_react-agent_00002.jsonl"
    lines = [json.loads(line) for line in drop.read_text("utf-8").splitlines()]
    assert {s["context"]["trace_id"] for s in lines} == {new_trace}

    # 5. An unreachable server: the write-back refuses in one line; the judgments stay.
    down = _defs(tmp_path, judges, f"http://127.0.0.1:{free_port()}")
    outcome = down.resolve_job_def("evaluate_batch").execute_in_process(
        partition_key=key, instance=instance, raise_on_error=False,
        asset_selection=[dg.AssetKey("phoenix_annotations")])
    assert not outcome.success
    (failure,) = [e for e in outcome.all_events if e.is_step_failure]
    message = failure.step_failure_data.user_failure_data.description
    assert "\n" not in message and "unreachable" in message and "judgments are kept" in message
    assert len(_table(tmp_path, "judgments", "gpt", key)) == len(gpt)
    # The key went to the fake LLM server only: nowhere in what was sent to Phoenix.
    assert KEY not in sent.to_json()
