#!/usr/bin/env bash
# Build servegate's sdist and wheel (`python -m build`: the wheel is built from the sdist, so a
# file the sdist forgets fails here) and check both as a package index would (`twine check
# --strict`), then check the wheel holds the data files servegate reads at run time and that its
# core requirements build nothing (no llama-cpp-python: that is the `engine` extra).
# Prints the wheel's path on stdout. Needs the dev venv (build, twine): bash scripts/setup.sh dev.
# Usage: scripts/package.sh [OUT_DIR]   (default dist/; its older servegate files are replaced)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
VENV=${SERVEGATE_VENV:-.venv}
PY="$VENV/bin/python"
"$PY" -c 'import build, twine' 2>/dev/null || {
  echo "package.sh: build and twine are missing from $VENV: bash scripts/setup.sh dev" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out"/servegate-*.tar.gz "$out"/servegate-*.whl
"$PY" -m build --outdir "$out" . >&2
"$PY" -m twine check --strict "$out"/servegate-*.tar.gz "$out"/servegate-*.whl >&2
wheel=$(ls "$out"/servegate-*-py3-none-any.whl)
"$PY" - "$wheel" <<'PYCHECK'
import sys
import zipfile
from email.parser import Parser

wheel = zipfile.ZipFile(sys.argv[1])
names = set(wheel.namelist())
# Files the code opens at run time (pyproject's package-data): a wheel without them installs
# and then fails on the first gate.
needed = [
    "servegate/py.typed",
    "servegate/probes/suites/default.yaml",
    "servegate/probes/embeddings.yaml",
    "servegate/probes/reference/README.md",
    "servegate/managed/log_patterns.yaml",
    "servegate/store/migrations/env.py",
]
missing = [n for n in needed if n not in names]
missing += [] if any(n.startswith("servegate/engine/templates/") for n in names) else ["engine/templates"]
missing += [] if any(n.startswith("servegate/probes/reference/") and n.endswith(".txt") for n in names) else ["probes/reference/*.txt"]
if missing:
    sys.exit(f"package.sh: the wheel lacks {', '.join(missing)}")
if any(n.startswith(("tests/", "benchmarks/")) for n in names):
    sys.exit("package.sh: the wheel carries tests or benchmarks")
[meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
requires = Parser().parsestr(wheel.read(meta).decode()).get_all("Requires-Dist") or []
core = [r for r in requires if "extra ==" not in r]
compiled = [r for r in core if r.lower().startswith(("llama-cpp-python", "torch", "psycopg", "starlette"))]
if compiled:
    sys.exit(f"package.sh: the core install requires {compiled}; they belong in extras")
PYCHECK
echo "package.sh: built and checked $(ls "$out"/servegate-*)" >&2
echo "$wheel"
