"""`baseline: {launch: …, shared: node}` without `--ray`: one machine is one node, so the baseline
(the reference engine) is launched once for the whole local run, every entry is judged against
it, and it is stopped at the end. Counted from the store and the logs, never a mock. (On a Ray
cluster: tests/integration/test_matrix_ray.py, -m ray.)"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pytest
import yaml
from tests.integration.conftest import require_engine, run_servegate
from tests.integration.test_matrix_ray import _llama, _marked

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(600)]


def _matrix(tmp_path: Path, shared: str, mark: str) -> Path:
    launch = {"command": _llama(), "env": {"SERVEGATE_TEST_MARK": mark}}
    spec = {
        "baseline": {"launch": launch, "shared": shared},
        "settings": {"gates": ["startup"], "run_dir": str(tmp_path / "runs")},
        "entries": [
            {"name": "mmap-on", "launch": {"command": _llama()}},
            {"name": "mmap-off", "launch": {"command": _llama("--use_mmap", "false")}},
        ],
    }
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _baseline_pids(db: Path) -> dict[str, int]:
    """Each entry's run and the pid of the baseline launch its stored report records."""
    with sqlite3.connect(db) as conn:
        rows = list(conn.execute("select name, report_json from runs"))
    return {name: int(json.loads(report)["baseline"]["launch"]["pid"]) for name, report in rows}


def test_a_shared_baseline_is_launched_once_for_a_local_run_and_stopped_at_the_end(
    tmp_path: Path,
) -> None:
    require_engine()
    mark = uuid.uuid4().hex
    path = _matrix(tmp_path, "node", mark)
    out, db = tmp_path / "matrix.json", tmp_path / "runs.db"
    proc = run_servegate("matrix", str(path), "--db", str(db), "--json", str(out), "--quiet")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    rows = {r["entry"]: r for r in json.loads(out.read_text())}
    assert {n: r["verdict"] for n, r in rows.items()} == {"mmap-on": "pass", "mmap-off": "pass"}
    pids = _baseline_pids(db)
    assert sorted(pids) == ["matrix mmap-off", "matrix mmap-on"]
    [pid] = set(pids.values())  # one launch, both entries judged against it
    [log] = (tmp_path / "runs").glob("*-shared-baseline-*/baseline.log")
    # Each entry's own run folder holds its candidate's log only.
    assert not list((tmp_path / "runs").glob("*[0-9]/baseline.log"))
    assert {r["baseline"]["pid"] for r in rows.values()} == {pid}
    assert {r["baseline"]["log"] for r in rows.values()} == {str(log)}
    assert not Path(f"/proc/{pid}").exists()
    assert _marked(mark) == []


def test_without_shared_node_each_entry_still_launches_its_own_baseline(tmp_path: Path) -> None:
    require_engine()
    mark = uuid.uuid4().hex
    path = _matrix(tmp_path, "entry", mark)
    db = tmp_path / "runs.db"
    proc = run_servegate("matrix", str(path), "--db", str(db), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert len(set(_baseline_pids(db).values())) == 2
    assert len(list((tmp_path / "runs").glob("*/baseline.log"))) == 2
    assert _marked(mark) == []
