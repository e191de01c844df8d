"""The console script end to end: real inputs, real Dagster runs, exported tables."""

import json
import logging
import re

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.cli import main


@pytest.fixture(autouse=True)
def dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def _non_blank_lines(paths) -> int:
    return sum(1 for p in paths for line in p.read_bytes().splitlines() if line.strip())


def _check_accounting(out, expected_records):
    raw = pd.read_parquet(out / "raw_trajectories.parquet")
    quarantine = pd.read_parquet(out / "quarantine.parquet")
    kept = pd.read_parquet(out / "preprocessed_trajectories.parquet")
    removed = pd.read_parquet(out / "preprocess_report.parquet")
    assert len(raw) + len(quarantine) == expected_records
    assert len(kept) + len(removed) == len(raw)
    assert raw["trajectory_id"].is_unique
    return raw, quarantine, kept, removed


@pytest.mark.slow
def test_cli_on_the_sample_data(project_root, tmp_path, capsys, dagster_home):
    out = tmp_path / "out"
    assert main(["run", str(project_root / "data"), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    inputs = sorted((project_root / "data" / "incoming").glob("*.jsonl"))
    _raw, quarantine, kept, removed = _check_accounting(out, _non_blank_lines(inputs))
    assert len(quarantine) >= 3 and len(removed) >= 2
    for label in ["records read", "kept", "removed (preprocessing)", "quarantined", "clips",
                  "judgments [heuristic]", "mean overall score", "clips: microsandbox"]:
        assert label in printed
    assert re.search(rf"^quarantined\s+{len(quarantine)}$", printed, re.MULTILINE)
    for reason, n in quarantine["reason"].value_counts().items():
        assert f"quarantined: {reason}" in printed and str(n) in printed
    assert "format: xml_tags" in printed

    evaluated = [json.loads(x) for x in (out / "evaluated.jsonl").read_text("utf-8").splitlines()]
    assert len(evaluated) == len(kept)
    first = evaluated[0]
    assert {"task_id", "task_description", "raw_response", "full_response_with_evaluations",
            "evaluation_metadata"} <= set(first)
    assert {"total_clips", "successful_evaluations", "success_rate",
            "overall_trajectory_score", "tool_averages"} <= set(first["evaluation_metadata"])
    # No expected tools in these drops: no routing block, the original layout.
    assert "routing" not in first["evaluation_metadata"]
    for name in ["raw_trajectories", "quarantine", "preprocessed_trajectories",
                 "preprocess_report", "clips", "judgments__heuristic", "averaged_scores",
                 "trajectory_summaries", "evaluation_report"]:
        assert (out / f"{name}.parquet").exists(), name

    # The runs are in the instance the UI reads, with their materializations.
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"eval_pipeline/source": "cli"}))
        assert len(runs) == 2  # every batch in one run, then the report
        # Plain debug lines (the IO manager's one per partition loaded) are not written to
        # the event log, one SQLite write each; Dagster's own events are.
        logs = instance.all_logs(runs[-1].run_id)
        assert any(e.dagster_event is not None for e in logs)
        assert not [e.user_message for e in logs
                    if e.dagster_event is None and e.level == logging.DEBUG]
        assert instance.get_latest_materialization_event(dg.AssetKey("evaluation_report"))
        # Each batch still has its own materialization with its own metadata.
        summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
        batches = sorted(summaries["batch"].unique())
        assert len(batches) >= 3
        for batch in batches:
            records = instance.fetch_materializations(dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("trajectory_summaries"), asset_partitions=[batch]),
                limit=1).records
            meta = records[0].asset_materialization.metadata
            assert meta["trajectories"].value == int((summaries["batch"] == batch).sum())
            assert meta["dagster/row_count"].value == meta["trajectories"].value
            assert meta["path"].value.endswith(f"{batch}.parquet")


@pytest.mark.slow
def test_cli_on_demo02_gives_ten_batches_that_add_up(corpora_dir, tmp_path, capsys):
    drop = corpora_dir / "dataeva" / "demo02.jsonl"
    out = tmp_path / "out"
    assert main(["run", str(drop), "--output", str(out), "--split-size", "10"]) == 0
    raw, _quarantine, kept, _removed = _check_accounting(out, 97)
    assert sorted(raw["batch"].unique()) == [f"demo02{i:02d}" for i in range(1, 11)]
    assert raw.groupby("batch").size()["demo0210"] == 7
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet")
    assert len(summaries) == len(kept)
    report = pd.read_parquet(out / "evaluation_report.parquet").set_index("batch")
    assert report.loc["ALL", "trajectories"] == len(kept)
    assert re.search(r"^batches\s+10$", capsys.readouterr().out, re.MULTILINE)


@pytest.mark.slow
def test_cli_accounts_for_every_agent_data_platform_record(corpora_dir, tmp_path):
    folder = corpora_dir / "agent_data_platform"
    out = tmp_path / "out"
    assert main(["run", str(folder), "--output", str(out)]) == 0
    raw, *_ = _check_accounting(out, _non_blank_lines(sorted(folder.glob("*.jsonl"))))
    assert raw["source_file"].nunique() == len(list(folder.glob("*.jsonl")))


@pytest.mark.parametrize("args, message", [
    (["run", "no/such/input", "--output", "OUT"], "input not found"),
    (["run", "data", "--output", "OUT", "--judges", "missing.yaml"], "judges file not found"),
])
def test_cli_reports_bad_input_clearly(project_root, tmp_path, capsys, args, message,
                                       monkeypatch):
    monkeypatch.chdir(project_root)
    args = [a.replace("OUT", str(tmp_path / "o")) for a in args]
    assert main(args) == 1
    assert message in capsys.readouterr().err


def test_cli_rejects_bad_numbers_and_bad_judges_files(project_root, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", str(project_root / "data"), "--output", str(tmp_path), "--split-size", "0"])
    assert exc.value.code == 2
    bad = tmp_path / "judges.yaml"
    bad.write_text("judges:\n  - name: Bad Name\n    provider: heuristic\n")
    assert main(["run", str(project_root / "data"), "--output", str(tmp_path / "o"),
                 "--judges", str(bad)]) == 1
    assert "invalid judges file" in capsys.readouterr().err


@pytest.mark.slow
def test_trajectory_ids_do_not_depend_on_the_split_size(project_root, tmp_path):
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    ids = []
    for size in (5, 24):
        out = tmp_path / f"split{size}"
        assert main(["run", str(drop), "--output", str(out), "--split-size", str(size)]) == 0
        raw = pd.read_parquet(out / "raw_trajectories.parquet")
        assert raw["trajectory_id"].is_unique
        ids.append(dict(zip(raw["source_line"], raw["trajectory_id"], strict=True)))
    assert ids[0] == ids[1]


@pytest.mark.slow
def test_cli_flag_mode_keeps_and_flags_instead_of_removing(project_root, tmp_path):
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    out = tmp_path / "flagged"
    assert main(["run", str(drop), "--output", str(out), "--frequency-filter", "flag",
                 "--duplicate-filter", "flag"]) == 0
    removed = pd.read_parquet(out / "preprocess_report.parquet")
    kept = pd.read_parquet(out / "preprocessed_trajectories.parquet")
    assert removed.empty and len(kept) == 24
    flags = {row.task_id: json.loads(row.preprocessing_flags) for row in kept.itertuples()}
    assert any(f.startswith("frequency: 17 tool calls") for f in flags["sample_18"])
    assert any(f.startswith("duplicates") for f in flags["sample_19"])
    meta = json.loads(kept.set_index("task_id").loc["sample_17", "preprocessing_metadata"])
    assert meta["format_corrected"] and meta["format_fixes"]


@pytest.mark.slow
def test_one_run_for_all_batches_by_default_and_one_per_batch_on_request(
        project_root, tmp_path, dagster_home):
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    tables, runs_made = {}, {}
    seen = 0
    for name, extra in (("default", []), ("per_batch", ["--batches-per-run", "1"]),
                        ("workers", ["--workers", "2"])):
        out = tmp_path / name
        assert main(["run", str(drop), "--output", str(out), "--split-size", "8", *extra]) == 0
        tables[name] = pd.read_parquet(out / "averaged_scores.parquet").sort_values(
            ["trajectory_id", "clip_index", "evaluation_kind", "tool_type"]
        ).reset_index(drop=True)
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            runs = instance.get_runs(filters=dg.RunsFilter(job_name="evaluate_batch"))
            assert all(r.is_success for r in runs)
            runs_made[name] = len(runs) - seen
            seen = len(runs)
    # two workers take runs as they free up: at least four runs each, here one per batch
    assert runs_made == {"default": 1, "per_batch": 3, "workers": 3}
    pd.testing.assert_frame_equal(tables["default"], tables["per_batch"])
    pd.testing.assert_frame_equal(tables["default"], tables["workers"])


@pytest.mark.slow
def test_cli_per_file_format_override_and_custom_tool_registry(project_root, tmp_path):
    drop = tmp_path / "in" / "runs.log"
    drop.parent.mkdir()
    # ReAct text in a .log file, with a tool the packaged registry does not know.
    drop.write_text("Question: What is 2+2?\nThought: I should compute it.\nAction: abacus\n"
                    "Action Input: {\"expr\": \"2+2\"}\nObservation: 4\n"
                    "Thought: I know the answer.\nAnswer: 4\n", "utf-8")
    tools = tmp_path / "tools.yaml"
    tools.write_text("tool_types:\n  microsandbox:\n    tags: [microsandbox]\n"
                     "    names: [abacus]\n", "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(drop.parent), "--output", str(out), "--format-for",
                 "*.log=react_text", "--tools", str(tools)]) == 0
    raw = pd.read_parquet(out / "raw_trajectories.parquet")
    assert list(raw["source_format"]) == ["react_text"]
    clips = pd.read_parquet(out / "clips.parquet")
    assert "microsandbox" in set(clips["tool_type"])  # abacus, through the custom registry
    bad = main(["run", str(drop.parent), "--output", str(out), "--format-for", "*.log=nope"])
    assert bad == 1


@pytest.mark.slow
def test_cli_routing_cases_are_checked_deterministically(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps(c) for c in [
        {"name": "kb", "prompt": "What do people say about type hints?",
         "expected_tools": ["search_knowledge_base"]},
        {"name": "chit-chat", "prompt": "Hi!", "expected_tools": []},
    ]) + "\n", "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(cases), "--output", str(out)]) == 0
    routing = pd.read_parquet(out / "routing_checks.parquet").set_index("task_id")
    # A case file holds prompts only: nothing was called, so only "call nothing" passes.
    assert not routing.loc["kb", "passed"] and routing.loc["chit-chat", "passed"]
    assert json.loads(routing.loc["kb", "missing"]) == ["search_knowledge_base"]
    assert re.search(r"^routing checks\s+1/2 passed$", capsys.readouterr().out, re.MULTILINE)
    summaries = pd.read_parquet(out / "trajectory_summaries.parquet").set_index("task_id")
    assert summaries.loc["chit-chat", "routing_passed"]
    assert not summaries.loc["kb", "routing_passed"]
    block = json.loads(summaries.loc["kb", "evaluation_metadata"])["routing"]
    assert block["missing"] == ["search_knowledge_base"] and block["passed"] is False
    report = pd.read_parquet(out / "evaluation_report.parquet").set_index("batch")
    assert report.loc["ALL", "routing_checked"] == 2
    assert report.loc["ALL", "routing_pass_rate"] == 0.5


@pytest.mark.slow
def test_cli_output_inside_the_input_folder_is_not_read_back(project_root, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "runs.jsonl").write_bytes(
        (project_root / "data" / "incoming" / "sample_malformed.jsonl").read_bytes())
    for _ in range(2):
        assert main(["run", str(data), "--output", str(data / "results")]) == 0
    raw = pd.read_parquet(data / "results" / "raw_trajectories.parquet")
    assert set(raw["source_file"]) == {"runs.jsonl"}


def test_cli_names_a_missing_key_variable_before_doing_any_work(project_root, tmp_path,
                                                                 capsys, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    judges = tmp_path / "judges.yaml"
    judges.write_text("judges:\n  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
                      "    api_key_env: NO_SUCH_KEY_VAR\n", "utf-8")
    out = tmp_path / "out"
    assert main(["run", str(project_root / "data"), "--output", str(out),
                 "--judges", str(judges)]) == 1
    err = capsys.readouterr().err
    assert "NO_SUCH_KEY_VAR" in err and "Traceback" not in err
    assert not out.exists()
