"""#12.4: events are stored as the same text Dagster's serializer gives, each table schema
packed once per process (``event_serdes.serialize_event``)."""

import dagster as dg
import pandas as pd
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._serdes import deserialize_value, serialize_value

from eval_pipeline.defs.pipeline import event_serdes
from eval_pipeline.defs.pipeline.event_log import FastSqliteEventLogStorage
from eval_pipeline.defs.pipeline.event_serdes import serialize_event
from eval_pipeline.defs.pipeline.io_manager import column_schema


def _event(metadata: dict[str, object], partition: str = "b1") -> EventLogEntry:
    materialization = dg.AssetMaterialization(asset_key="clips", partition=partition,
                                              metadata=metadata)
    dagster_event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value, job_name="job",
        event_specific_data=StepMaterializationData(materialization), step_key="clips")
    return EventLogEntry(error_info=None, level=20, user_message="", run_id="r1",
                         timestamp=1.0, step_key="clips", job_name="job",
                         dagster_event=dagster_event)


def _schema(frame: pd.DataFrame) -> dg.TableSchema:
    return column_schema(tuple((str(c), str(t)) for c, t in frame.dtypes.items()))


FRAME = pd.DataFrame({"trajectory_id": ["t1"], "clip_index": [0], "score": [0.5],
                      "ok": [True], "text": [None]})


def test_same_text_as_dagster_each_time() -> None:
    schema = _schema(FRAME)
    other = _schema(FRAME.drop(columns=["score"]))
    assert other is not schema
    rich = dg.TableSchema(columns=[
        dg.TableColumn("a", "int64", description="the a", tags={"k": "v"},
                       constraints=dg.TableColumnConstraints(nullable=False, unique=True,
                                                             other=["> 0"]))],
        constraints=dg.TableConstraints(other=["a unique"]))
    events = [_event({"dagster/column_schema": schema, "preview": dg.MetadataValue.md("|x|"),
                      "n": 3, "json": {"ü": [1, None, "\u0000"]}}, p) for p in ("b1", "b2")]
    events += [_event({"dagster/column_schema": other, "again": dg.MetadataValue.table_schema(
        other)}), _event({"dagster/column_schema": rich}), _event({"n": 1})]
    for _round in range(2):  # packed the first time, from memory the second
        for event in events:
            text = serialize_event(event)
            assert text == serialize_value(event)
            assert deserialize_value(text, EventLogEntry) == event


def test_a_schema_object_changed_columns_is_a_new_schema() -> None:
    """The packed text belongs to one schema object; another set of columns or dtypes is
    another object (io_manager.column_schema), packed on its own."""
    first = _schema(FRAME)
    retyped = _schema(FRAME.astype({"clip_index": "float64"}))
    renamed = _schema(FRAME.rename(columns={"score": "mean_score"}))
    assert _schema(FRAME.copy()) is first
    for schema in (first, retyped, renamed, first):
        event = _event({"dagster/column_schema": schema})
        assert serialize_event(event) == serialize_value(event)
    assert '"float64"' in serialize_event(_event({"dagster/column_schema": retyped}))
    assert '"mean_score"' in serialize_event(_event({"dagster/column_schema": renamed}))


def test_a_value_holding_a_placeholder_is_left_alone() -> None:
    """A metadata value that happens to hold a placeholder's text is stored as given: the
    event is then serialized the slow way."""
    schema = _schema(FRAME)
    serialize_event(_event({"dagster/column_schema": schema}))  # packed: placeholders exist
    packer = event_serdes._MAP.object_serializers["TableSchema"]
    token = next(iter(packer._texts))
    event = _event({"dagster/column_schema": schema, "note": token})
    assert serialize_event(event) == serialize_value(event)
    assert deserialize_value(serialize_event(event), EventLogEntry).dagster_event \
        .event_specific_data.materialization.metadata["note"].value == token


def test_storage_rows_equal_dagsters(tmp_path) -> None:
    fast = FastSqliteEventLogStorage(str(tmp_path / "fast"))
    plain = SqliteEventLogStorage(str(tmp_path / "plain"))
    try:
        event = _event({"dagster/column_schema": _schema(FRAME), "rows": 1})
        for _round in range(2):
            assert fast._event_to_row(event) == plain._event_to_row(event)
    finally:
        fast.dispose()
        plain.dispose()


def test_a_run_stores_schemas_dagster_reads_back(tmp_path, monkeypatch) -> None:
    """Through the CLI's instance (FastSqliteEventLogStorage), a run's materializations
    keep their schemas, the same object packed once and read back per batch."""
    from eval_pipeline.local_run import ensure_dagster_home

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    ensure_dagster_home()
    parts = dg.StaticPartitionsDefinition(["a", "b"])

    @dg.asset(partitions_def=parts)
    def table(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"dagster/column_schema": _schema(FRAME)})

    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        assert isinstance(getattr(storage, "_storage", storage), FastSqliteEventLogStorage)
        for key in ("a", "b", "a"):
            assert dg.materialize([table], instance=instance, partition_key=key).success
        records = instance.fetch_materializations(dg.AssetKey("table"), limit=10).records
    assert len(records) == 3
    for record in records:
        schema = record.asset_materialization.metadata["dagster/column_schema"].value
        assert [(c.name, c.type) for c in schema.columns] == [
            (str(c), str(t)) for c, t in FRAME.dtypes.items()]
