"""Split a drop into batch files, with the original tool's naming.

``demo02.jsonl`` with 97 records and split size 10 becomes ``demo0201.jsonl`` ...
``demo0210.jsonl`` (the last holding 7). Each batch gets a manifest that maps its lines back
to the drop's lines, so a quarantined record still names the line the user can open.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from eval_pipeline.atomic import replace_folder

LINE_SPLIT_SUFFIXES = {".jsonl", ".ndjson"}
MANIFEST_SUFFIX = ".manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


class BatchManifest(BaseModel):
    partition_key: str
    drop_file: str
    batch_file: str
    """File name of the batch, beside its manifest."""
    lines: list[int] | None = None
    """Drop line of each batch line (1-based); None when the batch is a whole-file copy."""
    fingerprint: str


def partition_key_for(stem: str) -> str:
    """Partition keys stay safe for file names and asset paths (no dots, no spaces)."""
    key = _UNSAFE.sub("_", stem).strip("_")
    return key or "drop"


def drop_fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def split_drop(drop: Path, batches_dir: Path, split_size: int,
               format_name: str | None = None, base: str | None = None
               ) -> list[BatchManifest]:
    """Write the batch files of one drop and return their manifests, in order.

    JSONL files are split by non-blank lines (each a record, parseable or not); other
    files, and JSONL formats whose records belong together, are one batch holding a copy.
    """
    from eval_pipeline.formats import splittable_by_line

    if split_size < 1:
        raise ValueError(f"split_size must be at least 1, got {split_size}")
    base = partition_key_for(base or drop.stem)
    fingerprint = drop_fingerprint(drop)
    manifests: list[BatchManifest] = []

    def fill(out_dir: Path) -> None:
        if drop.suffix.lower() not in LINE_SPLIT_SUFFIXES or not splittable_by_line(
            drop, format_name
        ):
            key = f"{base}01"
            target = out_dir / f"{key}{drop.suffix.lower()}"
            shutil.copyfile(drop, target)
            manifests.append(BatchManifest(partition_key=key, drop_file=str(drop.resolve()),
                                           batch_file=target.name, fingerprint=fingerprint))
        else:
            manifests.extend(_split_lines(drop, out_dir, base, split_size, fingerprint))
        for manifest in manifests:
            (out_dir / (manifest.batch_file + MANIFEST_SUFFIX)).write_text(
                manifest.model_dump_json(indent=2), "utf-8"
            )

    # The drop's batches replace its earlier ones at once: a run reading them meanwhile
    # (the UI's, or the sensor's split beside it) sees the old set or the new, whole.
    replace_folder(batches_dir / base, fill)
    return manifests


def _split_lines(drop: Path, out_dir: Path, base: str, split_size: int, fingerprint: str
                 ) -> Iterator[BatchManifest]:
    """Stream the drop into batch files: memory holds one line, never the drop.

    A drop with no record still gets one (empty) batch, so it shows up in the run.
    """
    drop_file = str(drop.resolve())
    index, lines, out = 0, [], None
    with drop.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            if out is None:
                index += 1
                out = (out_dir / f"{base}{index:02d}.jsonl").open("wb")
            out.write(raw if raw.endswith(b"\n") else raw + b"\n")
            lines.append(lineno)
            if len(lines) == split_size:
                out.close()
                yield _manifest(base, index, drop_file, lines, fingerprint)
                out, lines = None, []
    if out is not None:
        out.close()
        yield _manifest(base, index, drop_file, lines, fingerprint)
    elif index == 0:
        (out_dir / f"{base}01.jsonl").write_bytes(b"")
        yield _manifest(base, 1, drop_file, [], fingerprint)


def _manifest(base: str, index: int, drop_file: str, lines: list[int], fingerprint: str
              ) -> BatchManifest:
    key = f"{base}{index:02d}"
    return BatchManifest(partition_key=key, drop_file=drop_file, batch_file=f"{key}.jsonl",
                         lines=lines, fingerprint=fingerprint)


class MissingBatchError(FileNotFoundError):
    """A registered partition whose batch file is gone (deleted, or another store)."""


def find_batch(batches_dir: Path, partition_key: str) -> tuple[Path, BatchManifest]:
    """Locate a partition's batch file through its manifest."""
    matches = sorted(m for m in batches_dir.glob(f"*/{partition_key}.*{MANIFEST_SUFFIX}")
                     if not m.parent.name.startswith("."))  # not a split in progress
    manifest = (BatchManifest.model_validate(json.loads(matches[0].read_text("utf-8")))
                if matches else None)
    path = matches[0].parent / manifest.batch_file if manifest and matches else None
    if manifest is None or path is None or not path.is_file():
        missing = path or batches_dir / "*" / f"{partition_key}.jsonl"
        raise MissingBatchError(
            f"batch {partition_key!r} has no batch file ({missing} is missing); batches are "
            f"made by dropping a file into the incoming folder (the new_drop_sensor splits "
            f"it) or by eval-pipeline run")
    return path, manifest


DROP_SUFFIXES = {".jsonl", ".ndjson", ".json", ".txt", ".log", ".traj", ".parquet"}


def unique_bases(drops: list[Path]) -> dict[Path, str]:
    """Batch base names for many drops: the file stem, prefixed by parent folders on clashes."""
    depth = dict.fromkeys(drops, 0)
    while True:
        names = {d: "_".join([*d.parent.parts[len(d.parent.parts) - depth[d]:], d.stem])
                 if depth[d] else d.stem for d in drops}
        keys = {d: partition_key_for(n) for d, n in names.items()}
        clashes = [d for d in drops if list(keys.values()).count(keys[d]) > 1
                   and depth[d] < len(d.parent.parts)]
        if not clashes:
            return keys
        for d in clashes:
            depth[d] += 1


def list_drops(incoming_dir: Path) -> list[Path]:
    """Files ready to process: known suffixes, not hidden, not still being written."""
    if not incoming_dir.is_dir():
        return []
    return sorted(
        p for p in incoming_dir.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in DROP_SUFFIXES
    )
