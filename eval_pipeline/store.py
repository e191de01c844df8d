"""Where batch files and asset Parquet live: one store per Dagster instance.

The CLI and the UI's code location must read and write the same files, or what one
materialized the other cannot re-materialize. So the store is resolved in one place, in this
order: an explicit folder (``eval-pipeline run --store``), ``$EVAL_PIPELINE_STORE``, the folder
the instance recorded the last time the CLI ran on it (``$DAGSTER_HOME/eval_pipeline_store``),
and by default the project's ``data/`` folder (``~/.eval_pipeline/store`` outside a project).

The asset Parquet may live elsewhere, under any fsspec URL (``s3://bucket/prefix``,
``gs://...``, ``file:///shared/assets``; ``memory://`` in tests), set by
``$EVAL_PIPELINE_ASSETS`` (recorded in the instance beside the store): several machines then
read and write one asset store while each keeps its incoming and batch files local. The
store itself stays a local folder: the new-drop sensor lists and splits files there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STORE_ENV = "EVAL_PIPELINE_STORE"
ASSETS_ENV = "EVAL_PIPELINE_ASSETS"
STORE_RECORD = "eval_pipeline_store"
"""File in DAGSTER_HOME holding the store's absolute path (and, on a second line, the assets
URL when one was set)."""


class StoreLocationError(ValueError):
    """The store was given as a URL: it must be a local folder (the assets may be a URL)."""


def is_url(location: str | Path) -> bool:
    return "://" in str(location)


@dataclass(frozen=True)
class Store:
    root: Path
    assets_url: str | None = None
    """Where the asset Parquet lives when not in ``root/assets``: an fsspec URL or folder."""

    @property
    def incoming(self) -> Path:
        """Drops the new-drop sensor watches."""
        return self.root / "incoming"

    @property
    def batches(self) -> Path:
        """Batch files and their manifests, one folder per drop."""
        return self.root / "batches"

    @property
    def assets(self) -> str:
        """Asset Parquet, one folder per asset, one file per batch partition: a local
        folder or an fsspec URL (read and write it through ``upath.UPath``)."""
        return self.assets_url or str(self.root / "assets")


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


def _record(dagster_home: str | Path | None) -> list[str]:
    home = dagster_home or os.environ.get("DAGSTER_HOME")
    record = Path(home) / STORE_RECORD if home else None
    if record is None or not record.is_file():
        return []
    return [line.strip() for line in record.read_text("utf-8").splitlines()]


def recorded_store(dagster_home: str | Path | None = None) -> Path | None:
    lines = _record(dagster_home)
    return Path(lines[0]) if lines and lines[0] else None


def recorded_assets(dagster_home: str | Path | None = None) -> str | None:
    lines = _record(dagster_home)
    return lines[1] if len(lines) > 1 and lines[1] else None


def _assets_location(value: str) -> str:
    """A URL as given; a folder made absolute (the UI and the CLI run in other folders)."""
    return value if is_url(value) else str(Path(value).expanduser().resolve())


def resolve_store(explicit: str | Path | None = None) -> Store:
    chosen = (explicit or os.environ.get(STORE_ENV) or recorded_store() or default_store())
    if is_url(chosen):
        raise StoreLocationError(
            f"the store {chosen} must be a local folder (it holds the incoming drops and the "
            f"batch files); put the asset Parquet under a URL with ${ASSETS_ENV} instead")
    root = Path(chosen).expanduser().resolve()
    recorded = recorded_store()
    # The recorded assets URL belongs to the recorded store, not to another one.
    assets = os.environ.get(ASSETS_ENV) or (recorded_assets() if recorded == root else None)
    return Store(root, _assets_location(assets) if assets else None)


def record_store(dagster_home: Path, store: Store) -> None:
    """Remember the store (and an assets URL) in the instance, so ``dg dev`` on that
    DAGSTER_HOME finds them."""
    extra = f"{store.assets_url}\n" if store.assets_url else ""
    (dagster_home / STORE_RECORD).write_text(f"{store.root}\n{extra}", "utf-8")
