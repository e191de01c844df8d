"""The code location's entry point (workspace.yaml, ``[tool.dagster]``, ``dg dev``).

Everything under ``eval_pipeline/defs/`` is loaded the way dg loads a project: the
evaluation pipeline (``defs/pipeline/``, assembled in its ``definitions.py``) and whatever
``dg scaffold defs`` adds beside it. Installed without the project's files (no
pyproject.toml to read the defs folder from), the location is the pipeline alone.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from eval_pipeline.allocator import keep_freed_memory
from eval_pipeline.defs.pipeline.definitions import location_definitions

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# The processes that load the location (the UI's run workers among them) run the stages:
# their freed memory is kept for the next batch (see eval_pipeline.allocator).
keep_freed_memory()


@dg.definitions
def defs() -> dg.Definitions:
    if (PROJECT_ROOT / "pyproject.toml").is_file():
        return dg.load_from_defs_folder(project_root=PROJECT_ROOT)
    return location_definitions()
