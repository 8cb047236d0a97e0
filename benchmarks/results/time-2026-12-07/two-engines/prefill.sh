#!/usr/bin/env bash
# usage: [OUT=DIR] [OMP_WAIT_POLICY=...] prefill.sh [ENGINE FLAGS...]: two reference engines on loopback
# (the flags added to both); per round, one 2,212-token chat prompt (max_tokens 1) alone on each,
# then one on both at once, then a 64-token answer on both at once. Engine logs in OUT (default .).
PY=${PY:-.venv/bin/python}
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pa=$(port); pb=$(port)
$PY -m servegate.engine.llama_server --reference --port $pa "$@" > "${OUT:-.}/engine-a.log" 2>&1 & A=$!
$PY -m servegate.engine.llama_server --reference --port $pb "$@" > "${OUT:-.}/engine-b.log" 2>&1 & B=$!
trap 'kill $A $B; wait $A $B 2>/dev/null' EXIT
for _ in $(seq 120); do curl -sf http://127.0.0.1:$pa/v1/models >/dev/null && curl -sf http://127.0.0.1:$pb/v1/models >/dev/null && break; sleep 1; done
$PY - $pa $pb <<'PYEOF'
import sys, time, json, urllib.request, concurrent.futures as cf
pa, pb = sys.argv[1:3]
words = ("the quick brown fox jumps over the lazy dog and then " * 200)
def send(port, salt, max_tokens=1, prompt=None):
    body = json.dumps({"messages":[{"role":"user","content": prompt or f"{salt} {words}"}],"max_tokens":max_tokens,"temperature":0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type":"application/json"})
    t=time.perf_counter(); r=json.loads(urllib.request.urlopen(req, timeout=300).read()); return time.perf_counter()-t, r["usage"]["prompt_tokens"]
for rnd in range(3):
    a = send(pa, f"a{rnd}"); b = send(pb, f"b{rnd}")
    with cf.ThreadPoolExecutor(2) as ex:
        fa, fb = ex.submit(send, pa, f"c{rnd}"), ex.submit(send, pb, f"d{rnd}")
        both = (fa.result(), fb.result())
    with cf.ThreadPoolExecutor(2) as ex:
        ga, gb = ex.submit(send, pa, "x", 64, f"Write a story {rnd}"), ex.submit(send, pb, "y", 64, f"Write a story {rnd}")
        dec = (ga.result()[0], gb.result()[0])
    print(f"round {rnd}: alone a {a[0]:.1f}s b {b[0]:.1f}s ({a[1]} tok); both at once {both[0][0]:.1f}s {both[1][0]:.1f}s; 64-token decode both at once {dec[0]:.1f}s {dec[1]:.1f}s", flush=True)
PYEOF
