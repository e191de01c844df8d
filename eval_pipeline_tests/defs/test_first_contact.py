"""First contact: a fresh `dg dev` has partitions without a toggle, the asset pages say how
partitions come to be, and a re-dropped identical file reruns nothing."""

import os
import shutil

import dagster as dg
import pytest

from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION, batches_partitions_def
from eval_pipeline_tests.dagster_helpers import PER_BATCH, build_definitions_for
from eval_pipeline_tests.defs.test_automation import _sensor


def test_the_drop_sensor_ships_running_and_partitioned_assets_say_how_batches_are_made(
        tmp_path):
    defs = build_definitions_for(tmp_path)
    sensor = defs.resolve_sensor_def("new_drop_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    graph = defs.resolve_asset_graph()
    partitioned = [k for k in graph.get_all_asset_keys()
                   if graph.get(k).partitions_def == batches_partitions_def]
    assert len(partitioned) >= 9
    for key in partitioned:
        description = graph.get(key).description or ""
        assert "new_drop_sensor" in description and "incoming" in description, key
        assert description.split("\n\n")[0].strip()  # its own description stays first
    # the notes did not cost the assets their checks or code versions
    assert graph.get(dg.AssetKey("averaged_scores")).code_version
    assert {k.name for k in graph.asset_check_keys
            if k.asset_key == dg.AssetKey("averaged_scores")} >= {"judges_agree",
                                                                   "scores_in_unit_interval"}


@pytest.mark.slow
def test_an_identical_redrop_reruns_nothing_and_a_changed_one_reruns_its_batches(
        project_root, tmp_path, instance):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    drop = incoming / "sample_malformed.jsonl"
    shutil.copy(project_root / "data" / "incoming" / "sample_malformed.jsonl", drop)
    defs = build_definitions_for(tmp_path)
    first = _sensor(defs, instance)
    (add,) = first.dynamic_partitions_requests
    keys = list(add.partition_keys)
    instance.add_dynamic_partitions(BATCHES_PARTITION, keys)  # what the daemon does
    assert len(first.run_requests) == 1
    for key in keys:
        assert dg.materialize(list(defs.assets), selection=PER_BATCH, partition_key=key,
                              instance=instance, resources=dict(defs.resources)).success

    # The same bytes dropped again (a new mtime): re-split, remembered, nothing run.
    stat = drop.stat()
    os.utime(drop, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    again = _sensor(defs, instance, cursor=first.cursor)
    assert isinstance(again, dg.SensorResult) and not again.run_requests
    assert again.cursor != first.cursor
    assert isinstance(_sensor(defs, instance, cursor=again.cursor), dg.SkipReason)

    # Changed bytes: the batch runs again.
    drop.write_bytes(drop.read_bytes().replace(b"a", b"b", 1))
    changed = _sensor(defs, instance, cursor=again.cursor)
    assert isinstance(changed, dg.SensorResult) and len(changed.run_requests) == 1
