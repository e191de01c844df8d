"""#12.4: each batch's materialization metadata (row count, column schema) is what the
frame holds; the schema looked up by the frame's columns and dtypes changes with them."""

import numpy as np
import pandas as pd

from eval_pipeline.defs.pipeline.io_manager import column_schema, frame_schema
from eval_pipeline.steps_column import STEPS_DTYPE


def _named(frame: pd.DataFrame) -> list[tuple[str, str]]:
    return [(str(c), str(t)) for c, t in frame.dtypes.items()]


def _columns(schema) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in schema.columns]


def test_schema_follows_columns_and_dtypes() -> None:
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", None], "c": [0.5, np.nan],
                          "d": pd.Series([None, {"k": 1}], dtype=object),
                          "e": pd.array([True, None], dtype="boolean")})
    frame["steps"] = pd.Series([[], []], dtype=STEPS_DTYPE)
    first = frame_schema(frame)
    assert _columns(first) == _named(frame)
    assert frame_schema(frame.copy()) is first  # the same columns and dtypes: cached
    variants = [
        frame.astype({"a": "float64"}),  # a dtype changed
        frame.astype({"a": "int32"}),
        frame.rename(columns={"b": "bb"}),  # a name changed
        frame[["b", "a", "c", "d", "e", "steps"]],  # the order changed
        frame.drop(columns=["c"]),  # a column gone
        frame.assign(z=1),  # a column more
        frame.astype({"b": object}),
        frame.assign(e=[True, False]),  # boolean -> bool
    ]
    seen = {id(first)}
    for variant in variants:
        schema = frame_schema(variant)
        assert _columns(schema) == _named(variant)
        assert schema == column_schema(tuple(_named(variant)))
        seen.add(id(schema))
    assert len(seen) == len(variants) + 1


def test_a_frame_with_unusual_columns_gets_its_schema() -> None:
    frame = pd.DataFrame({1: [1], "x": pd.Categorical(["u"]),
                          "t": pd.to_datetime(["2026-01-01"]).tz_localize("UTC")})
    assert _columns(frame_schema(frame)) == _named(frame)
    frame.columns = ["a", "a", "t"]  # duplicated names
    assert _columns(frame_schema(frame)) == _named(frame)


def test_each_batch_of_a_run_carries_its_own_metadata(tmp_path, monkeypatch) -> None:
    """A run over three batches through the CLI's instance: each batch's materialization
    has its path, row count and column schema (one batch's columns differ)."""
    import dagster as dg

    from eval_pipeline.defs.pipeline.io_manager import ParquetIOManager
    from eval_pipeline.local_run import ensure_dagster_home

    frames = {"a": pd.DataFrame({"x": [1, 2, 3], "y": ["u", "v", "w"]}),
              "b": pd.DataFrame({"x": [4], "y": ["z"]}),
              "c": pd.DataFrame({"x": [0.5, 1.5], "y": ["p", None]})}

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["a", "b", "c"]),
              backfill_policy=dg.BackfillPolicy.single_run())
    def table(context) -> dict[str, pd.DataFrame]:
        return {k: frames[k] for k in context.partition_keys}

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    ensure_dagster_home()
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize(
            [table], instance=instance,
            resources={"io_manager": ParquetIOManager(base_path=str(tmp_path / "assets"))},
            tags={"dagster/asset_partition_range_start": "a",
                  "dagster/asset_partition_range_end": "c"})
        assert result.success
        records = instance.fetch_materializations(dg.AssetKey("table"), limit=10).records
    by_batch = {r.partition_key: r.asset_materialization.metadata for r in records}
    assert set(by_batch) == {"a", "b", "c"}
    for batch, frame in frames.items():
        metadata = by_batch[batch]
        assert metadata["dagster/row_count"].value == len(frame)
        assert _columns(metadata["dagster/column_schema"].value) == _named(frame)
        assert metadata["path"].value == str(tmp_path / "assets" / "table" / f"{batch}.parquet")
        pd.testing.assert_frame_equal(pd.read_parquet(metadata["path"].value), frame)
