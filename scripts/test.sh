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
# The default run is two pytest calls: every test but the `timed` ones on two workers (pytest-xdist,
# each test file on one worker, its module fixtures built once), then the `timed` ones — those
# that assert a wall-clock bound or judge a real server's latency — alone in one process, so that
# no other worker's engines share the cores while they measure (on two workers a slow candidate's
# E2EL read 2.39x where it reads 3.39x alone: benchmarks/RESULTS-time.md).
# SERVEGATE_TEST_WORKERS=0 runs everything in one process (N: N workers for the first call).
# A marked group (`-m …`) and an explicit `-n` always run as asked, in one call: a marked group
# times whole engines (vLLM, Ray, stock servers).
cores=$(nproc 2>/dev/null || echo 1)
workers=${SERVEGATE_TEST_WORKERS:-$([ "$cores" -ge 2 ] && echo 2 || echo 0)}
for arg in "$@"; do
  case $arg in -m|-m*|-n|-n*|--numprocesses*) workers=0 ;; esac
done
if [ "$workers" = 0 ]; then
  echo "== pytest" && exec python -m pytest --durations=25 "$@"
fi
# Exit 5 (no test selected, e.g. a file with no timed test) is not a failure of a half.
half() { local rc=0; SERVEGATE_TEST_PHASE=$1 python -m pytest "${@:2}" || rc=$?; [ "$rc" = 5 ] && rc=0; return "$rc"; }
status=0
echo "== pytest: all but the timed tests, on $workers workers"
half untimed -n "$workers" --dist loadfile --durations=25 "$@" || status=$?
echo "== pytest: the timed tests, alone in one process"
half timed -p no:xdist --durations=25 "$@" || status=$((status ? status : $?))
exit "$status"
