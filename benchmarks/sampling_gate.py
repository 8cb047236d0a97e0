"""The sampling gate, measured: controls that must pass and faults that must fail, with repeats.

Starts a clean baseline, then one candidate per row, and runs the real command line
(`servegate gate --gates sampling`) against it, keeping each JSON report:

- controls: the same server as both sides (127.0.0.1 and localhost), two clean servers, and on
  the reference engine the benign `flash-attn` kernel path;
- faults (the fault layer in front of a clean engine): temperature-default, sampled-greedy,
  sampler-defaults, nucleus-narrowed, penalties-stripped, seed-dropped, n-collapsed (the last two
  can only fail against a baseline that reproduces seeds and offers n > 1: not llama.cpp); on
  the reference engine also the `logit-scale` weights (every logit × 0.8: the model itself
  samples as at temperature 1.25, and reports it).

    .venv/bin/python benchmarks/sampling_gate.py --out benchmarks/results/sampling/reference
    .venv/bin/python benchmarks/sampling_gate.py --stock --out benchmarks/results/sampling/stock
    .venv/bin/python benchmarks/sampling_gate.py --table benchmarks/results/sampling/reference

`--vllm PYTHON` runs real vLLM instead (PYTHON: a vLLM venv's python, `bash scripts/setup.sh
vllm`): one server answers as the baseline, and every fault sits in front of that same server
(two minutes a start on 2 cores), its sides taking turns (`sides_at_once: false`: one server
under two names, as same-server); the second server of `two-servers` is started for that row
alone, and so is each of vLLM's harmless paths against the default baseline: `vllm-eager`
(`--enforce-eager`), `vllm-fp32` (`--dtype float32`; the default runs the fp32 weights as bf16)
and `vllm-no-prefix-cache` (`--no-enable-prefix-caching`) — controls that must pass.

`--share X` runs the gate on that share of its plan (`sampling_share`, what `--budget` sets).
`--repeats N` runs each control N times (faults once); `--rows a,b` runs those rows only (a row
named twice runs twice). A row's report is `ROW-K.json` with K the first number not yet in
`--out`, so a later series adds to the earlier one's files. Run it under the shared lock
(`flock /tmp/servegate-heavy.lock …`): each row is one to five minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

# vLLM's harmless paths: a second vLLM with these flags, against the default one.
VLLM_PATHS = {"vllm-eager": ("--enforce-eager",), "vllm-fp32": ("--dtype", "float32"),
              "vllm-no-prefix-cache": ("--no-enable-prefix-caching",)}  # fmt: skip
CONTROLS = ("same-server", "two-servers", "flash-attn", *VLLM_PATHS)
FAULTS = ("temperature-default", "sampled-greedy", "sampler-defaults", "nucleus-narrowed",
          "penalties-stripped", "seed-dropped", "n-collapsed", "logit-scale")  # fmt: skip
FAULT_LAYER = FAULTS[:7]
REFERENCE_ONLY = ("flash-attn", "logit-scale")  # weight and flag variants of our own engine


def _gate(
    baseline: str, candidate: str, out: Path, *, in_turn: bool = False, share: float = 1.0
) -> tuple[int, float]:
    """`in_turn`: the sides take turns (`sides_at_once: false`), for the fault layer in front of
    the baseline's own server: one server under two names, which the gate cannot tell by URL.
    `share` < 1: that share of the sampling plan (`sampling_share`, what `--budget` sets)."""
    t0 = time.perf_counter()
    config: list[str] = []
    settings = ("sides_at_once: false\n" if in_turn else "") + (
        f"sampling_share: {share}\n" if share < 1 else ""
    )
    turns = out.with_suffix(".config.yaml")
    if settings:
        turns.write_text(settings)
        config = ["--config", str(turns)]
    proc = subprocess.run(
        [sys.executable, "-m", "servegate", "gate", *config, "--baseline", baseline,
         "--candidate", candidate, "--gates", "sampling", "--json", str(out), "--no-store",
         "--quiet", "--deadline-s", "180"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if settings:
        turns.unlink()
    if not out.exists():
        raise SystemExit(f"no report from {candidate}: exit {proc.returncode}\n{proc.stderr}")
    return proc.returncode, time.perf_counter() - t0


@contextmanager
def _serving(
    argv: list[str], log: Path, what: str, ready_s: float, grace_s: float
) -> Iterator[str]:
    """`argv` (a server taking `--port`) started, yielded as its …/v1 URL once it answers
    `/models`, stopped by its process group when the block ends."""
    import urllib.request

    from servegate.engine.process import free_port, spawn, stop_group

    port = free_port()
    process = spawn([*argv, "--port", str(port)], log)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + ready_s
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"{what} exited: see {log}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{what} not ready in {ready_s:.0f} s: see {log}") from None
                time.sleep(0.2)
        yield url
    finally:
        stop_group(process, grace_s)


def vllm_server(python: str, log: Path, *flags: str) -> AbstractContextManager[str]:
    """A real vLLM server (servegate.engine.vllm_model serve, `flags` passed on to vLLM) until
    the block ends."""
    argv = [python, "-m", "servegate.engine.vllm_model", "serve", *flags]
    return _serving(argv, log, "vLLM", ready_s=900, grace_s=30.0)


def fault_layer(fault: str, upstream: str, log: Path) -> AbstractContextManager[str]:
    """The fault layer in front of `upstream` (…/v1), once it relays `/models`."""
    argv = [sys.executable, "-m", "servegate.engine.faults", fault,
            "--upstream", upstream.removesuffix("/v1")]  # fmt: skip
    return _serving(argv, log, f"fault proxy {fault}", ready_s=60, grace_s=5.0)


@contextmanager
def _candidate(
    row: str, baseline_url: str, stock: bool, vllm: str | None, logs: Path
) -> Iterator[str]:
    from servegate.engine import start_engine

    if row == "same-server":  # one process under two names: pair.at_once is off
        yield baseline_url.replace("127.0.0.1", "localhost")
        return
    if vllm is not None:
        if row == "two-servers" or row in VLLM_PATHS:
            flags = VLLM_PATHS.get(row, ())
            with vllm_server(vllm, logs / f"vllm-candidate-{row}.log", *flags) as url:
                yield url
        else:
            with fault_layer(row, baseline_url, logs / f"{row}.log") as url:
                yield url
        return
    variant = row if row in REFERENCE_ONLY else "clean"
    fault = row if row in FAULT_LAYER else None
    with start_engine(variant, fault=fault, stock=stock) as engine:
        yield engine.base_url


@contextmanager
def baseline_server(stock: bool, vllm: str | None, logs: Path) -> Iterator[str]:
    from servegate.engine import start_engine

    if vllm is not None:
        with vllm_server(vllm, logs / "vllm-baseline.log") as url:
            yield url
        return
    with start_engine("clean", stock=stock) as engine:
        yield engine.base_url


def series_logs(out_dir: Path) -> Path:
    """`out_dir/logs/<UTC start>/`: a series' server logs, kept beside the earlier series'."""
    logs = out_dir / "logs" / time.strftime("%Y-%m-%dT%H%M", time.gmtime())
    logs.mkdir(parents=True, exist_ok=True)
    return logs


def next_path(out_dir: Path, row: str) -> Path:
    """`out_dir/ROW-K.json`, K the first number from 1 not taken: repeats never overwrite."""
    k = 1
    while (out_dir / f"{row}-{k}.json").exists():
        k += 1
    return out_dir / f"{row}-{k}.json"


def run(
    out_dir: Path,
    rows: tuple[str, ...],
    repeats: int,
    *,
    stock: bool,
    vllm: str | None = None,
    share: float = 1.0,
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    logs = series_logs(out_dir)
    with baseline_server(stock, vllm, logs) as baseline_url:
        for row in rows:
            for _ in range(repeats if row in CONTROLS else 1):
                path = next_path(out_dir, row)
                # In front of one vLLM, a fault row's two sides are one server (batched together
                # they are not batch-invariant): they take turns, as same-server's do.
                in_turn = vllm is not None and row in FAULT_LAYER
                with _candidate(row, baseline_url, stock, vllm, logs) as url:
                    code, wall_s = _gate(baseline_url, url, path, in_turn=in_turn, share=share)
                report = json.loads(path.read_text())
                report["_bench"] = {"exit_code": code, "wall_s": round(wall_s, 1),
                                    "finished": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
                path.write_text(json.dumps(report, indent=1))
                print(line(path.stem, report), flush=True)


def _sampling(report: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in report["gates"] if g["name"] == "sampling")


def _p(check: dict[str, Any]) -> str:
    """The check's candidate value: `p 0.3 (4 prompt(s), 384 draws)` → `0.3`."""
    text = str(check.get("candidate", "-"))
    return text.split(" ")[1] if text.startswith("p ") else text


def line(row: str, report: dict[str, Any]) -> str:
    """One Markdown row: verdict, failed checks with the candidate's p, the headline checks' p,
    draws (both sides), seconds."""
    gate = _sampling(report)
    checks = {c["name"]: c for c in gate["checks"]}
    failed = [f"{n} ({_p(c)})" for n, c in checks.items() if c["outcome"] == "fail"]
    gaps = [n for n, c in checks.items() if c["outcome"] == "not-measured"]
    m = gate["metrics"]
    head = ", ".join(
        f"{n} {_p(checks[n])}" for n in ("reference_fit", "homogeneity") if n in checks
    )
    draws = (m.get("requests_baseline") or 0) + (m.get("requests_candidate") or 0)
    bench = report.get("_bench", {})
    return (
        f"| {row} | {gate['status'].upper()} (exit {bench.get('exit_code', '-')}) | "
        f"{'; '.join(failed) or '-'} | {head} | {', '.join(gaps) or '-'} | "
        f"{m.get('candidate_logprobs_mode', '-')} | {draws} | {m.get('seconds', '-')} | "
        f"{bench.get('wall_s', '-')} |"
    )


HEADER = (
    "| row | verdict | failed checks (candidate p) | reference fit p, homogeneity p | "
    "not measured | logprobs | requests (both sides) | gate s | wall s |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def table(folder: Path) -> None:
    print(HEADER)
    for path in sorted(folder.glob("*.json")):
        print(line(path.stem, json.loads(path.read_text())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--table", type=Path)
    parser.add_argument("--stock", action="store_true")
    parser.add_argument("--vllm", default=None, help="a vLLM venv's python")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", default=None, help="comma-separated rows (default: all)")
    parser.add_argument("--share", type=float, default=1.0, help="sampling_share (default 1)")
    args = parser.parse_args()
    if args.table:
        table(args.table)
        return
    if args.out is None:
        parser.error("--out or --table")
    rows = tuple(args.rows.split(",")) if args.rows else (*CONTROLS, *FAULTS)
    if args.stock or args.vllm:
        rows = tuple(r for r in rows if r not in REFERENCE_ONLY)
    if not args.vllm:
        rows = tuple(r for r in rows if r not in VLLM_PATHS)
    print(HEADER, flush=True)
    run(args.out, rows, args.repeats, stock=args.stock, vllm=args.vllm, share=args.share)


if __name__ == "__main__":
    main()
