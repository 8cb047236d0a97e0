"""`servegate replay` on sampled traffic, measured: controls that must pass, faults that must fail.

The traffic (written by `traffic`, 96 requests, every one sampled): three requests repeated 20
times each at temperature 0.8 and top_p 0.95 (the openings test's material), and 36 distinct
questions at temperature 0.7 with no seed — the mix a shadow of a chat product sees. Rows:

- controls: `same-server` (one process under two names), `two-servers` (a second clean
  process), `flash-attn` (the benign kernel path);
- faults: the fault layer in front of a clean engine (`sampled-greedy`, `temperature-default`:
  every sampled temperature becomes 0.7), and the `mixed-dtype` weights (garbage at any
  temperature).

    flock /tmp/servegate-heavy.lock .venv/bin/python benchmarks/replay_sampled.py \\
        --out benchmarks/results/replay-sampled --repeats 3
    .venv/bin/python benchmarks/replay_sampled.py --table benchmarks/results/replay-sampled

`--stock` runs every row on the stock llama-cpp-python server (`bash scripts/setup.sh stock`);
`--vllm PYTHON` on real vLLM (PYTHON: a vLLM venv's python), as `sampling_gate.py` does: one
vLLM is the baseline, the fault layer sits in front of it, `two-servers` and `mixed-dtype`
(`serve --variant mixed-dtype`) start a vLLM of their own, and `flash-attn` (a llama.cpp flag)
is left out. A row's output is `ROW-K.json`, K the first number not yet in `--out`.

Each row keeps `servegate replay --json`'s output; the table shows the verdict, the failed
checks with their evidence, each sampled check's p, and the seconds.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CONTROLS = ("same-server", "two-servers", "flash-attn")
FAULTS = ("sampled-greedy", "temperature-default", "mixed-dtype")
FAULT_LAYER = ("sampled-greedy", "temperature-default")
REPEATS = 20  # per repeated request: 12 proved too few to show a collapse on diverse openings
REPEATED = (
    "Name a city in Europe, then say why.",
    "Write one sentence about the sea.",
    "Suggest a name for a cat.",
)
QUESTIONS = (
    "What is the capital of France?", "Why is the sky blue?", "How do bees make honey?",
    "What is 12 times 12?", "Name three primary colours.", "What does a compiler do?",
    "How many legs does a spider have?", "What is the boiling point of water?",
    "Give me a tip for sleeping well.", "What is photosynthesis?", "Who wrote Hamlet?",
    "What is the largest ocean?", "How does a bicycle stay upright?", "What is a prime number?",
    "Describe a rainbow.", "What is the speed of light?", "Why do leaves fall in autumn?",
    "What is an atom?", "How do you make tea?", "What is the moon made of?",
    "Why do cats purr?", "What is gravity?", "Name a famous painter.", "What is a noun?",
    "How far is the sun?", "What do pandas eat?", "What is a volcano?", "Why is sea water salty?",
    "What is the tallest mountain?", "What is a haiku?", "How do plants drink water?",
    "What is a galaxy?", "Why do we dream?", "What is an island?", "What is rain?",
    "What is the opposite of hot?",
)  # fmt: skip


def traffic() -> list[dict[str, Any]]:
    """The sampled traffic, in a fixed order (repeats interleaved with the questions)."""

    def chat(text: str, temperature: float, max_tokens: int, **extra: Any) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": text}], "temperature": temperature,
                "max_tokens": max_tokens, **extra}  # fmt: skip

    repeated = [chat(p, 0.8, 24, top_p=0.95) for _ in range(REPEATS) for p in REPEATED]
    distinct = [chat(q, 0.7, 32) for q in QUESTIONS]
    out: list[dict[str, Any]] = []
    for i in range(max(len(repeated), len(distinct))):
        out.extend(x[i] for x in (repeated, distinct) if i < len(x))
    return out


def _replay(baseline: str, candidate: str, traffic_file: Path, out: Path) -> tuple[int, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "servegate", "replay", str(traffic_file), "--baseline", baseline,
         "--candidate", candidate, "--json", str(out), "--timeout-s", "120"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if not out.exists():
        raise SystemExit(f"no output from {candidate}: exit {proc.returncode}\n{proc.stderr}")
    return proc.returncode, time.perf_counter() - t0


@contextmanager
def _candidate(
    row: str, baseline_url: str, logs: Path, stock: bool, vllm: str | None
) -> Iterator[str]:
    from sampling_gate import fault_layer, vllm_server  # this folder: the script's own

    from servegate.engine import start_engine

    if row == "same-server":
        yield baseline_url.replace("127.0.0.1", "localhost")
        return
    if row in FAULT_LAYER:
        with fault_layer(row, baseline_url, logs / f"{row}.log") as url:
            yield url
        return
    variant = "clean" if row == "two-servers" else row
    if vllm is not None:
        flags = () if variant == "clean" else ("--variant", variant)
        with vllm_server(vllm, logs / f"vllm-candidate-{row}.log", *flags) as url:
            yield url
        return
    with start_engine(variant, stock=stock) as engine:
        yield engine.base_url


def run(
    out_dir: Path, rows: tuple[str, ...], repeats: int, *, stock: bool, vllm: str | None = None
) -> None:
    from sampling_gate import baseline_server, next_path, series_logs

    out_dir.mkdir(parents=True, exist_ok=True)
    logs = series_logs(out_dir)
    traffic_file = out_dir / "traffic.jsonl"
    traffic_file.write_text("".join(json.dumps(r) + "\n" for r in traffic()))
    with baseline_server(stock, vllm, logs) as baseline_url:
        for row in rows:
            for _ in range(repeats if row in CONTROLS else 1):
                path = next_path(out_dir, row)
                with _candidate(row, baseline_url, logs, stock, vllm) as url:
                    code, wall_s = _replay(baseline_url, url, traffic_file, path)
                data = json.loads(path.read_text())
                data["_bench"] = {"exit_code": code, "wall_s": round(wall_s, 1),
                                  "finished": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
                path.write_text(json.dumps(data, indent=1))
                print(line(path.stem, data), flush=True)


def _p(limit: str) -> str:
    """`fails at McNemar one-sided p < 0.001 (here p 0.5); …` → `0.5`."""
    found = re.search(r"\(here p ([^)]+)\)", limit)
    return found.group(1) if found else "-"


SAMPLED = ("sampled_degenerate", "sampled_empty", "sampled_finish", "sampled_length",
           "sampled_symbols", "sampled_openings")  # fmt: skip


def line(row: str, data: dict[str, Any]) -> str:
    summary = data["summary"]
    checks = {c["name"]: c for c in summary["checks"]}
    failed = [n for n, c in checks.items() if c["outcome"] == "fail"]
    ps = " / ".join(
        _p(checks[n]["limit"]) if checks.get(n, {}).get("outcome") in ("pass", "fail") else "nm"
        for n in SAMPLED
    )
    bench = data.get("_bench", {})
    return (
        f"| {row} | {summary['verdict'].upper()} (exit {bench.get('exit_code', '-')}) | "
        f"{', '.join(failed) or '-'} | {ps} | {summary['sampled_pairs']} | "
        f"{sum(1 for p in data['pairs'] if p['candidate_degenerate'])} | "
        f"{bench.get('wall_s', '-')} |"
    )


HEADER = (
    "| row | verdict | failed checks | p: degenerate / empty / finish / length / symbols / "
    "openings | sampled pairs | per-pair degenerate (not judged) | wall s |\n"
    "|---|---|---|---|---|---|---|"
)


def table(folder: Path) -> None:
    print(HEADER)
    for path in sorted(folder.glob("*.json")):
        print(line(path.stem, json.loads(path.read_text())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/replay-sampled"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", default=None, help="comma-separated rows (default: all)")
    parser.add_argument("--table", type=Path, default=None, help="print a folder's table")
    parser.add_argument("--stock", action="store_true", help="the stock llama-cpp-python server")
    parser.add_argument("--vllm", default=None, help="a vLLM venv's python: real vLLM")
    args = parser.parse_args()
    if args.table is not None:
        table(args.table)
        return
    rows = tuple(args.rows.split(",")) if args.rows else CONTROLS + FAULTS
    if args.vllm:
        rows = tuple(r for r in rows if r != "flash-attn")  # a llama.cpp flag
    run(args.out, rows, args.repeats, stock=args.stock, vllm=args.vllm)


if __name__ == "__main__":
    main()
