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
# Two pytest workers (pytest-xdist), each test file on one of them (its module fixtures built
# once): the reference engine serves with one thread on 2 cores, so one engine test at a time
# leaves a core idle. A marked group (`-m …`) runs in one process, as it always did: its tests
# time whole engines (vLLM, Ray, stock servers). SERVEGATE_TEST_WORKERS=N sets the number of
# workers (0: no workers, one process).
workers=${SERVEGATE_TEST_WORKERS:-}
if [ -z "$workers" ]; then
  workers=2
  for arg in "$@"; do
    case $arg in -m|-m*|-n|-n*|--numprocesses*) workers=0 ;; esac
  done
fi
parallel=()
[ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadfile)
echo "== pytest" && python -m pytest "${parallel[@]}" --durations=25 "$@"
