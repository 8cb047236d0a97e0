"""A 4-entry `servegate matrix --ray` on a local cluster of two nodes, its baseline a `launch`
block: launched by each entry (`shared: entry`, the default) vs once per node (`shared: node`).

The entries and the cluster are benchmarks/matrix_ray.py's: each entry launches the reference
engine (llama.cpp, SmolLM2) as its candidate, one `fake_gpu` per node and per entry, so two
entries run at once, one per node; gates startup and golden (canary category); the store a
throwaway PostgreSQL. The baseline is the reference engine too. Reported per mode: wall time of
`servegate matrix`, the baseline launches (the distinct baseline pids the entries' stored
reports record, and the baseline logs written), each entry's task time and node, the verdicts.

    flock /tmp/servegate-heavy.lock .venv/bin/python benchmarks/matrix_ray_baseline.py \\
        --out benchmarks/results/matrix-ray-baseline
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matrix_ray import ENTRIES, _llama, _load, _servegate  # noqa: E402
from tests.integration.ray_cluster import local_ray_cluster  # noqa: E402


def _matrix(path: Path, shared: str, run_dir: Path) -> None:
    entries = [
        {"name": name, "launch": {"command": _llama(*extra)},
         "resources": {"cpus": 1, "custom": {"fake_gpu": 1}}}
        for name, extra in ENTRIES
    ]  # fmt: skip
    spec = {"baseline": {"launch": {"command": _llama()}, "shared": shared},
            "settings": {"gates": ["startup", "golden"], "categories": ["canary"],
                         "run_dir": str(run_dir)},
            "entries": entries}  # fmt: skip
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def _baseline_pids(db: str, run_ids: list[str]) -> dict[str, int]:
    """The baseline launch each run's stored report records, by run id."""
    engine = sa.create_engine(db)
    try:
        with engine.connect() as conn:
            query = sa.text("select id, report_json from runs where id in :ids").bindparams(
                sa.bindparam("ids", expanding=True)
            )
            return {
                str(i): int(json.loads(r)["baseline"]["launch"]["pid"])
                for i, r in conn.execute(query, {"ids": run_ids})
            }
    finally:
        engine.dispose()


def _compute_s(runs: Path, log: str) -> float:
    total_ms = 0.0
    for path in runs.glob(f"**/{log}"):
        for line in path.read_text(errors="replace").splitlines():
            if "llama_perf_context_print" in line and "total time" in line:
                total_ms += float(line.split("=", 1)[1].split("ms", 1)[0])
    return round(total_ms / 1000, 1)


def _one(out: Path, shared: str, address: str, db: str) -> dict[str, Any]:
    folder = out / shared
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "matrix.yaml"
    _matrix(path, shared, folder / "runs")
    load = _load()
    wall, done = _servegate("matrix", str(path), "--ray", address, "--db", db,
                            "--json", str(folder / "ray.json"))  # fmt: skip
    rows = json.loads((folder / "ray.json").read_text())
    pids = _baseline_pids(db, [r["run_id"] for r in rows if r["run_id"]])
    return {
        "wall_s": round(wall, 1), "exit": done.returncode, "load_before": load,
        "verdicts": {r["entry"]: r["verdict"] for r in rows},
        "gates": {r["entry"]: r["gates"] for r in rows},
        "task_s": {r["entry"]: r["seconds"] for r in rows},
        "node": {r["entry"]: r["node"] for r in rows},
        "baseline_launches_in_store": len(set(pids.values())),
        "baseline_logs": len(list((folder / "runs").glob("**/baseline.log"))),
        "baseline_ready_s": sorted({r["baseline"]["ready_s"] for r in rows if r.get("baseline")}),
        # The candidates' own compute time (llama.cpp's `total time` lines), the same work in
        # both modes: how loaded the shared machine was meanwhile.
        "candidate_compute_s": _compute_s(folder / "runs", "candidate.log"),
        "baseline_compute_s": _compute_s(folder / "runs", "baseline.log"),
        "stderr_tail": done.stderr[-1500:],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"entries": [n for n, _ in ENTRIES], "runs": []}
    pg = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "start"],
                        capture_output=True, text=True, check=True)  # fmt: skip
    url, pg_folder = pg.stdout.split()
    try:
        with local_ray_cluster(out / "ray", head_cpus=1,
                               head_resources={"fake_gpu": 1}) as cluster:  # fmt: skip
            cluster.add_node("worker", cpus=1, resources={"fake_gpu": 1})
            for i in range(args.repeats):
                # Alternated (entry, node, node, entry, …): a shared machine's load drifts.
                for shared in ("entry", "node") if i % 2 == 0 else ("node", "entry"):
                    run = {"repeat": i, "shared": shared,
                           **_one(out / f"r{i}", shared, cluster.address, url)}  # fmt: skip
                    print(json.dumps({k: v for k, v in run.items() if k != "stderr_tail"}),
                          flush=True)  # fmt: skip
                    result["runs"].append(run)
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop", pg_folder],
                       check=False)  # fmt: skip
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
