"""#8.2-8.4, 8.7 end to end: ``eval-pipeline run`` on data/ (plus a Phoenix span export)
with the heuristic and two LLM judges on the fake servers writes every new output, and
each parses."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from eval_pipeline.cli import main
from eval_pipeline_tests.formats.test_spans import phoenix_rows

KEY = "sk-exports-OPENAI-5e6f7a8b9c0d"
ANT_KEY = "sk-ant-exports-1a2b3c4d5e6f"


@pytest.mark.slow
def test_cli_writes_every_export(project_root, tmp_path, monkeypatch, capsys, isolated_store,
                                 openai_server, anthropic_server):
    incoming = project_root / "data" / "incoming"
    if not incoming.is_dir():
        pytest.skip("data/incoming not present")
    drop = tmp_path / "in"
    shutil.copytree(incoming, drop)
    (drop / "traces.jsonl").write_text(
        "\n".join(json.dumps(r) for r in phoenix_rows()) + "\n", "utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("X_OPENAI_KEY", KEY)
    monkeypatch.setenv("X_ANTHROPIC_KEY", ANT_KEY)
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        "judges:\n  - name: heuristic\n    provider: heuristic\n"
        "  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
        f"    base_url: {openai_server.base_url}\n    api_key_env: X_OPENAI_KEY\n"
        "  - name: claude\n    provider: anthropic\n"
        f"    base_url: {anthropic_server.base_url}\n    api_key_env: X_ANTHROPIC_KEY\n",
        "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(drop), "--output", str(out), "--judges", str(judges)]) == 0
    capsys.readouterr()

    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    n = len(summaries)
    # 4: evaluated.jsonl, drop-in for the original's readers.
    records = [json.loads(line) for line in (out / "evaluated.jsonl").read_text().splitlines()]
    assert len(records) == n
    for record in records:
        assert record["full_response_with_evaluation"] == record[
            "full_response_with_evaluations"]
        meta = record["evaluation_metadata"]
        assert meta["num_clips"] == meta["total_clips"] and meta["num_models"] == 3
        assert meta["model_names"] == ["heuristic_heuristic-v1", "openai_gpt-4.1-mini",
                                       "anthropic_claude-sonnet-4-5"]
    # 2: one detail file per judge and trajectory, each parses.
    details = sorted((out / "judge_details").iterdir())
    assert len(details) == 3 * n
    clips = pd.read_parquet(out / "clips.parquet")
    for path in details:
        data = json.loads(path.read_text("utf-8"))
        assert path.name.startswith(data["model_name"] + "_")
        assert path.name.endswith("_eva.json")
        own = clips[clips["trajectory_id"] == data["trajectory_id"]]
        assert len(data["evaluations"]) == data["total_clips"] == len(own)
    # 3: the CSV has one row per judge, clip and metric; Phoenix files load.
    table = pd.read_csv(out / "clip_scores.csv")
    expected = sum(max(1, len(json.loads(s)))
                   for judge in ("heuristic", "gpt", "claude")
                   for s in pd.read_parquet(out / f"judgments__{judge}.parquet")["scores"])
    assert len(table) == expected and set(table["judge"]) == {"heuristic", "gpt", "claude"}
    assert set(table["trace_id"].dropna()) == {"7f3a1c0de5b94f0e8f1a2b3c4d5e6f70"}
    phoenix = out / "phoenix_evaluations"
    manifest = json.loads((phoenix / "manifest.json").read_text())
    assert {e["file_stem"] for e in manifest} == {
        "clip_rubric", "thought_to_tool", "query_to_thought", "sequence_optimality",
        "trajectory_score"}
    for entry in manifest:
        frame = pd.read_parquet(phoenix / f"{entry['file_stem']}.parquet")
        assert frame.index.name == entry["index"] and len(frame) == entry["rows"] >= 1
        pd.read_csv(phoenix / f"{entry['file_stem']}.csv", index_col=entry["index"])
    # 7: the report's ReAct figures, printed per batch and overall.
    report = pd.read_parquet(out / "evaluation_report.parquet")
    text = (out / "react_metrics.txt").read_text("utf-8")
    assert text.count("Combined accuracy (both correct): ") == len(report)
    assert text.count("Tool Usage Breakdown:") == len(report)
    assert report["combined_accuracy"].notna().all()
    # No key in any new output.
    for path in [*details, out / "clip_scores.csv", out / "react_metrics.txt",
                 *phoenix.iterdir()]:
        data = path.read_bytes()
        assert KEY.encode() not in data and ANT_KEY.encode() not in data
