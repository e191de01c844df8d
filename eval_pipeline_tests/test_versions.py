import dagster as dg

from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.versions import source_version


def test_version_follows_the_source_it_names(tmp_path, monkeypatch):
    module = tmp_path / "fake_mod.py"
    module.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = source_version("fake_mod")
    module.write_text("X = 2\n")
    assert source_version("fake_mod") != first
    module.write_text("X = 1\n")
    assert source_version("fake_mod") == first, "the same source must give the same version"
    assert source_version("eval_pipeline.clips") != source_version("eval_pipeline.preprocess")


def test_every_asset_has_a_code_version_and_tables_differ_by_what_shapes_them():
    graph = build_definitions([JudgeConfig(name="heuristic")]).resolve_asset_graph()
    versions = {k.to_user_string(): graph.get(k).code_version
                for k in graph.get_all_asset_keys()}
    assert all(versions.values())
    assert versions["raw_trajectories"] == versions["quarantine"]
    assert versions["raw_trajectories"] != versions["clips"]
    assert versions["judgments/heuristic"] not in {versions["clips"], versions["averaged_scores"]}
    assert dg.AssetKey("evaluation_report") in graph.get_all_asset_keys()


def test_judge_version_follows_what_shapes_its_answers_not_its_limits():
    from eval_pipeline.defs.pipeline.assets.judging import judge_code_version

    base = JudgeConfig(name="j", provider="openai_compatible", base_url="http://h/v1")
    version = judge_code_version(base)
    for change in ({"output_mode": "json_object"}, {"context_budget_chars": 500},
                   {"score_steps": 5}, {"max_tokens": 10},
                   {"text_max_chars": 50}):
        assert judge_code_version(base.model_copy(update=change)) != version, change
    for limit in ({"concurrency": 32}, {"requests_per_minute": 60.0}, {"timeout_s": 5.0}):
        assert judge_code_version(base.model_copy(update=limit)) == version, limit
