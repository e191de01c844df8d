"""#12.4: the IO manager serves a run's consumers the tables the run wrote, from memory,
exactly as reading the Parquet back would give them, and only while the file is that one."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from upath import UPath

from eval_pipeline.defs.pipeline import io_manager as io_module
from eval_pipeline.defs.pipeline.definitions import build_definitions
from eval_pipeline.defs.pipeline.io_manager import PARQUET_OPTIONS, to_arrow, write_table
from eval_pipeline.defs.pipeline.partitions import BATCHES_PARTITION, range_tags
from eval_pipeline.defs.pipeline.settings import PipelineSettings
from eval_pipeline.defs.pipeline.table_cache import (
    TABLE_CACHE,
    TableCache,
    file_stamp,
    is_plain,
)
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.models import Step, steps_to_rows
from eval_pipeline.splitting import split_drop
from eval_pipeline.steps_column import STEPS_DTYPE, as_steps_column, with_arrow_steps
from eval_pipeline_tests.stage_digests import digest_table


def _read(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """What the IO manager's reads give: ``pd.read_parquet``, but for the steps column,
    which comes back as Arrow (#12.1)."""
    return with_arrow_steps(pd.read_parquet(path, columns=columns))


def _same(served: pd.DataFrame, read: pd.DataFrame) -> None:
    """Values, dtypes, index and column index alike, and the Python types inside object
    columns too (a list is not the ndarray a read gives, though they compare equal)."""
    pd.testing.assert_frame_equal(served, read, check_dtype=True, check_index_type=True,
                                  check_column_type=True, check_exact=True)
    assert digest_table(served) == digest_table(read)
    for column in read.columns:
        if read[column].dtype == object:
            assert [type(v) for v in served[column]] == [type(v) for v in read[column]], column


def _run_graph(project_root: Path, root: Path, cache_mb: int, report: bool = True
               ) -> tuple[dict[str, Path], list]:
    """The sample drop's three batches through every per-batch asset (one run) and the
    report (another); every table file of the store by its path under the assets folder."""
    (root / "home").mkdir(parents=True)
    drop = project_root / "data" / "incoming" / "sample_agent_runs.jsonl"
    keys = [m.partition_key for m in split_drop(drop, root / "batches", 10)]
    defs = build_definitions(
        [JudgeConfig(name="heuristic")], assets_dir=str(root / "assets"),
        pipeline=PipelineSettings(incoming_dir=str(root / "incoming"),
                                  batches_dir=str(root / "batches")),
        table_cache_mb=cache_mb)
    with dg.instance_for_test(temp_dir=str(root / "home")) as instance:
        instance.add_dynamic_partitions(BATCHES_PARTITION, keys)
        result = defs.resolve_job_def("evaluate_batch").execute_in_process(
            instance=instance, tags=range_tags(keys))
        assert result.success and len(keys) == 3
        assert not report or defs.resolve_job_def("evaluation_report_job").execute_in_process(
            instance=instance).success
    files = {str(p.relative_to(root / "assets")): p
             for p in (root / "assets").rglob("*.parquet") if "_index" not in p.parts}
    return files, keys


def test_a_run_served_from_memory_writes_what_a_run_reading_files_writes(
        project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole graph with the cache and without it: every table bit for bit the same, and
    with it the run's consumers read no per-batch file back."""
    reads: list[str] = []
    original = io_module.read_parquet
    monkeypatch.setattr(io_module, "read_parquet",
                        lambda path, columns=None: reads.append(str(path)) or original(
                            path, columns))
    plain_files, _ = _run_graph(project_root, tmp_path / "files", cache_mb=0)
    per_batch_reads = len(reads)
    reads.clear()
    cached_files, _ = _run_graph(project_root, tmp_path / "cached", cache_mb=256)
    assert per_batch_reads > 30 and reads == []  # 13 inputs x 3 batches read back before
    assert sorted(plain_files) == sorted(cached_files)
    assert len(cached_files) == 11 * 3 + 1  # eleven per-batch assets, three batches, report
    timed = ["latency_s"]  # the judge's own timing differs from run to run
    for name, path in plain_files.items():
        _same(pd.read_parquet(cached_files[name]).drop(columns=timed, errors="ignore"),
              pd.read_parquet(path).drop(columns=timed, errors="ignore"))


def test_what_the_cache_serves_is_what_reading_the_file_gives(
        project_root: Path, tmp_path: Path) -> None:
    """Every table a run wrote, as the cache serves it (whole, and a few columns) against
    the file read back (steps as Arrow): plain tables from the kept frame, the others (mixed
    values) converted again from Arrow."""
    files, _ = _run_graph(project_root, tmp_path, cache_mb=256, report=False)
    assert len(files) == 11 * 3
    served_plain = served_arrow = 0
    for name, path in files.items():
        read = _read(path)
        served = TABLE_CACHE.get(str(path), file_stamp(str(path)))
        assert served is not None, name
        _same(served, read)
        columns = [*list(reversed(read.columns[:3])), "no_such_column"]
        _same(TABLE_CACHE.get(str(path), file_stamp(str(path)), columns),
              _read(path, columns=[c for c in columns if c in read.columns]))
        served_plain += is_plain(read)
        served_arrow += not is_plain(read)
    assert served_plain and served_arrow


STEP_ROWS = steps_to_rows([Step(kind="tool_call", content="<s>q</s>", start=0, end=8,
                                tool_name="s", tool_type="s", tool_input="q")])


def _table(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame({"score": np.linspace(0, 1, n), "label": [f"l{i}" for i in range(n)],
                         "ok": [True] * n})


def _nested(n: int = 2) -> pd.DataFrame:
    return pd.DataFrame({"calls": [[{"kind": "tool", "args": ["a"]}] for _ in range(n)],
                         "reward": [None, 1.0][:n]})


def _put(cache: TableCache, path: Path, frame: pd.DataFrame) -> None:
    table = to_arrow(frame)
    stamp = write_table(table, UPath(path))
    assert stamp is not None
    cache.put(str(path), stamp, table, frame)


def test_a_file_rewritten_behind_the_cache_is_read_from_disk(tmp_path: Path) -> None:
    cache = TableCache()
    path = tmp_path / "t.parquet"
    _put(cache, path, _table())
    assert cache.get(str(path), file_stamp(str(path))) is not None
    _table(5).to_parquet(path, index=False)  # another process rewrote it
    assert cache.get(str(path), file_stamp(str(path))) is None
    path.unlink()
    assert cache.get(str(path), file_stamp(str(path))) is None


def test_the_cache_stays_within_its_budget_and_a_new_run_empties_it(tmp_path: Path) -> None:
    size = to_arrow(_table(1000)).nbytes
    cache = TableCache(budget=int(size * 2.5))
    cache.begin_run("run1")
    paths = [tmp_path / f"{i}.parquet" for i in range(3)]
    for path in paths[:2]:
        _put(cache, path, _table(1000))
    assert cache.get(str(paths[0]), file_stamp(str(paths[0]))) is not None  # now most recent
    _put(cache, paths[2], _table(1000))
    assert cache.nbytes <= cache.budget and len(cache) == 2
    assert cache.get(str(paths[1]), file_stamp(str(paths[1]))) is None  # least recent went
    assert cache.get(str(paths[0]), file_stamp(str(paths[0]))) is not None
    cache.begin_run("run1")
    assert len(cache) == 2
    cache.begin_run("run2")
    assert len(cache) == 0 and cache.nbytes == 0


def test_a_consumer_changing_what_it_was_served_changes_nothing_for_the_next(
        tmp_path: Path) -> None:
    cache = TableCache()
    plain, nested = tmp_path / "plain.parquet", tmp_path / "nested.parquet"
    _put(cache, plain, _table())
    _put(cache, nested, _nested())
    first = cache.get(str(plain), file_stamp(str(plain)))
    assert first is not None
    first["score"] = 9.0
    first.loc[0, "label"] = "changed"
    first["new"] = 1
    again = cache.get(str(plain), file_stamp(str(plain)))
    _same(again, pd.read_parquet(plain))
    served = cache.get(str(nested), file_stamp(str(nested)))
    assert served is not None and isinstance(served["calls"].iloc[0], np.ndarray)
    served["calls"].iloc[0][0]["kind"] = "changed"  # the objects inside are its own
    _same(cache.get(str(nested), file_stamp(str(nested))), pd.read_parquet(nested))


def test_the_writer_settings_read_back_what_pandas_defaults_wrote(tmp_path: Path) -> None:
    """No dictionary pages, no statistics: the same values and types read back."""
    frame = pd.concat([_table(4), _nested(2).reindex(range(4))], axis=1)
    frame.to_parquet(tmp_path / "default.parquet", index=False)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False),
                   tmp_path / "ours.parquet", **PARQUET_OPTIONS)
    _same(pd.read_parquet(tmp_path / "ours.parquet"), pd.read_parquet(
        tmp_path / "default.parquet"))
    assert os.path.getsize(tmp_path / "ours.parquet") > 0


def test_a_converted_table_is_converted_once_and_its_nested_columns_for_every_consumer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Object columns of strings and None (not plain: pandas 3 reads them back as objects)
    are converted from Arrow at the first use and then shared; columns of nested values
    are converted again for every consumer, and only they (a consumer may change a list in
    place: the next one must not see it)."""
    from eval_pipeline.defs.pipeline import table_cache as cache_module

    conversions: list[list[str]] = []
    original = cache_module.frame_from_arrow
    monkeypatch.setattr(cache_module, "frame_from_arrow",
                        lambda table: conversions.append(table.column_names) or original(table))
    cache = TableCache()
    scalars, nested = tmp_path / "scalars.parquet", tmp_path / "nested.parquet"
    _put(cache, scalars, pd.DataFrame({"error": pd.Series([None, "boom"], dtype=object),
                                       "n": [1, 2]}))
    mixed = _nested().assign(text=["a", "b"], calls2=[[1, 2], [3]])
    _put(cache, nested, mixed)
    for _ in range(3):
        served = cache.get(str(scalars), file_stamp(str(scalars)))
        _same(served, pd.read_parquet(scalars))
        served.loc[1, "error"] = "changed"  # the next consumer does not see it
    assert conversions == [["error", "n"]]
    conversions.clear()
    for _ in range(3):
        served = cache.get(str(nested), file_stamp(str(nested)))
        _same(served, pd.read_parquet(nested))
        served["calls"].iloc[0][0]["kind"] = "changed"  # in place, in its own objects
    assert conversions == [["calls", "reward", "text", "calls2"],
                           *[["calls", "calls2"]] * 3]
    chosen = cache.get(str(nested), file_stamp(str(nested)), ["text", "calls2"])
    _same(chosen, pd.read_parquet(nested, columns=["text", "calls2"]))
    assert conversions[-1] == ["calls2"]


def test_the_arrow_tables_written_are_what_from_pandas_makes(
        project_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table a run writes, converted by the IO manager's own conversion, equals
    pa.Table.from_pandas of it, the pandas metadata included (which decides the types a
    reader gets back)."""
    frames: list[pd.DataFrame] = []
    original = io_module.to_arrow
    monkeypatch.setattr(io_module, "to_arrow",
                        lambda frame: frames.append(frame) or original(frame))
    _run_graph(project_root, tmp_path, cache_mb=256)
    assert len(frames) == 11 * 3 + 1
    odd = [
        pd.DataFrame({"steps": [[{"a": 1}], []], "n": [None, None], "s": ["x", None]}),
        pd.DataFrame({"steps": [[], [{"a": 2}]], "n": [None, 1.5], "s": [None, None]}),
        with_arrow_steps(pd.DataFrame({"steps": [[], STEP_ROWS], "n": [1, 2]})),
        pd.DataFrame({"n": [1.5], "steps": as_steps_column(pd.Series([STEP_ROWS])),
                      "c": pd.Categorical(["a"])}),
        pd.DataFrame({"when": pd.to_datetime(["2026-01-01", None]), "c": pd.Categorical(
            ["a", "b"])}),
        pd.DataFrame({1: [1], "x": [True]}),
    ]
    assert {str(f["steps"].dtype) for f in frames if "steps" in f.columns} == {
        str(STEPS_DTYPE)}
    for frame in [*frames, *odd, *odd]:  # twice: the second time from the kept schemas
        expected = pa.Table.from_pandas(frame, preserve_index=False)
        if "steps" in frame.columns and frame["steps"].dtype == STEPS_DTYPE:
            # Arrow steps: their own buffers, recorded as steps as Python lists are
            # (pandas cannot read back what from_pandas records for the Arrow dtype)
            as_lists = frame.assign(steps=pd.Series(frame["steps"].tolist(), dtype=object,
                                                    index=frame.index))
            expected = expected.replace_schema_metadata(pa.Table.from_pandas(
                as_lists, preserve_index=False).schema.metadata)
        assert io_module.to_arrow(frame).equals(expected, check_metadata=True)
