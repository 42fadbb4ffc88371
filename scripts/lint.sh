#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Lint and type-check: ruff on the whole tree, then mypy on the packages configured in
# pyproject.toml ([tool.mypy] files: analytical and predictors, strict). profiler/ and simulate/
# are left out until `mypy profiler simulate` passes. Exits non-zero if either check fails.
# PYTHON picks the interpreter (default: .venv/bin/python, as scripts/setup.sh makes it).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
if [ ! -x "$PYTHON" ] && ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "lint: no interpreter at $PYTHON; run scripts/setup.sh or set PYTHON" >&2
  exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
echo "== ruff check ."
"$PYTHON" -m ruff check . || status=1
echo "== mypy (pyproject.toml [tool.mypy])"
"$PYTHON" -m mypy || status=1
exit "$status"
