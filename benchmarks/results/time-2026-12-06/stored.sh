#!/usr/bin/env bash
# usage: stored.sh SRC_ROOT OUT_DIR [VARIANT ...]: a clean reference engine recorded as the stored
# baseline `ref` (`servegate baseline record`, timed), its server stopped, then each VARIANT
# (default: clean mixed-dtype flash-attn) started alone and gated against `ref` with the
# correctness gates a stored baseline answers. Prints one line per step with its wall seconds.
# ARGS (words) go to both the recording and every gate, e.g. ARGS="--category canary ...".
# REUSE=1 keeps the baseline `ref` already in OUT_DIR/stored.db: only the gates run.
# SERVE (words) goes to every `engine serve`: SERVE=--stock records and gates stock servers.
set -u
read -r -a args <<< "${ARGS:-}"
read -r -a serve_args <<< "${SERVE:-}"
src=$1; out=$2; shift 2
variants=("$@"); [ ${#variants[@]} -eq 0 ] && variants=(clean mixed-dtype flash-attn)
mkdir -p "$out"
export PYTHONPATH="$src/src"
PY=${PY:-/work/main/.venv/bin/python}
db="$out/stored.db"
gates=startup,numerics,embeddings,golden,context
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
serve() {  # serve VARIANT PORT LOG: starts the engine, sets $pid, waits until it answers
  $PY -m servegate engine serve "${serve_args[@]}" --variant "$1" --port "$2" > "$3" 2>&1 & pid=$!
  for _ in $(seq 180); do curl -sf "http://127.0.0.1:$2/v1/models" >/dev/null && return; sleep 1; done
}
stamp() { date +%s.%N; }
if [ "${REUSE:-0}" != 1 ]; then
  p=$(port); serve clean "$p" "$out/engine-baseline.log"; b=$pid
  trap 'kill $b ${c:-} 2>/dev/null' EXIT
  t0=$(stamp)
  $PY -m servegate baseline record --endpoint "http://127.0.0.1:$p/v1" --name ref --db "$db" --quiet --replace "${args[@]}"
  rc=$?; t1=$(stamp)
  echo "record rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/runs.txt"
  kill $b; wait $b 2>/dev/null
fi
trap 'kill ${c:-} 2>/dev/null' EXIT
for v in "${variants[@]}"; do
  p=$(port); serve "$v" "$p" "$out/engine-$v.log"; c=$pid
  t0=$(stamp)
  $PY -m servegate gate --baseline-run ref --candidate "http://127.0.0.1:$p/v1" --gates "$gates" \
    --db "$db" --json "$out/$v.json" --quiet "${args[@]}"
  rc=$?; t1=$(stamp)
  echo "$v rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/runs.txt"
  kill $c; wait $c 2>/dev/null
done
