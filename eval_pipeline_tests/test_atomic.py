"""Nothing half-written is ever read back, and one CLI run holds a store at a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from eval_pipeline.atomic import (
    StoreBusyError,
    exclusive_store,
    replace_folder,
    write_atomic,
)
from eval_pipeline.defs.pipeline.io_manager import ParquetIOManager


class Boom(Exception):
    pass


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_write_that_fails_midway_leaves_the_previous_file(tmp_path):
    target = tmp_path / "table.parquet"
    write_atomic(target, lambda fh: fh.write(b"complete old"))

    def half(fh):
        fh.write(b"half of the new")
        raise Boom

    with pytest.raises(Boom):
        write_atomic(target, half)
    assert target.read_bytes() == b"complete old"
    assert _leftovers(tmp_path) == []


def test_a_folder_is_swapped_whole_or_not_at_all(tmp_path):
    target = tmp_path / "drop"
    replace_folder(target, lambda d: (d / "drop01.jsonl").write_text("old"))

    def half(folder: Path) -> None:
        (folder / "drop01.jsonl").write_text("new")
        raise Boom

    with pytest.raises(Boom):
        replace_folder(target, half)
    assert [p.name for p in target.iterdir()] == ["drop01.jsonl"]
    assert (target / "drop01.jsonl").read_text() == "old"
    replace_folder(target, lambda d: (d / "drop02.jsonl").write_text("new"))
    assert [p.name for p in target.iterdir()] == ["drop02.jsonl"]
    assert _leftovers(tmp_path) == []


def test_the_io_manager_keeps_the_last_complete_table_when_a_write_fails(tmp_path):
    rows = {"value": pd.DataFrame({"x": [1, 2, 3]})}

    @dg.asset
    def table() -> pd.DataFrame:
        return rows["value"]

    resources = {"io_manager": ParquetIOManager(base_path=str(tmp_path))}
    assert dg.materialize([table], resources=resources).success
    rows["value"] = pd.DataFrame({"x": [object()]})  # pyarrow cannot write this
    assert not dg.materialize([table], resources=resources, raise_on_error=False).success
    assert pd.read_parquet(tmp_path / "table.parquet")["x"].tolist() == [1, 2, 3]
    assert _leftovers(tmp_path) == []


_HOLD = """
import sys, time
from pathlib import Path
from eval_pipeline.atomic import exclusive_store
with exclusive_store(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_holder_of_a_store_is_refused_and_a_killed_one_frees_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreBusyError, match=f"in use by another eval-pipeline run "
                                                 f"\\(pid {holder.pid}\\)"), \
                exclusive_store(tmp_path):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with exclusive_store(tmp_path):  # the kernel let go of the killed holder's lock
        assert (tmp_path / ".lock").read_text() == str(os.getpid())


@pytest.mark.slow
def test_two_cli_runs_on_one_store_the_second_is_refused_at_once(project_root, tmp_path):
    store = tmp_path / "store"
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "PYTHONPATH": str(project_root)}

    def cli(out: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "eval_pipeline.cli", "run", str(project_root / "data"),
             "--output", str(tmp_path / out), "--store", str(store)],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = cli("first")
    deadline = time.monotonic() + 120
    while not ((store / ".lock").exists() and (store / ".lock").read_text().strip()):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = cli("second")
    _, err = second.communicate(timeout=120)
    assert second.returncode == 1
    assert err.strip().splitlines()[-1] == (
        f"eval-pipeline: error: the store {store} is in use by another eval-pipeline run "
        f"(pid {first.pid}); wait for it to finish, or give this run its own --store")
    _out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert len(pd.read_parquet(tmp_path / "first" / "trajectory_summaries.parquet")) > 0
    assert not (tmp_path / "second").exists() or not any((tmp_path / "second").iterdir())
