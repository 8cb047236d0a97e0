"""A 4-entry `servegate matrix`: on this machine (entries one after another) vs on a local Ray
cluster of two nodes (`--ray`), the same file, the same verdicts expected.

Each entry launches the reference engine (llama.cpp, SmolLM2) as its candidate against one clean
baseline engine started once; gates startup and golden (canary category). The Ray cluster is the
tests' (tests/integration/ray_cluster.py): a head and a worker node on 127.0.0.1, one `fake_gpu`
each, so two entries run at once, one per node; its store is a throwaway PostgreSQL
(scripts/postgres.sh). Reported: wall time of each command, each entry's run time (from the
store: started_at → finished_at), on Ray each task's own time (`seconds` in the JSON: store
connect, launch, gates) and the overhead Ray adds per entry, (Ray wall − the busiest node's
summed task time) / that node's entries (connect, submit, schedule, collect).

    flock /tmp/servegate-heavy.lock .venv/bin/python benchmarks/matrix_ray.py \\
        --out benchmarks/results/matrix-ray
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.ray_cluster import local_ray_cluster  # noqa: E402

from servegate.engine import start_engine  # noqa: E402
from servegate.engine.launch import llama_command  # noqa: E402
from servegate.engine.model import shipped_model_path  # noqa: E402


def _llama(*extra: str) -> list[str]:
    argv = llama_command(shipped_model_path(), 1, tuple(extra))
    argv[argv.index("--port") + 1] = "{port}"
    return [sys.executable, "-m", "servegate.engine.llama_server", *argv[3:]]


ENTRIES = [
    ("mmap-on-a", ()),
    ("mmap-off-a", ("--use_mmap", "false")),
    ("mmap-on-b", ()),
    ("mmap-off-b", ("--use_mmap", "false")),
]


def _matrix(path: Path, baseline: str) -> None:
    entries = [
        {"name": name, "launch": {"command": _llama(*extra)},
         "resources": {"cpus": 1, "custom": {"fake_gpu": 1}}}
        for name, extra in ENTRIES
    ]  # fmt: skip
    spec = {"baseline": {"url": baseline},
            "settings": {"gates": ["startup", "golden"], "categories": ["canary"]},
            "entries": entries}  # fmt: skip
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def _servegate(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "servegate", *args], capture_output=True,
                          text=True, timeout=1800, check=False)  # fmt: skip
    return time.perf_counter() - t0, done


def _run_times(db: str) -> dict[str, float]:
    """Each run's time in the store, by entry name."""
    engine = sa.create_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("select name, started_at, finished_at from runs"))
            return {
                str(n).split(" [")[0].removeprefix("matrix "):
                    (datetime.fromisoformat(f) - datetime.fromisoformat(s)).total_seconds()
                for n, s, f in rows if f
            }  # fmt: skip
    finally:
        engine.dispose()


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"entries": [n for n, _ in ENTRIES]}
    with start_engine("clean") as baseline:
        path = out / "matrix.yaml"
        _matrix(path, baseline.base_url)
        # Locally: one after another, into SQLite.
        local_db = out / "local.db"
        local_db.unlink(missing_ok=True)
        load = _load()
        wall, done = _servegate("matrix", str(path), "--db", str(local_db),
                                "--json", str(out / "local.json"), "--quiet")  # fmt: skip
        rows = json.loads((out / "local.json").read_text())
        result["local"] = {
            "wall_s": round(wall, 1), "exit": done.returncode, "load_before": load,
            "verdicts": {r["entry"]: r["verdict"] for r in rows},
            "run_s": _run_times(f"sqlite:///{local_db}"),
        }  # fmt: skip
        print("local", result["local"], flush=True)
        # On two Ray nodes, into PostgreSQL.
        pg = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "start"],
                            capture_output=True, text=True, check=True)  # fmt: skip
        url, folder = pg.stdout.split()
        try:
            t0 = time.perf_counter()
            with local_ray_cluster(out / "ray", head_cpus=1,
                                   head_resources={"fake_gpu": 1}) as cluster:  # fmt: skip
                cluster.add_node("worker", cpus=1, resources={"fake_gpu": 1})
                result["ray_cluster_start_s"] = round(time.perf_counter() - t0, 1)
                load = _load()
                wall, done = _servegate("matrix", str(path), "--ray", cluster.address,
                                        "--db", url, "--json", str(out / "ray.json"))  # fmt: skip
            rows = json.loads((out / "ray.json").read_text())
            per_node: dict[str, list[float]] = defaultdict(list)
            for r in rows:
                per_node[r["node"]].append(r["seconds"])
            busiest = max(per_node.values(), key=sum)
            result["ray"] = {
                "wall_s": round(wall, 1), "exit": done.returncode, "load_before": load,
                "verdicts": {r["entry"]: r["verdict"] for r in rows},
                "task_s": {r["entry"]: r["seconds"] for r in rows},
                "node": {r["entry"]: r["node"] for r in rows},
                "run_s": _run_times(url),
                "overhead_per_entry_s": round((wall - sum(busiest)) / len(busiest), 2),
                "stderr_tail": done.stderr[-1500:],
            }  # fmt: skip
            print("ray", result["ray"], flush=True)
        finally:
            subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop", folder],
                           check=False)  # fmt: skip
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
