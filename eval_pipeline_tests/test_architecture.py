"""Domain modules stay free of Dagster, so they run (and test) anywhere."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eval_pipeline"
ORCHESTRATION = {"definitions.py", "local_run.py"}
"""Outside defs/: the code location's entry point and the CLI's engine."""


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_only_orchestration_modules_import_dagster():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "defs" or str(rel) in ORCHESTRATION:
            continue
        if {"dagster", "dagster_shared", "upath"} & _imports(path):
            offenders.append(str(rel))
    assert offenders == []
    assert len(list(PACKAGE.rglob("*.py"))) > 30  # the walk really saw the package
