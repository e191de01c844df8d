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


@pytest.fixture(autouse=True)
def isolated_dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own DAGSTER_HOME, and whatever a test sets it to is undone.

    The CLI sets ``os.environ["DAGSTER_HOME"]`` for its process (``ensure_dagster_home``:
    the judge cache, the store record and the instance all hang off it), so in one pytest
    process a test that ran the CLI left its home behind for the next test, and one that
    ran it without setting DAGSTER_HOME wrote into the project's ``.dagster_home``.
    ``monkeypatch`` restores the value at teardown whoever changed it. The same goes for
    ``DAGSTER_EVENT_BATCH_SIZE``, which the CLI's event log storage sets for its process.
    """
    home = tmp_path / "isolated_dagster_home"
    home.mkdir()  # Dagster's own commands refuse a DAGSTER_HOME that does not exist
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    return home


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
