"""#12.4(b): fewer instance round trips per batch, the same metadata and lineage in the UI.

Per-batch metadata goes straight into the step's metadata (``add_batch_metadata``) instead
of through ``add_asset_metadata(partition_key=)``, which queried the instance three times per
call. These tests run one multi-batch run each way and compare what the UI reads.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from eval_pipeline.defs.pipeline.assets import metadata as metadata_module
from eval_pipeline.defs.pipeline.partitions import range_tags
from eval_pipeline_tests.dagster_helpers import stage_drop


def _materializations(project_root: Path, root: Path) -> dict:
    """Every materialization of one run over three batches: (asset, batch) -> metadata and
    the lineage tags the UI shows (code and data versions, input data versions)."""
    (root / "home").mkdir(parents=True)
    with dg.instance_for_test(temp_dir=str(root / "home")) as instance:
        drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
        keys, defs = stage_drop(drop, root, instance, split_size=10)
        result = defs.resolve_job_def("evaluate_batch").execute_in_process(
            instance=instance, tags=range_tags(keys))
        assert result.success and len(keys) == 3
        found = {}
        for event in result.get_asset_materialization_events():
            mat = event.materialization
            metadata = {k: (v.value.replace(str(root), "ROOT") if isinstance(v.value, str)
                            else v.value) for k, v in mat.metadata.items()}
            tags = {k: v for k, v in (mat.tags or {}).items()
                    if k.startswith(("dagster/code_version", "dagster/input_data_version"))}
            found[(event.asset_key.to_user_string(), mat.partition)] = (metadata, tags)
        checks = sorted(((c.asset_key.to_user_string(), c.check_name, c.passed,
                          dict(c.metadata)) for c in result.get_asset_check_evaluations()),
                        key=repr)
    return {"materializations": found, "checks": checks}


@pytest.mark.slow
def test_batch_metadata_is_what_dagsters_own_call_records(project_root, tmp_path,
                                                          monkeypatch):
    ours = _materializations(project_root, tmp_path / "ours")
    # Without the step's accumulator, add_batch_metadata takes Dagster's public call.
    monkeypatch.setattr(metadata_module, "_ACCUMULATOR", "_no_such_attribute")
    public = _materializations(project_root, tmp_path / "public")
    assert len(ours["materializations"]) == 11 * 3  # eleven per-batch assets, three batches
    assert ours == public
    meta, _tags = ours["materializations"][("trajectory_summaries", "sample_agent_runs02")]
    assert meta["path"].endswith("sample_agent_runs02.parquet") and "preview" in meta


def test_metadata_for_a_batch_outside_the_run_is_refused():
    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["x", "y"]))
    def a() -> None: ...

    class Step:
        assets_def = a

    with pytest.raises(dg.DagsterInvariantViolationError, match="does not target"):
        metadata_module.add_batch_metadata(Step(), {}, None, "y", ["x"])  # type: ignore[arg-type]
    with pytest.raises(dg.DagsterInvariantViolationError, match="does not materialize"):
        metadata_module.add_batch_metadata(Step(), {}, "b", "x", ["x"])  # type: ignore[arg-type]


def test_many_batches_metadata_in_one_update_is_what_one_call_per_batch_records():
    """add_batches_metadata merges every batch's entries at once (Dagster's call rebuilt the
    whole map per batch, quadratic in a run's batches); the map is the same, later values
    for a key winning as with Dagster's merge."""
    from dagster._core.execution.context.metadata_logging import OutputMetadataAccumulator

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["x", "y", "z"]))
    def a() -> None: ...

    class Step:
        assets_def = a
        _metadata_accumulator = OutputMetadataAccumulator.empty()

    first = {"x": {"n": 1, "m": "a"}, "y": {"n": 2}}
    second = {"x": {"n": 3}, "z": {"k": True}}
    step = Step()
    metadata_module.add_batches_metadata(step, first, None, ["x", "y", "z"])  # type: ignore[arg-type]
    metadata_module.add_batches_metadata(step, second, None, ["x", "y", "z"])  # type: ignore[arg-type]
    expected = OutputMetadataAccumulator.empty()
    for batches in (first, second):
        for batch, values in batches.items():
            expected = expected.with_additional_asset_metadata(dg.AssetKey("a"), batch, values)
    assert step._metadata_accumulator == expected
    assert step._metadata_accumulator.get_asset_metadata(dg.AssetKey("a"), "x") == {
        "n": 3, "m": "a"}
