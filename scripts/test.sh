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
# One process by default. SERVEGATE_TEST_WORKERS=N runs pytest on N workers (pytest-xdist, each
# test file on one of them, its module fixtures built once): on 2 cores, 1,147-1,160 s instead
# of 1,430 s, but the tests that time an engine (the performance gate's slow candidate, the
# bench's TTFT floor) then share the cores with another worker's engines and failed in 1 of 2
# clean-clone runs (benchmarks/RESULTS-time.md), so CI does not use it. A marked group (`-m …`)
# always runs in one process: its tests time whole engines (vLLM, Ray, stock servers).
workers=${SERVEGATE_TEST_WORKERS:-0}
for arg in "$@"; do
  case $arg in -m|-m*|-n|-n*|--numprocesses*) workers=0 ;; esac
done
parallel=()
[ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadfile)
echo "== pytest" && python -m pytest "${parallel[@]}" --durations=25 "$@"
