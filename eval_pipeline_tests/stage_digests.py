"""Digests of the data stages' tables, to prove a faster stage writes the same output (#12.1).

``digest_tables`` hashes every value of every table (floats by ``repr``, so bit for bit),
the column names and the dtypes. ``stage_digests`` runs parse, preprocess and clips on one
file as the assets do. The expected digests in ``stage_digests.json`` were written by the
implementation before the speed work (``python -m eval_pipeline_tests.stage_digests``
rewrites them from the code it runs: only after a deliberate change of output).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline import ingest
from eval_pipeline.formats import discover_files
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.steps_column import STEPS_DTYPE
from eval_pipeline.tool_registry import default_registry

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "stage_digests.json"
SAMPLES = HERE.parent / "data" / "incoming"


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if value is None or isinstance(value, str | int | bool):
        return value
    return repr(value)


def _dtype_name(column: str, dtype: Any) -> str:
    """The dtype as the digests recorded it. The ``steps`` column is Arrow since the #12.1
    contract (``steps_column.STEPS_DTYPE``) and was an object column of the same dicts
    before: recorded as ``object``, so the digests pin its values, not the change."""
    if column == "steps" and dtype == STEPS_DTYPE:
        return "object"
    return str(dtype)


def digest_table(table: pd.DataFrame) -> str:
    header = [list(map(str, table.columns)),
              [_dtype_name(str(c), t) for c, t in zip(table.columns, table.dtypes, strict=True)]]
    body = [[_plain(v) for v in table[c].tolist()] for c in table.columns]
    text = json.dumps([header, body], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def stage_tables(path: Path) -> dict[str, pd.DataFrame]:
    raw, quarantined = ingest.read_batch(path, None, path.stem)
    kept, removed, _stats = ingest.preprocess_batch(raw, PreprocessConfig(), default_registry())
    return {"raw": raw, "quarantine": quarantined, "preprocessed": kept,
            "preprocess_report": removed, "clips": ingest.clips_table(kept)}


def stage_digests(path: Path) -> dict[str, str]:
    return {name: digest_table(t) for name, t in stage_tables(path).items()}


def inputs(corpora: Path | None) -> dict[str, Path]:
    """The sample drops and every corpora data file, keyed by a stable name."""
    found = {f"data/{p.name}": p for p in sorted(SAMPLES.glob("*.jsonl"))}
    if corpora is not None and corpora.is_dir():
        found |= {f"corpora/{p.relative_to(corpora).as_posix()}": p
                  for p in discover_files(corpora)}
    return found


def main() -> None:
    corpora = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    digests = {name: stage_digests(path) for name, path in inputs(corpora).items()}
    EXPECTED.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"{len(digests)} inputs -> {EXPECTED}")


if __name__ == "__main__":
    main()
