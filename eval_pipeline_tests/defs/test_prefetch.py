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


def test_prefetch_in_a_run_fetches_each_record_once(instance: dg.DagsterInstance,
                                                    monkeypatch) -> None:
    """Within one run, a record fetched once is not fetched (deserialized) again; a newer
    materialization is still found, and another run starts afresh."""
    for key in ("a", "b"):
        assert dg.materialize([counted], instance=instance, partition_key=key).success
    key = dg.AssetKey("counted")
    asked: list[list[int]] = []
    fetch = instance.fetch_materializations

    def counting(records_filter, limit, *args, **kwargs):
        asked.append(list(records_filter.storage_ids or []))
        return fetch(records_filter, limit, *args, **kwargs)

    monkeypatch.setattr(instance, "fetch_materializations", counting)
    plain = prefetch(instance, [key], ["a", "b", "c"])
    first = prefetch(instance, [key], ["a", "b", "c"], run_id="run-1")
    again = prefetch(instance, [key], ["a", "b", "c"], run_id="run-1")
    assert first == again == plain
    assert [len(ids) for ids in asked] == [2, 2]  # the third call fetched nothing
    monkeypatch.setattr(instance, "fetch_materializations", fetch)
    assert dg.materialize([counted], instance=instance, partition_key="a").success
    monkeypatch.setattr(instance, "fetch_materializations", counting)
    newer = prefetch(instance, [key], ["a", "b"], run_id="run-1")
    assert newer[(key, "a")].metadata["runs_before"].value == 3  # the new "a" (run 3)
    assert newer[(key, "b")] == plain[(key, "b")]
    assert len(asked[-1]) == 1  # only the new record
    prefetch(instance, [key], ["a", "b"], run_id="run-2")
    assert len(asked[-1]) == 2  # another run: nothing kept from run-1
