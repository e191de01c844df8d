"""#8.3: clip_scores.csv (one row per clip, judge and metric) and the Phoenix evaluations,
on a Phoenix span export (ids to go back to) and on XML records (none)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.exports import write_exports
from eval_pipeline.exports.phoenix import NOT_SCORED
from eval_pipeline.rubrics import ALL_EVALUATIONS
from eval_pipeline.scoring import average_judgments
from eval_pipeline_tests.exports.helpers import HEURISTIC, run_tables
from eval_pipeline_tests.formats.test_spans import phoenix_rows
from eval_pipeline_tests.judges.helpers import openai_config

TRACE = "7f3a1c0de5b94f0e8f1a2b3c4d5e6f70"


@pytest.fixture
def spans_drop(tmp_path: Path) -> Path:
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in phoenix_rows()) + "\n", "utf-8")
    return path


def _csv(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "clip_scores.csv", keep_default_na=False, na_values=[""])


def test_clip_scores_one_row_per_clip_judge_metric(spans_drop, tmp_path, openai_server,
                                                   monkeypatch):
    monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-fake-openai-0000")
    judges = [HEURISTIC, openai_config(openai_server, evaluations=list(ALL_EVALUATIONS))]
    tables = run_tables(spans_drop, judges)
    write_exports(tables, tmp_path)
    table = _csv(tmp_path)
    expected = 0
    for judge in ("heuristic", "gpt"):
        rows = tables[f"judgments__{judge}"]
        expected += sum(max(1, len(json.loads(s))) for s in rows["scores"])
        for row in rows.to_dict("records"):
            for metric, score in json.loads(row["scores"]).items():
                found = table[(table["judge"] == judge)
                              & (table["clip_index"] == row["clip_index"])
                              & (table["evaluation_kind"] == row["evaluation_kind"])
                              & (table["metric"] == metric)]
                assert found["score"].tolist() == [pytest.approx(score)]
                assert found["explanation"].tolist() == [row["reasoning"]]
    assert len(table) == expected
    assert set(table["trace_id"]) == {TRACE}
    # The tool clip is judged on the LLM span that chose the tool; the final clip on the
    # span of its answer.
    by_clip = table.groupby("clip_index")["span_id"].unique().to_dict()
    assert list(by_clip[0]) == ["s2"] and list(by_clip[1]) == ["s4"]
    assert set(table.loc[table["evaluation_kind"] == "thought_to_tool", "label"]) <= {
        "correct", "incorrect"}
    assert table.loc[table["evaluation_kind"] == "clip_rubric", "label"].isna().all()


def test_a_failed_judgment_is_a_row_with_its_error_and_no_score(spans_drop, tmp_path,
                                                                openai_server, monkeypatch):
    monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-fake-openai-0000")
    from eval_pipeline_tests.judges.fake_servers import status

    openai_server.script.extend([status(400, message="bad request")] * 50)
    judge = openai_config(openai_server, evaluations=list(ALL_EVALUATIONS), max_retries=0)
    tables = run_tables(spans_drop, [judge])
    write_exports(tables, tmp_path)
    table = _csv(tmp_path)
    assert (table["status"] == "failed").all() and table["score"].isna().all()
    assert table["metric"].isna().all() and table["error"].str.len().gt(0).all()
    assert len(table) == len(tables["judgments__gpt"])
    # Phoenix gets the failure as a label and the error, never a score.
    evals = pd.read_parquet(tmp_path / "phoenix_evaluations" / "thought_to_tool.parquet")
    assert evals.index.tolist() == ["s2"]
    assert evals["label"].tolist() == [NOT_SCORED] and evals["score"].isna().all()
    assert "400" in evals["explanation"].iloc[0]


def test_phoenix_evaluations_keyed_by_span_trace_level_on_the_root_span(spans_drop, tmp_path):
    tables = run_tables(spans_drop)
    write_exports(tables, tmp_path)
    folder = tmp_path / "phoenix_evaluations"
    averaged = tables["averaged_scores"].set_index(["clip_index", "evaluation_kind"])
    manifest = {e["file_stem"]: e for e in json.loads((folder / "manifest.json").read_text())}
    index = "context.span_id"  # Phoenix's span annotations; no trace evaluations any more
    for stem, target in (("clip_rubric", "span"), ("thought_to_tool", "span"),
                         ("query_to_thought", "span"), ("sequence_optimality", "root_span"),
                         ("trajectory_score", "root_span")):
        parquet = pd.read_parquet(folder / f"{stem}.parquet")
        csv = pd.read_csv(folder / f"{stem}.csv", index_col=index)
        assert parquet.index.name == index and list(parquet.columns) == [
            "label", "score", "explanation"]
        assert parquet["score"].tolist() == pytest.approx(csv["score"].tolist())
        assert manifest[stem]["index"] == index and manifest[stem]["rows"] == len(parquet)
        assert manifest[stem]["target"] == target
        assert manifest[stem]["left_out_no_id"] == 0
    t2t = pd.read_parquet(folder / "thought_to_tool.parquet")
    row = averaged.loc[(0, "thought_to_tool")]
    assert t2t.loc["s2", "score"] == json.loads(row["scores"])["thought_to_tool"]
    assert t2t.loc["s2", "label"] == row["label"]
    rubric = pd.read_parquet(folder / "clip_rubric.parquet")
    assert rubric.loc["s2", "score"] == pytest.approx(averaged.loc[(0, "clip_rubric"),
                                                                   "mean_score"])
    assert rubric.loc["s4", "score"] == pytest.approx(averaged.loc[(1, "clip_rubric"),
                                                                   "mean_score"])
    seq = pd.read_parquet(folder / "sequence_optimality.parquet")
    assert seq.index.tolist() == ["s1"]  # the root span (ReActAgent.chat) of trace TRACE
    overall = pd.read_parquet(folder / "trajectory_score.parquet")
    assert overall.loc["s1", "score"] == pytest.approx(
        tables["trajectory_summaries"]["overall_trajectory_score"].iloc[0])


def test_span_annotations_file_is_every_judge_row_on_its_span(spans_drop, tmp_path):
    """``span_annotations.parquet``: what the Phoenix write-back sends, one annotation per
    (span, name, judge), each judge's own figures, the judge named in the metadata."""
    tables = run_tables(spans_drop)
    write_exports(tables, tmp_path)
    frame = pd.read_parquet(tmp_path / "phoenix_evaluations" / "span_annotations.parquet")
    judged = tables["judgments__heuristic"].set_index(["clip_index", "evaluation_kind"])
    assert not frame.duplicated(["span_id", "name", "identifier"]).any()
    rows = frame.set_index(["span_id", "name", "identifier"])
    t2t = rows.loc[("s2", "Tool Calling Eval (Thought-to-Tool)", "heuristic")]
    assert t2t["label"] == judged.loc[(0, "thought_to_tool"), "label"]
    assert t2t["score"] == json.loads(judged.loc[(0, "thought_to_tool"), "scores"])[
        "thought_to_tool"]
    assert t2t["annotator_kind"] == "CODE"  # the heuristic is not an LLM, and says so
    meta = json.loads(t2t["metadata"])
    assert meta["judge"] == "heuristic" and meta["trace_id"] == TRACE
    for metric, value in json.loads(judged.loc[(1, "clip_rubric"), "scores"]).items():
        assert rows.loc[("s4", f"Clip Rubric: {metric}", "heuristic"), "score"] == value
    seq = rows.loc[("s1", "Sequence Optimality Eval", "heuristic")]
    assert seq["label"] == judged.loc[(-1, "sequence_optimality"), "label"]
    overall = rows.loc[("s1", "Trajectory Score (overall_trajectory_score)", "")]
    assert overall["score"] == pytest.approx(
        tables["trajectory_summaries"]["overall_trajectory_score"].iloc[0])
    assert json.loads(overall["metadata"])["judges"] == ["heuristic"]
    counts = json.loads((tmp_path / "phoenix_evaluations" / "span_annotations.json")
                        .read_text())
    assert counts["rows"] == len(frame) and counts["left_out_no_id"] == 0


def test_sources_without_ids_are_counted_not_invented(small_drop, tmp_path):
    tables = run_tables(small_drop)
    write_exports(tables, tmp_path)
    folder = tmp_path / "phoenix_evaluations"
    manifest = {e["file_stem"]: e for e in json.loads((folder / "manifest.json").read_text())}
    averaged = tables["averaged_scores"]
    for stem, entry in manifest.items():
        assert entry["rows"] == 0 and len(pd.read_parquet(folder / f"{stem}.parquet")) == 0
        expected = (len(tables["trajectory_summaries"]) if stem == "trajectory_score"
                    else int((averaged["evaluation_kind"] == stem).sum()))
        assert entry["left_out_no_id"] == expected > 0
    table = _csv(tmp_path)
    assert table["span_id"].isna().all() and table["trace_id"].isna().all()


def test_two_clips_on_one_span_keep_the_first_and_count_the_other():
    from eval_pipeline.exports.phoenix import phoenix_evaluations

    judged = pd.DataFrame([
        {"trajectory_id": "t", "clip_index": i, "evaluation_kind": "thought_to_tool",
         "tool_type": "generic", "status": "ok", "label": label,
         "scores": json.dumps({"thought_to_tool": float(label == "correct")}),
         "summary": "", "reasoning": f"why {i}", "error": None}
        for i, label in ((0, "correct"), (1, "incorrect"))])
    averaged = average_judgments({"j": judged})
    trajectories = pd.DataFrame([{"trajectory_id": "t", "batch": "b", "task_id": "t",
                                  "extra": json.dumps({"trace_id": "tr"})}])
    evals = phoenix_evaluations(averaged, pd.DataFrame(), trajectories,
                                {("t", 0): "llm", ("t", 1): "llm"})
    entry, frame = evals["thought_to_tool"]
    assert frame.to_dict("index") == {"llm": {"label": "correct", "score": 1.0,
                                              "explanation": "why 0"}}
    assert (entry.rows, entry.left_out_same_span, entry.left_out_no_id) == (1, 1, 0)
