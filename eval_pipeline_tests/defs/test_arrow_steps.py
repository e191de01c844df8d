"""#12.1's contract through the IO manager: the stages hand each other ``steps`` as Arrow
(``STEPS_DTYPE``), written to Parquet and read back without converting them, and a store
the previous code wrote (steps as Python lists, their Arrow type inferred per batch) is read
and re-evaluated to the same results."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from upath import UPath

from eval_pipeline import ingest
from eval_pipeline.defs.pipeline import io_manager as io_module
from eval_pipeline.defs.pipeline.assets import ingest as ingest_assets
from eval_pipeline.defs.pipeline.assets import routing as routing_assets
from eval_pipeline.defs.pipeline.batch_files import locate_batches
from eval_pipeline.defs.pipeline.io_manager import read_parquet, to_arrow, write_table
from eval_pipeline.defs.pipeline.table_cache import (
    TableCache,
    file_stamp,
    frame_from_arrow,
    is_plain,
)
from eval_pipeline.models import STEPS_ARROW_TYPE, Step, steps_to_rows
from eval_pipeline.steps_column import STEPS_DTYPE, with_arrow_steps
from eval_pipeline_tests.dagster_helpers import PER_BATCH, stage_drop

ROWS = [
    steps_to_rows([Step(kind="thought", content="plan", start=0, end=4),
                   Step(kind="tool_call", content="<s>q</s>", start=4, end=12, tool_name="s",
                        tool_type="s", tool_input="q", turn=0)]),
    [],
    steps_to_rows([Step(kind="answer", content="done", start=0, end=4, label=1.0)]),
]
INGEST = ("raw_trajectories", "quarantine", "preprocessed_trajectories", "preprocess_report")
TIMED = ["latency_s"]  # the judge's own timing differs from run to run


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"trajectory_id": ["a", "b", "c"], "steps": ROWS, "n": [1, 2, 3]})


def _previous_code_table(frame: pd.DataFrame) -> pa.Table:
    """What the code before #12.1 wrote: steps as Python lists, their type inferred (a
    field None in every step of the table becomes ``null``)."""
    if "steps" in frame.columns:
        frame = frame.assign(steps=pd.Series([[dict(s) for s in v] for v in frame["steps"]],
                                             dtype=object, index=frame.index))
    return pa.Table.from_pandas(frame, preserve_index=False)


def _buffers(column: pa.ChunkedArray) -> list[int]:
    return [b.address for chunk in column.chunks for b in chunk.buffers() if b is not None]


def test_arrow_steps_are_written_as_they_are_and_read_back_as_arrow(tmp_path: Path) -> None:
    frame = with_arrow_steps(_frame())
    table = to_arrow(frame)
    assert table.schema.field("steps").type == STEPS_ARROW_TYPE
    # the column's own buffers: no copy, no conversion through Python
    assert _buffers(table.column("steps")) == _buffers(frame["steps"].array.__arrow_array__())
    path = tmp_path / "t.parquet"
    write_table(table, UPath(path))
    for read in (read_parquet(UPath(path)), read_parquet(UPath(path), ["steps", "n", "gone"]),
                 frame_from_arrow(pq.read_table(path))):
        assert read["steps"].dtype == STEPS_DTYPE and read["steps"].tolist() == ROWS
    assert list(read_parquet(UPath(path)).columns) == ["trajectory_id", "steps", "n"]
    # any other reader reads the file as it read the previous code's
    before = tmp_path / "before.parquet"
    pq.write_table(_previous_code_table(_frame()), before)
    theirs, ours = pd.read_parquet(path), pd.read_parquet(before)
    assert [[dict(s) for s in v] for v in theirs["steps"]] == ROWS
    assert theirs.dtypes.to_dict() == ours.dtypes.to_dict()


def test_a_table_the_previous_code_wrote_is_read_as_arrow_steps(tmp_path: Path) -> None:
    """Inferred types (``null`` fields, ``string`` not ``large_string``) are cast; a table
    with only steps, or none at all, keeps its rows."""
    table = _previous_code_table(_frame())
    steps_type = table.schema.field("steps").type
    assert steps_type != STEPS_ARROW_TYPE
    assert pa.types.is_null(steps_type.value_type.field("tool_call_id").type)
    path = tmp_path / "old.parquet"
    pq.write_table(table, path)
    read = read_parquet(UPath(path))
    assert read["steps"].dtype == STEPS_DTYPE and read["steps"].tolist() == ROWS
    expected = pd.read_parquet(path)
    pd.testing.assert_frame_equal(read.drop(columns="steps"), expected.drop(columns="steps"))
    only = frame_from_arrow(table.select(["steps"]))
    assert len(only) == 3 and only["steps"].tolist() == ROWS
    empty = frame_from_arrow(_previous_code_table(_frame().iloc[:0]))
    assert empty["steps"].dtype == STEPS_DTYPE and len(empty) == 0


def test_a_file_recording_the_arrow_dtype_in_pandas_metadata_is_read(tmp_path: Path) -> None:
    """``DataFrame.to_parquet`` of Arrow steps (another writer) records a dtype pandas
    cannot read back; the IO manager's reads leave that column's metadata aside."""
    path = tmp_path / "to_parquet.parquet"
    with_arrow_steps(_frame()).to_parquet(path, index=False)
    with pytest.raises(TypeError):
        pd.read_parquet(path)
    read = read_parquet(UPath(path))
    assert read["steps"].dtype == STEPS_DTYPE and read["steps"].tolist() == ROWS


def test_a_nested_column_that_is_not_steps_is_converted_as_pandas_does(tmp_path: Path) -> None:
    """A cast would drop the fields a step does not have: such a column is left alone."""
    frame = pd.DataFrame({"steps": [[{"kind": "tool", "args": ["a"]}]], "n": [1]})
    table = to_arrow(frame)
    read = frame_from_arrow(table)
    assert read["steps"].dtype == object
    assert read["steps"].iloc[0][0]["args"].tolist() == ["a"]


def test_the_cache_shares_a_frame_of_arrow_steps_safely(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from eval_pipeline.defs.pipeline import table_cache as cache_module

    conversions: list[int] = []
    original = cache_module.frame_from_arrow
    monkeypatch.setattr(cache_module, "frame_from_arrow",
                        lambda table: conversions.append(1) or original(table))
    frame = with_arrow_steps(_frame())
    assert is_plain(frame) and not is_plain(_frame())
    path = tmp_path / "t.parquet"
    table = to_arrow(frame)
    stamp = write_table(table, UPath(path))
    assert stamp is not None
    cache = TableCache()
    cache.put(str(path), stamp, table, frame)
    served = cache.get(str(path), file_stamp(str(path)))
    assert served is not None and served["steps"].dtype == STEPS_DTYPE
    served["steps"].iloc[0][0]["kind"] = "changed"  # a conversion: the consumer's own
    served["steps"] = with_arrow_steps(pd.DataFrame({"steps": [ROWS[2]] * 3}))["steps"]
    served["n"] = 0
    frame.loc[0, "n"] = 9  # the writer changing its frame afterwards
    again = cache.get(str(path), file_stamp(str(path)), ["steps", "trajectory_id"])
    assert again is not None and again["steps"].tolist() == ROWS
    pd.testing.assert_frame_equal(cache.get(str(path), file_stamp(str(path))),
                                  read_parquet(UPath(path)))
    assert conversions == []  # served from the kept frame, never converted again


def _recorders(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """The steps dtype every consumer of a run is handed, by consumer (the judges' inputs
    are read without the steps: ``ingest.clip_tasks`` is tested on its own)."""
    seen: dict[str, list[Any]] = defaultdict(list)

    def wrap(owner: Any, name: str, frame_at: Callable[..., pd.DataFrame]) -> None:
        original = getattr(owner, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            seen[name].append(frame_at(*args, **kwargs)["steps"].dtype)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, recorded)

    wrap(ingest, "preprocess_batch", lambda raw, *_a, **_k: raw)
    wrap(ingest, "clips_table", lambda kept, *_a, **_k: kept)
    wrap(ingest_assets, "with_span_ids", lambda _clips, kept, *_a, **_k: kept)
    wrap(routing_assets, "routing_table", lambda kept, *_a, **_k: kept)
    return seen


def _tables(assets: Path) -> dict[str, pd.DataFrame]:
    return {str(p.relative_to(assets)): pd.read_parquet(p).drop(columns=TIMED, errors="ignore")
            for p in sorted(assets.rglob("*.parquet")) if "_index" not in p.parts}


@pytest.mark.parametrize("cache_mb", [0, 256])
def test_a_run_hands_arrow_steps_from_raw_to_every_consumer_and_an_old_store_is_re_evaluated(
        project_root: Path, tmp_path: Path, instance: dg.DagsterInstance,
        monkeypatch: pytest.MonkeyPatch, cache_mb: int) -> None:
    """One materialize() of the per-batch graph: raw and preprocessed tables are stored with
    the fixed steps type and every consumer is handed Arrow steps, from the table cache or
    from the file. Then the store's raw and preprocessed tables are rewritten as the
    previous code wrote them, and everything downstream re-materialized from them: the
    same tables, the consumers again handed Arrow steps."""
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    keys, defs = stage_drop(drop, tmp_path, instance, split_size=100)
    (batch,) = keys
    resources = dict(defs.resources)
    resources["io_manager"] = io_module.ParquetIOManager(base_path=str(tmp_path / "assets"),
                                                         cache_mb=cache_mb)
    seen = _recorders(monkeypatch)
    assert dg.materialize(list(defs.assets), selection=PER_BATCH, partition_key=batch,
                          instance=instance, resources=resources).success
    assert set(seen) == {"preprocess_batch", "clips_table", "with_span_ids", "routing_table"}
    assert all(dtype == STEPS_DTYPE for dtypes in seen.values() for dtype in dtypes), seen
    assets = tmp_path / "assets"
    raw_file = assets / "raw_trajectories" / f"{batch}.parquet"
    kept_file = assets / "preprocessed_trajectories" / f"{batch}.parquet"
    for path in (raw_file, kept_file):
        assert pq.read_schema(path).field("steps").type == STEPS_ARROW_TYPE
    # the values are the parser's: the same step rows as Python lists
    path, manifest = locate_batches(tmp_path / "batches", [batch])[batch]
    parsed, _ = ingest.read_batch(path, manifest, batch)
    assert read_parquet(UPath(raw_file))["steps"].tolist() == [
        [dict(s) for s in v] for v in parsed["steps"]]
    first = _tables(assets)

    for path in (raw_file, kept_file):  # the store as the previous code left it
        old = _previous_code_table(pd.read_parquet(path))
        assert old.schema.field("steps").type != STEPS_ARROW_TYPE
        pq.write_table(old, path)
    seen.clear()
    downstream = PER_BATCH - dg.AssetSelection.assets(*INGEST)
    assert dg.materialize(list(defs.assets), selection=downstream, partition_key=batch,
                          instance=instance, resources=resources).success
    assert "preprocess_batch" not in seen and seen["clips_table"]
    assert all(dtype == STEPS_DTYPE for dtypes in seen.values() for dtype in dtypes), seen
    again = _tables(assets)
    assert sorted(again) == sorted(first)
    for name in first:
        if name.split("/")[0] in INGEST:
            continue
        pd.testing.assert_frame_equal(again[name], first[name], check_exact=True, obj=name)
