#!/usr/bin/env bash
# The project's test command (README and .ci/run call exactly this): lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SERVEGATE_VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
# The engine tests fail, never skip, when the reference engine is missing (tests/integration).
export SERVEGATE_REQUIRE_ENGINE=1
# The HTML report's browser test fails, never skips, without Chromium (bash scripts/chromium.sh).
export SERVEGATE_REQUIRE_BROWSER=1
# The store tests fail, never skip, without PostgreSQL (bash scripts/postgres.sh install).
export SERVEGATE_REQUIRE_POSTGRES=1
echo "== ruff" && ruff check src tests benchmarks fuzz && ruff format --check src tests benchmarks fuzz
echo "== mypy (strict, src)" && mypy
# pyproject's addopts deselect the `transformers` and `heavy` tests; `-m heavy` runs the heavy ones.
echo "== pytest" && python -m pytest --durations=25 "$@"
