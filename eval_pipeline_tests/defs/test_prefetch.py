"""#12.4: a run's latest materializations fetched in two queries per asset equal the answers
of one query per batch, and only inside the block that uses them."""

import dagster as dg

from eval_pipeline.defs.pipeline.assets.changes import latest_materialization, prefetch, using

parts = dg.StaticPartitionsDefinition(["a", "b", "c"])


@dg.asset(partitions_def=parts)
def counted(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    runs = context.instance.get_runs_count()
    return dg.MaterializeResult(metadata={"runs_before": runs})


def test_prefetch_equals_one_query_per_batch(instance: dg.DagsterInstance) -> None:
    for key in ("a", "b", "a"):
        assert dg.materialize([counted], instance=instance, partition_key=key).success
    key = dg.AssetKey("counted")
    per_batch = {p: latest_materialization(instance, key, p) for p in ("a", "b", "c")}
    found = prefetch(instance, [key], ["a", "b", "c"])
    assert {p: found[(key, p)] for p in ("a", "b", "c")} == per_batch
    assert per_batch["c"] is None and per_batch["a"] is not None
    assert per_batch["a"].metadata["runs_before"].value == 3  # the later "a" (run 3 of 3)
    with using({(key, "a"): None}):
        assert latest_materialization(instance, key, "a") is None
    assert latest_materialization(instance, key, "a") == per_batch["a"]
