"""The batch files of a run's batches, found with one listing of the batch folders.

``splitting.find_batch`` globs every drop's folder for one batch's manifest; called once per
batch of a run, that listed the whole store once per batch (quadratic: 3.3 s of a profiled
corpora run, 452 batches). :func:`locate_batches` lists the folders once and gives, for each
key, what ``find_batch`` gives (the same manifest when several match, the same error when
there is none or its batch file is gone).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from pathlib import Path

from eval_pipeline.splitting import MANIFEST_SUFFIX, BatchManifest, find_batch

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
"""Keys whose manifests all start with ``<key>.`` and hold no glob characters; any other
key is looked up by ``find_batch`` itself."""


def _manifests(batches_dir: Path) -> dict[str, list[Path]]:
    """Manifest files by the name part before their first dot, hidden folders (a split in
    progress) left out, as ``find_batch`` leaves them out."""
    found: dict[str, list[Path]] = {}
    if not batches_dir.is_dir():
        return found
    for folder in batches_dir.iterdir():
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        for manifest in folder.iterdir():
            if manifest.name.endswith(MANIFEST_SUFFIX):
                found.setdefault(manifest.name.split(".", 1)[0], []).append(manifest)
    return found


def locate_batches(batches_dir: Path, keys: Sequence[str]
                   ) -> dict[str, tuple[Path, BatchManifest]]:
    """``{key: find_batch(batches_dir, key)}`` for every key, listing the folders once.
    Raises what ``find_batch`` raises for the first key it cannot find."""
    by_prefix = _manifests(batches_dir)
    located: dict[str, tuple[Path, BatchManifest]] = {}
    for key in keys:
        if not _PLAIN_KEY.fullmatch(key):
            located[key] = find_batch(batches_dir, key)
            continue
        pattern = f"{key}.*{MANIFEST_SUFFIX}"
        matches = sorted(m for m in by_prefix.get(key, [])
                         if fnmatch.fnmatchcase(m.name, pattern))
        if not matches:
            located[key] = find_batch(batches_dir, key)  # raises, saying what is missing
            continue
        manifest = BatchManifest.model_validate(json.loads(matches[0].read_text("utf-8")))
        path = matches[0].parent / manifest.batch_file
        located[key] = (path, manifest) if path.is_file() else find_batch(batches_dir, key)
    return located
