"""Shared fixtures. Real public corpora are read from ../shared/corpora when present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CORPORA_DIR = Path(
    os.environ.get("EVAL_PIPELINE_CORPORA", PROJECT_ROOT.parent / "shared" / "corpora")
)


@pytest.fixture(scope="session")
def corpora_dir() -> Path:
    """The shared corpora folder, or a skip: a user's clone does not have it."""
    if not CORPORA_DIR.is_dir():
        pytest.skip(
            f"real-trajectory corpora not found at {CORPORA_DIR} "
            "(set EVAL_PIPELINE_CORPORA to run these tests)"
        )
    return CORPORA_DIR


@pytest.fixture(autouse=True)
def isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own store: none writes batch files or Parquet into data/."""
    from eval_pipeline.store import STORE_ENV

    store = tmp_path / "store"
    monkeypatch.setenv(STORE_ENV, str(store))
    return store


@pytest.fixture(scope="session")
def project_root() -> Path:
    return PROJECT_ROOT


@pytest.fixture
def instance(tmp_path: Path):
    """A real, temporary Dagster instance (SQLite storage under tmp_path)."""
    import dagster as dg

    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as inst:
        yield inst
