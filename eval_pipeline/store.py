"""Where batch files and asset Parquet live: one store per Dagster instance.

The CLI and the UI's code location must read and write the same files, or what one
materialized the other cannot re-materialize. So the store is resolved in one place, in this
order: an explicit folder (``eval-pipeline run --store``), ``$EVAL_PIPELINE_STORE``, the folder
the instance recorded the last time the CLI ran on it (``$DAGSTER_HOME/eval_pipeline_store``),
and by default the project's ``data/`` folder (``~/.eval_pipeline/store`` outside a project).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STORE_ENV = "EVAL_PIPELINE_STORE"
STORE_RECORD = "eval_pipeline_store"
"""File in DAGSTER_HOME holding the store's absolute path."""


@dataclass(frozen=True)
class Store:
    root: Path

    @property
    def incoming(self) -> Path:
        """Drops the new-drop sensor watches."""
        return self.root / "incoming"

    @property
    def batches(self) -> Path:
        """Batch files and their manifests, one folder per drop."""
        return self.root / "batches"

    @property
    def assets(self) -> Path:
        """Asset Parquet, one folder per asset, one file per batch partition."""
        return self.root / "assets"


def project_root() -> Path | None:
    """The project folder (the one with workspace.yaml): the working directory when run from
    it, else the checkout this package was installed from in development mode."""
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (candidate / "workspace.yaml").exists():
            return candidate
    return None


def default_store() -> Path:
    project = project_root()
    return project / "data" if project else Path.home() / ".eval_pipeline" / "store"


def recorded_store(dagster_home: str | Path | None = None) -> Path | None:
    home = dagster_home or os.environ.get("DAGSTER_HOME")
    record = Path(home) / STORE_RECORD if home else None
    if record is None or not record.is_file():
        return None
    text = record.read_text("utf-8").strip()
    return Path(text) if text else None


def resolve_store(explicit: str | Path | None = None) -> Store:
    chosen = (explicit or os.environ.get(STORE_ENV) or recorded_store() or default_store())
    return Store(Path(chosen).expanduser().resolve())


def record_store(dagster_home: Path, store: Store) -> None:
    """Remember the store in the instance, so ``dg dev`` on that DAGSTER_HOME finds it."""
    (dagster_home / STORE_RECORD).write_text(f"{store.root}\n", "utf-8")
