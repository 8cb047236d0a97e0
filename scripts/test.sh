#!/usr/bin/env bash
# The project's test command (README and .ci/run call exactly this): lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SERVEGATE_VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
echo "== ruff" && ruff check src tests && ruff format --check src tests
echo "== mypy (strict, src)" && mypy
echo "== pytest" && python -m pytest "$@"
