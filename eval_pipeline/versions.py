"""Code versions derived from the source that shapes each table.

An asset's ``code_version`` is a hash of the modules its rows depend on, so upgrading a
parser, the preprocessing rules or the averaging marks exactly the affected assets stale in
the Dagster UI, and lineage can say a score moved because the code did.
"""

from __future__ import annotations

import hashlib
from importlib import import_module
from pathlib import Path


def _files(module_name: str) -> list[Path]:
    module = import_module(module_name)
    origin = Path(module.__file__ or "")
    if origin.name == "__init__.py":
        return sorted(origin.parent.rglob("*.py")) + sorted(origin.parent.rglob("*.yaml"))
    return [origin]


PACKAGE_DIR = Path(__file__).resolve().parent


def source_version(*module_names: str, data_files: tuple[str, ...] = ()) -> str:
    """Hash of the modules' source and of data files (paths relative to the package)."""
    digest = hashlib.sha256()
    paths = [p for name in module_names for p in _files(name)]
    paths += [PACKAGE_DIR / f for f in data_files]
    for path in paths:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
