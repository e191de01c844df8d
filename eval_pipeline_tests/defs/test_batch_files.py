"""#12.4: a run's batch files found with one listing give what find_batch gives per batch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eval_pipeline.defs.pipeline.batch_files import locate_batches
from eval_pipeline.splitting import MissingBatchError, find_batch, split_drop


def _store(project_root: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    batches = tmp_path / "batches"
    keys: list[str] = []
    for drop in sorted((project_root / "data" / "incoming").glob("*.jsonl")):
        keys += [m.partition_key for m in split_drop(drop, batches, 5)]
    # A split in progress (hidden folder) holding a copy of one batch, and a second manifest
    # of another batch in a second drop folder: find_batch skips the one, sorts the other.
    first = next(batches.glob("*/*.manifest.json"))
    hidden = batches / ".in_progress"
    hidden.mkdir()
    shutil.copy(first, hidden / first.name)
    return batches, keys


def test_one_listing_finds_what_find_batch_finds(project_root: Path, tmp_path: Path) -> None:
    batches, keys = _store(project_root, tmp_path)
    assert len(keys) > 5
    wanted = list(reversed(keys))
    located = locate_batches(batches, wanted)
    assert list(located) == wanted
    assert located == {k: find_batch(batches, k) for k in wanted}


@pytest.mark.parametrize("broken", ["no_manifest", "no_batch_file"])
def test_a_missing_batch_raises_what_find_batch_raises(project_root: Path, tmp_path: Path,
                                                       broken: str) -> None:
    batches, keys = _store(project_root, tmp_path)
    path, _manifest = find_batch(batches, keys[1])
    if broken == "no_manifest":
        key = "not_a_batch01"
    else:
        key = keys[1]
        path.unlink()
    with pytest.raises(MissingBatchError) as expected:
        find_batch(batches, key)
    with pytest.raises(MissingBatchError) as got:
        locate_batches(batches, [keys[0], key, keys[2]])
    assert str(got.value) == str(expected.value)
