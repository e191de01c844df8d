import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from eval_pipeline.definitions import defs
from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.judges.config import JudgeConfig

EXPECTED = {
    "raw_trajectories", "quarantine", "preprocessed_trajectories", "preprocess_report", "clips",
    "routing_checks",
    "judgments/heuristic", "averaged_scores", "trajectory_summaries", "evaluation_report",
    "judge_agreement", "judge_disagreements", "routing_suite_results",
}


def test_code_location_loads_with_every_stage():
    loaded = defs()
    keys = {k.to_user_string() for k in loaded.resolve_asset_graph().get_all_asset_keys()}
    assert keys == EXPECTED
    assert loaded.resolve_job_def("evaluate_batch") is not None
    assert {s.name for s in loaded.sensors} == {"new_drop_sensor", "report_after_batch_sensor",
                                                "catch_up_sensor"}
    assert [s.name for s in loaded.schedules] == ["routing_suite_schedule"]


def test_one_judgments_asset_per_judge_feeding_the_average():
    judges = [JudgeConfig(name="heuristic"), JudgeConfig(name="second_opinion")]
    graph = build_definitions(judges).resolve_asset_graph()
    averaged = graph.get(dg.AssetKey("averaged_scores"))
    assert averaged.parent_keys == {dg.AssetKey(["judgments", "heuristic"]),
                                    dg.AssetKey(["judgments", "second_opinion"])}


def test_judge_code_version_changes_with_the_model_only_for_that_judge():
    a = build_definitions([JudgeConfig(name="a"), JudgeConfig(name="b")]).resolve_asset_graph()
    b = build_definitions([JudgeConfig(name="a", model="heuristic-v2"),
                           JudgeConfig(name="b")]).resolve_asset_graph()
    key_a, key_b = dg.AssetKey(["judgments", "a"]), dg.AssetKey(["judgments", "b"])
    assert a.get(key_a).code_version != b.get(key_a).code_version
    assert a.get(key_b).code_version == b.get(key_b).code_version


def test_workspace_loads_with_the_dagster_cli(project_root):
    result = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=project_root, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful" in result.stdout + result.stderr


def test_dg_sees_the_project(project_root):
    dg_cli = Path(sys.executable).parent / "dg"
    result = subprocess.run([str(dg_cli), "check", "defs"], cwd=project_root,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All definitions loaded successfully" in result.stdout + result.stderr


def test_llm_judges_take_the_judge_pool_and_the_heuristic_alone_does_not():
    gpt = JudgeConfig(name="gpt", provider="openai", model="gpt-4.1-mini",
                      api_key_env="OPENAI_API_KEY")
    graph = build_definitions([JudgeConfig(name="heuristic"), gpt]).resolve_asset_graph()
    assert graph.get(dg.AssetKey(["judgments", "gpt"])).pools == {"judge_api"}
    alone = build_definitions([JudgeConfig(name="heuristic")]).resolve_asset_graph()
    assert not alone.get(dg.AssetKey(["judgments", "heuristic"])).pools


def test_judges_are_separate_assets_of_one_step_that_can_run_alone():
    judges = [JudgeConfig(name="a"), JudgeConfig(name="b", model="heuristic-v2")]
    graph = build_definitions(judges).resolve_asset_graph()
    key_a, key_b = dg.AssetKey(["judgments", "a"]), dg.AssetKey(["judgments", "b"])
    node = graph.get(key_a).assets_def
    assert node is graph.get(key_b).assets_def and node.can_subset
    assert graph.get(key_a).code_version != graph.get(key_b).code_version
    assert {c.asset_key for c in node.check_keys} == {key_a, key_b}


def test_the_ui_location_reads_the_judges_file_and_store_from_the_environment(
        tmp_path, monkeypatch):
    judges = tmp_path / "judges.yaml"
    judges.write_text("judges:\n  - name: rules\n    provider: heuristic\n"
                      "  - name: gpt\n    provider: openai\n    model: gpt-4.1-mini\n"
                      "    api_key_env: SOME_KEY_NAME\n", "utf-8")
    monkeypatch.setenv("EVAL_PIPELINE_JUDGES", str(judges))
    monkeypatch.setenv("EVAL_PIPELINE_STORE", str(tmp_path / "elsewhere"))
    loaded = defs()
    keys = {k.to_user_string() for k in loaded.resolve_asset_graph().get_all_asset_keys()}
    assert {"judgments/rules", "judgments/gpt"} <= keys and "judgments/heuristic" not in keys
    manager = loaded.resources["io_manager"].create_io_manager(
        dg.build_init_resource_context())
    assert str(manager._base_path) == str(tmp_path / "elsewhere" / "assets")
    assert loaded.resources["pipeline"].batches_path == tmp_path / "elsewhere" / "batches"
    assert loaded.resources["pipeline"].incoming_path == tmp_path / "elsewhere" / "incoming"
    # The key is an EnvVar reference, not a value: loading needs no key at all.
    assert "SOME_KEY_NAME" in repr(loaded.resources["judge_gpt"].api_key)


@pytest.mark.slow
def test_dg_loads_the_defs_folder_with_what_dg_scaffold_adds(project_root, tmp_path):
    """A copy of the project: `dg scaffold defs` puts an asset in eval_pipeline/defs/ and
    `dg list defs` shows it beside the whole pipeline."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "workspace.yaml"):
        shutil.copy(project_root / name, project / name)
    shutil.copytree(project_root / "eval_pipeline", project / "eval_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    dg_cli = str(Path(sys.executable).parent / "dg")
    env = {**os.environ, "PYTHONPATH": str(project), "VIRTUAL_ENV": sys.prefix,
           "NO_COLOR": "1"}
    scaffold = subprocess.run([dg_cli, "scaffold", "defs", "dagster.asset", "probe.py"],
                              cwd=project, env=env, capture_output=True, text=True)
    assert scaffold.returncode == 0, scaffold.stderr
    assert (project / "eval_pipeline" / "defs" / "probe.py").is_file()
    listed = subprocess.run([dg_cli, "list", "defs", "--json"], cwd=project, env=env,
                            capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    keys = {a["asset_key"] for a in json.loads(listed.stdout)["assets"]}
    assert keys == EXPECTED | {"probe"}
