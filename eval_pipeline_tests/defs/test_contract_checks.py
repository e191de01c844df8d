"""Asset checks on the contracts, per run over the batches it materializes, on a real
instance: they pass on the pipeline's own output and fail (or warn) on a broken input."""

import json

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline import contracts
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline_tests.dagster_helpers import PER_BATCH, build_definitions_for, stage_drop


def test_contract_rules():
    table = pd.DataFrame({"status": ["ok", "failed", "skipped", "ok"],
                          "scores": ['{"a": 0.5}', "{}", "{}", '{"a": 1.2, "b": 0.1}'],
                          "spread": [0.1, None, None, 0.6]})
    assert contracts.scores_outside_unit_interval(table) == 1
    assert contracts.failure_rate_over(table, 0.5) is None
    assert contracts.failure_rate_over(table, 0.2) == round(1 / 3, 4)
    assert contracts.disagreements(table, 0.5) == 1
    assert contracts.missing_columns(table, ["status", "label"]) == ["label"]
    assert not contracts.unaccounted(10, 6, 2, 2) and contracts.unaccounted(10, 6, 2, 1)


def _checks(result):
    return {(c.asset_key.to_user_string(), c.check_name): c
            for c in result.get_asset_check_evaluations()}


@pytest.mark.slow
def test_checks_pass_on_the_pipeline_output_and_catch_a_broken_judgment(
        project_root, tmp_path, instance):
    drop = project_root / "data" / "incoming" / "sample_malformed.jsonl"
    (key,), _ = stage_drop(drop, tmp_path, instance)
    judges = [JudgeConfig(name="a"), JudgeConfig(name="b")]
    defs = build_definitions_for(tmp_path, judges, max_judge_spread=0.3)
    result = dg.materialize(list(defs.assets), selection=PER_BATCH, partition_key=key,
                            instance=instance, resources=dict(defs.resources))
    assert result.success
    checks = _checks(result)
    expected = {("preprocessed_trajectories", "every_record_accounted_end_to_end"),
                ("averaged_scores", "scores_in_unit_interval"),
                ("averaged_scores", "averaged_schema"), ("averaged_scores", "judges_agree"),
                *((f"judgments/{j}", n) for j in "ab"
                  for n in ("judgments_schema", "judge_failure_rate",
                            "scores_in_unit_interval"))}
    assert expected <= set(checks)
    assert all(c.passed for c in checks.values())
    assert checks[("averaged_scores", "judges_agree")].severity == dg.AssetCheckSeverity.WARN

    # Judge b now disagrees by 0.5 on every metric, and gives one impossible score.
    path = tmp_path / "assets" / "judgments" / "b" / f"{key}.parquet"
    table = pd.read_parquet(path)
    ok = table.index[table["status"] == "ok"]
    table.loc[ok, "scores"] = [json.dumps({m: (v + 0.5 if v < 0.5 else v - 0.5)
                                           for m, v in json.loads(s).items()})
                               for s in table.loc[ok, "scores"]]
    first = json.loads(table.loc[ok[0], "scores"])
    table.loc[ok[0], "scores"] = json.dumps({m: 1.7 for m in first})
    table.to_parquet(path, index=False)
    again = dg.materialize(list(defs.assets), selection=["averaged_scores"], partition_key=key,
                           instance=instance, resources=dict(defs.resources))
    assert again.success  # a warning and a failed (non-blocking) check keep the asset
    checks = _checks(again)
    agree = checks[("averaged_scores", "judges_agree")]
    assert not agree.passed and agree.severity == dg.AssetCheckSeverity.WARN
    assert agree.metadata["failed_batches"].value[key] == len(ok)
    bounds = checks[("averaged_scores", "scores_in_unit_interval")]
    assert not bounds.passed and bounds.metadata["failed_batches"].value == {key: 1}
    assert checks[("averaged_scores", "averaged_schema")].passed
