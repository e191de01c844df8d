"""Split a drop into batch files, with the original tool's naming.

``demo02.jsonl`` with 97 records and split size 10 becomes ``demo0201.jsonl`` ...
``demo0210.jsonl`` (the last holding 7). Each batch gets a manifest that maps its lines back
to the drop's lines, so a quarantined record still names the line the user can open.

A gzip-compressed (``demo02.jsonl.gz``) or UTF-16 drop is decoded while it is split, a chunk
at a time, into the same UTF-8 batch files; its lines are the lines of its decoded text.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

from eval_pipeline.atomic import replace_folder
from eval_pipeline.formats.base import CorruptInputError, looks_like_json_line, open_text

LINE_SPLIT_SUFFIXES = {".jsonl", ".ndjson"}
COMPRESSED_SUFFIX = ".gz"
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


def data_suffix(path: Path) -> str:
    """The suffix of what the file holds: ``.jsonl`` for ``x.jsonl`` and ``x.jsonl.gz``."""
    suffixes = [x.lower() for x in path.suffixes]
    if suffixes[-1:] == [COMPRESSED_SUFFIX]:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def drop_stem(path: Path) -> str:
    """The drop's name without its suffixes: ``demo02`` for ``demo02.jsonl.gz`` too."""
    name = path.name
    if name.lower().endswith(COMPRESSED_SUFFIX) and len(name) > len(COMPRESSED_SUFFIX):
        name = name[: -len(COMPRESSED_SUFFIX)]
    return Path(name).stem


def _copy_suffix(path: Path) -> str:
    data = data_suffix(path)
    compressed = path.suffix.lower() == COMPRESSED_SUFFIX
    return data + COMPRESSED_SUFFIX if compressed and data else path.suffix.lower()


def _blank(line: bytes) -> bool:
    """Whitespace only; ``isspace`` stops at the first other byte, ``strip`` would copy."""
    return not line or line.isspace()


#: How many lines after a bad first one are looked at for a JSON line (see below).
_LINES_LOOKED_AT = 20


def _reads_as_json_lines(drop: Path) -> bool:
    """Whether the drop is JSON lines, decided as ``iter_records`` decides for a batch:
    its first non-blank line is a whole JSON line, or (a bad first record) it opens like
    JSON and one of the next lines is an unindented JSON line.

    Only then is it cut between lines, where each batch line is one record. A binary file,
    a pretty-printed document, an empty file or one damaged from its first bytes is one
    batch, whose parse counts its records (a binary file is one).
    """
    try:
        with open_text(drop) as fh:
            lines = (raw for raw in fh if not _blank(raw))
            first = next(lines, b"").removeprefix(b"\xef\xbb\xbf")
            if looks_like_json_line(first):
                return True
            if first[:256].lstrip()[:1] not in (b"{", b"["):
                return False
            return any(raw[:1] in (b"{", b"[") and looks_like_json_line(raw)
                       for _, raw in zip(range(_LINES_LOOKED_AT), lines, strict=False))
    except CorruptInputError:
        return False


def drop_fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def split_drop(drop: Path, batches_dir: Path, split_size: int,
               format_name: str | None = None, base: str | None = None
               ) -> list[BatchManifest]:
    """Write the batch files of one drop and return their manifests, in order.

    JSONL files (also gzip-compressed or UTF-16) are split by non-blank lines (each a
    record, parseable or not); other files, JSONL formats whose records belong together and
    ``.jsonl`` files that are not JSON lines are one batch holding a copy of the drop as it
    is (the parser decodes it). A gzip stream found damaged while splitting is one batch
    too, whose parse quarantines it as ``corrupt_gzip``: none of it is trusted.
    """
    if split_size < 1:
        raise ValueError(f"split_size must be at least 1, got {split_size}")
    base = partition_key_for(base or drop_stem(drop))
    manifests: list[BatchManifest] = []

    def fill(out_dir: Path) -> None:
        manifests.extend(_write_batches(drop, out_dir, split_size, format_name,
                                        lambda index: f"{base}{index:02d}"))
        _write_manifests(out_dir, manifests)

    # The drop's batches replace its earlier ones at once: a run reading them meanwhile
    # (the UI's, or the sensor's split beside it) sees the old set or the new, whole.
    replace_folder(batches_dir / base, fill)
    return manifests


def split_batch_folder(files: Sequence[Path], batches_dir: Path, group: str,
                       keys: Mapping[Path, str],
                       format_for: Callable[[Path], str | None]) -> list[BatchManifest]:
    """Each file of an already-split folder becomes one batch named ``keys[file]``
    (``demo0201.jsonl`` stays batch ``demo0201``), as the original tool's ``--batch-folder``
    evaluates the files of a folder its preprocessing split. Nothing is re-split; the
    batches go to ``batches_dir/group`` and replace that group's earlier ones at once.
    """
    manifests: list[BatchManifest] = []

    def fill(out_dir: Path) -> None:
        for drop in files:
            manifests.extend(_write_batches(drop, out_dir, sys.maxsize, format_for(drop),
                                            _always(keys[drop])))
        _write_manifests(out_dir, manifests)

    replace_folder(batches_dir / group, fill)
    return manifests


def _always(key: str) -> Callable[[int], str]:
    """The one key of a drop that is a single batch, whatever its index."""
    return lambda _index: key


def _write_manifests(out_dir: Path, manifests: Sequence[BatchManifest]) -> None:
    for manifest in manifests:
        (out_dir / (manifest.batch_file + MANIFEST_SUFFIX)).write_text(
            manifest.model_dump_json(indent=2), "utf-8"
        )


def _write_batches(drop: Path, out_dir: Path, split_size: int, format_name: str | None,
                   key_of: Callable[[int], str]) -> list[BatchManifest]:
    """The batch files of one drop in ``out_dir``, batch ``i`` (from 1) named ``key_of(i)``.

    JSONL files (also gzip-compressed or UTF-16) are split by non-blank lines; anything
    else, and a gzip stream found damaged, is one batch holding a copy of the drop.
    """
    from eval_pipeline.formats import splittable_by_line

    fingerprint = drop_fingerprint(drop)
    manifests: list[BatchManifest] = []

    def copy_whole() -> None:
        key = key_of(1)
        target = out_dir / f"{key}{_copy_suffix(drop)}"
        shutil.copyfile(drop, target)
        manifests.append(BatchManifest(partition_key=key, drop_file=str(drop.resolve()),
                                       batch_file=target.name, fingerprint=fingerprint))

    if (data_suffix(drop) not in LINE_SPLIT_SUFFIXES
            or not splittable_by_line(drop, format_name)
            or not _reads_as_json_lines(drop)):
        copy_whole()
        return manifests
    try:
        manifests.extend(_split_lines(drop, out_dir, key_of, split_size, fingerprint))
    except CorruptInputError:
        # The batches written so far and the one being written when the damage showed.
        for index in range(1, len(manifests) + 2):
            (out_dir / f"{key_of(index)}.jsonl").unlink(missing_ok=True)
        manifests.clear()
    if not manifests:  # damaged, or emptied since it was looked at
        copy_whole()
    return manifests


def _split_lines(drop: Path, out_dir: Path, key_of: Callable[[int], str], split_size: int,
                 fingerprint: str) -> Iterator[BatchManifest]:
    """Stream the drop into batch files: memory holds one line, never the drop.

    Raises CorruptInputError when gzip data turns out damaged (batches written so far stay
    in ``out_dir`` for the caller to discard).
    """
    drop_file = str(drop.resolve())
    index, lines, out = 0, [], None
    try:
        with open_text(drop) as fh:
            for lineno, raw in enumerate(fh, start=1):
                if _blank(raw):
                    continue
                if out is None:
                    index += 1
                    out = (out_dir / f"{key_of(index)}.jsonl").open("wb")
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
                lines.append(lineno)
                if len(lines) == split_size:
                    out.close()
                    yield _manifest(key_of(index), drop_file, lines, fingerprint)
                    out, lines = None, []
    finally:
        if out is not None:
            out.close()
    if lines:
        yield _manifest(key_of(index), drop_file, lines, fingerprint)


def _manifest(key: str, drop_file: str, lines: list[int], fingerprint: str) -> BatchManifest:
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


#: ``.gz``: a compressed drop (``x.jsonl.gz``), read through its decompressed text.
DROP_SUFFIXES = {".jsonl", ".ndjson", ".json", ".txt", ".log", ".traj", ".parquet",
                 COMPRESSED_SUFFIX}


def unique_bases(drops: list[Path]) -> dict[Path, str]:
    """Batch base names for many drops: the file stem, prefixed by parent folders on clashes."""
    depth = dict.fromkeys(drops, 0)
    while True:
        names = {d: "_".join([*d.parent.parts[len(d.parent.parts) - depth[d]:], drop_stem(d)])
                 if depth[d] else drop_stem(d) for d in drops}
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
