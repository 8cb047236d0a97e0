"""`servegate matrix FILE --ray ADDRESS` on a real local Ray cluster: a head and a worker node
on 127.0.0.1 (tests/integration/ray_cluster.py), one `fake_gpu` each standing in for a GPU,
entries that launch the reference engine on the node Ray chose, every run in one PostgreSQL
store. Deselected by default (minutes: a cluster start-up and engine launches); run with
`bash scripts/test.sh -m ray`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, text
from tests.integration.conftest import require_engine, run_servegate
from tests.integration.ray_cluster import LocalRayCluster, local_ray_cluster

from servegate.engine import RunningEngine
from servegate.store.writer import open_engine

pytestmark = [pytest.mark.ray, pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(600)]

ONE_GPU = {"cpus": 1, "custom": {"fake_gpu": 1}}


def _llama(*extra: str) -> list[str]:
    """The reference engine's own server command line, its port left to servegate."""
    from servegate.engine.launch import llama_command
    from servegate.engine.model import shipped_model_path

    argv = llama_command(shipped_model_path(), 1, tuple(extra))
    argv[argv.index("--port") + 1] = "{port}"
    return [sys.executable, "-m", "servegate.engine.llama_server", *argv[3:]]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    """A head and a worker node, one fake GPU each."""
    require_engine()
    folder = tmp_path_factory.mktemp("ray")
    with local_ray_cluster(folder, head_cpus=1, head_resources={"fake_gpu": 1}) as cluster:
        cluster.add_node("worker", cpus=1, resources={"fake_gpu": 1})
        yield cluster


def _matrix(
    tmp_path: Path,
    baseline: str,
    entries: list[dict[str, Any]],
    settings: dict[str, Any] | None = None,
    baseline_block: dict[str, Any] | None = None,
) -> Path:
    path = tmp_path / "matrix.yaml"
    settings = settings or {"gates": ["startup"], "categories": ["canary"]}
    spec = {"baseline": baseline_block or {"url": baseline}, "settings": settings,
            "entries": entries}  # fmt: skip
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    return {r["entry"]: r for r in json.loads(out.read_text())}


def _runs(db: str) -> list[tuple[str, str, str | None, int]]:
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            query = text("select name, state, verdict, attempt from runs order by name")
            return [tuple(r) for r in conn.execute(query)]  # type: ignore[misc]
    finally:
        engine.dispose()


def _marked(mark: str) -> list[int]:
    """The processes (engines and their guards) whose environment carries `mark`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                environ = (proc / "environ").read_bytes()
            except OSError:
                continue
            if f"SERVEGATE_TEST_MARK={mark}".encode() in environ.split(b"\0"):
                found.append(int(proc.name))
    return found


def _terminal_signals() -> None:
    # A test runner started as a background job ignores SIGINT, and its children inherit that:
    # the driver gets Ctrl-C as in a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _driver(path: Path, address: str, db: str, out: Path) -> subprocess.Popen[str]:
    """`servegate matrix --ray` in the background, as a user starts it in a terminal."""
    return subprocess.Popen(
        [sys.executable, "-m", "servegate", "matrix", str(path), "--ray", address, "--db", db,
         "--json", str(out), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_terminal_signals,
    )  # fmt: skip


def _running_runs(db: str, count: int, timeout_s: float = 240) -> list[tuple[str, int]]:
    """Wait until `count` runs are running (their engines launched and answering): (id, pid)."""
    engine = open_engine(db)  # the schema, made here when the driver has not made it yet
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                query = text("select id, pid from runs where state = 'running'")
                rows = [(str(i), int(p)) for i, p in conn.execute(query)]
            if len(rows) >= count:
                return rows
            time.sleep(1)
    finally:
        engine.dispose()
    raise AssertionError(f"{count} running run(s) not seen within {timeout_s:g} s")


def _wait_gone(mark: str, timeout_s: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(1)
    return left


# First, with a cluster of its own: the module's two nodes are not started yet.
def test_a_node_lost_mid_entry_finishes_on_another_node_and_is_recorded_once(
    clean_engine: RunningEngine, postgres_url: str, tmp_path: Path
) -> None:
    require_engine()
    mark = uuid.uuid4().hex
    launch = {"command": _llama(), "env": {"SERVEGATE_TEST_MARK": mark}}
    path = _matrix(tmp_path, clean_engine.base_url, [
        {"name": "lost", "launch": launch, "resources": ONE_GPU},
    ], settings={"gates": ["startup", "golden"], "categories": ["canary"]})  # fmt: skip
    out = tmp_path / "matrix.json"
    # The head has no fake GPU: the entry runs on a worker, and another worker can take it.
    with local_ray_cluster(tmp_path, head_cpus=1, head_resources={}) as cluster:
        cluster.add_node("w1", cpus=1, resources={"fake_gpu": 1})
        cluster.add_node("w2", cpus=1, resources={"fake_gpu": 1})
        driver = _driver(path, cluster.address, postgres_url, out)
        try:
            [(run_id, pid)] = _running_runs(postgres_url, 1)
            lost = cluster.node_of(pid)
            assert lost in ("w1", "w2")
            cluster.kill_node(lost)
            _, stderr = driver.communicate(timeout=400)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    assert "Traceback" not in stderr, stderr
    assert driver.returncode == 0, stderr
    [row] = json.loads(out.read_text())
    assert (row["entry"], row["verdict"], row["run_id"]) == ("lost", "pass", run_id)
    # Recorded once: the same run, resumed as its second attempt on the other node.
    assert [(s, v, a) for _, s, v, a in _runs(postgres_url)] == [("finished", "pass", 2)]
    assert _wait_gone(mark) == []


def _shared_matrix(tmp_path: Path, mark: str) -> Path:
    """Two entries, one fake GPU each, and a baseline (the reference engine, its processes
    marked) launched once per node."""
    baseline = {"launch": {"command": _llama(), "env": {"SERVEGATE_TEST_MARK": mark}},
                "shared": "node"}  # fmt: skip
    return _matrix(tmp_path, "unused", [
        {"name": "mmap-on", "launch": {"command": _llama()}, "resources": ONE_GPU},
        {"name": "mmap-off", "launch": {"command": _llama("--use_mmap", "false")},
         "resources": ONE_GPU},
    ], settings={"gates": ["startup"], "run_dir": str(tmp_path / "runs")},
       baseline_block=baseline)  # fmt: skip


def _baseline_launches(db: str) -> dict[str, int]:
    """From the store: each entry's run, and the pid of the baseline launch it was judged
    against (the launch its report's baseline fingerprint records)."""
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            rows = list(conn.execute(text("select name, report_json from runs")))
    finally:
        engine.dispose()
    return {
        str(name).split(" [")[0]: int(json.loads(report)["baseline"]["launch"]["pid"])
        for name, report in rows
    }


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


# Also with a cluster of its own, one node with two fake GPUs: both entries run there at once.
def test_two_entries_on_one_node_share_one_baseline_launch_stopped_at_the_end(
    postgres_url: str, tmp_path: Path
) -> None:
    require_engine()
    mark = uuid.uuid4().hex
    path = _shared_matrix(tmp_path, mark)
    out = tmp_path / "matrix.json"
    with local_ray_cluster(tmp_path, head_cpus=2, head_resources={"fake_gpu": 2}) as cluster:
        proc = run_servegate("matrix", str(path), "--ray", cluster.address, "--db", postgres_url,
                             "--json", str(out), "--quiet")  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    rows = _rows(out)
    assert {n: r["verdict"] for n, r in rows.items()} == {"mmap-on": "pass", "mmap-off": "pass"}
    # Both ran on the one node, against one baseline launch: the store's reports name one pid,
    # and one baseline log was written.
    launches = _baseline_launches(postgres_url)
    assert sorted(launches) == ["matrix mmap-off", "matrix mmap-on"]
    [pid] = set(launches.values())
    logs = sorted((tmp_path / "runs").glob("*-shared-baseline-*/baseline.log"))
    assert len(logs) == 1, logs
    # Each row says which baseline server it was judged against: its node's, at one URL.
    assert {(r["node"], r["baseline"]["node"], r["baseline"]["url"], r["baseline"]["pid"])
            for r in rows.values()} == {(rows["mmap-on"]["node"], rows["mmap-on"]["node"],
                                         rows["mmap-on"]["baseline"]["url"], pid)}  # fmt: skip
    assert rows["mmap-on"]["baseline"]["log"] == str(logs[0])
    # Stopped at the end: its pid gone, no marked process (engine or guard) left.
    assert not _alive(pid)
    assert _wait_gone(mark) == []


def test_each_entry_runs_as_a_ray_task_on_a_node_with_its_resources_and_is_stored_once(
    two_nodes: LocalRayCluster, clean_engine: RunningEngine, postgres_url: str, tmp_path: Path
) -> None:
    path = _matrix(tmp_path, clean_engine.base_url, [
        {"name": "mmap-on", "launch": {"command": _llama()}, "resources": ONE_GPU},
        {"name": "mmap-off", "launch": {"command": _llama("--use_mmap", "false")},
         "resources": ONE_GPU},
        # tp 4 asks for 4 GPUs and no node has one: reported as not run, never waited for.
        {"name": "tp4", "launch": {"command": _llama()}, "tp": 4},
    ])  # fmt: skip
    out = tmp_path / "matrix.json"
    t0 = time.monotonic()
    proc = run_servegate("matrix", str(path), "--ray", two_nodes.address, "--db", postgres_url,
                         "--json", str(out), "--placement-timeout", "5",
                         "--quiet")  # fmt: skip
    took = time.monotonic() - t0
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr  # an entry was not run
    rows = _rows(out)
    assert {name: r["verdict"] for name, r in rows.items()} == {
        "mmap-on": "pass", "mmap-off": "pass", "tp4": None,
    }  # fmt: skip
    assert rows["tp4"]["error"] == (
        "not run: no node of the Ray cluster could place it within 5 s (1 CPU, 4 GPU asked; "
        "2 node(s) alive: 1 CPU, 1 fake_gpu; 1 CPU, 1 fake_gpu)"
    ), rows["tp4"]["error"]
    # One fake GPU per node: the two entries ran side by side, one on each node.
    assert rows["mmap-on"]["node"] != rows["mmap-off"]["node"]
    print(f"two entries on two nodes in {took:.1f} s:",
          {n: r.get("seconds") for n, r in rows.items()})  # fmt: skip
    # Each entry is one run in the shared store, named after the entry and this matrix run.
    runs = _runs(postgres_url)
    assert [(n.split(" [")[0], s, v, a) for n, s, v, a in runs] == [
        ("matrix mmap-off", "finished", "pass", 1),
        ("matrix mmap-on", "finished", "pass", 1),
    ]
    assert {r["run_id"] for r in rows.values() if r["run_id"]} == {
        r for r in _run_ids(postgres_url)
    }
    # The same table from the store alone (`--collect`, as while it runs): the finished entries'
    # verdicts, and the entry that never ran as not started.
    matrix_id = runs[0][0].split("[ray ", 1)[1].rstrip("]")
    collected = run_servegate("matrix", str(path), "--collect", matrix_id, "--db", postgres_url,
                              "--json", str(tmp_path / "collected.json"), "--quiet")  # fmt: skip
    assert collected.returncode == 3, collected.stderr  # tp4 has no verdict
    again = _rows(tmp_path / "collected.json")
    assert {n: (r["verdict"], r["run_id"]) for n, r in again.items()} == {
        n: (r["verdict"], r["run_id"]) for n, r in rows.items()
    }
    assert again["tp4"]["error"] == "not started"


def test_entries_on_two_nodes_start_one_shared_baseline_each_on_their_own_node(
    two_nodes: LocalRayCluster, postgres_url: str, tmp_path: Path
) -> None:
    mark = uuid.uuid4().hex
    path = _shared_matrix(tmp_path, mark)
    out = tmp_path / "matrix.json"
    proc = run_servegate("matrix", str(path), "--ray", two_nodes.address, "--db", postgres_url,
                         "--json", str(out), "--quiet")  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    rows = _rows(out)
    assert {n: r["verdict"] for n, r in rows.items()} == {"mmap-on": "pass", "mmap-off": "pass"}
    assert rows["mmap-on"]["node"] != rows["mmap-off"]["node"]  # one fake GPU per node
    # One launch per node, each entry judged against its own node's.
    launches = _baseline_launches(postgres_url)
    assert len(set(launches.values())) == 2, launches
    assert len(list((tmp_path / "runs").glob("*-shared-baseline-*/baseline.log"))) == 2
    for name, row in rows.items():
        assert row["baseline"]["node"] == row["node"]
        assert row["baseline"]["pid"] == launches[f"matrix {name}"]
    assert not any(_alive(pid) for pid in launches.values())
    assert _wait_gone(mark) == []


def _run_ids(db: str) -> set[str]:
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            return {str(r[0]) for r in conn.execute(text("select id from runs"))}
    finally:
        engine.dispose()


def test_a_sqlite_store_is_refused_when_the_cluster_has_more_than_one_node(
    two_nodes: LocalRayCluster, tmp_path: Path
) -> None:
    path = _matrix(
        tmp_path, "http://127.0.0.1:9/v1", [{"name": "a", "url": "http://127.0.0.1:8/v1"}]
    )
    proc = run_servegate("matrix", str(path), "--ray", two_nodes.address,
                         "--db", str(tmp_path / "runs.db"))  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "servegate: error: the Ray cluster has 2 nodes and --db is a SQLite file, which only its "
        "own host can write: give a shared database (--db postgresql://…)"
    ]


def test_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    from servegate.engine.process import free_port

    path = _matrix(
        tmp_path, "http://127.0.0.1:9/v1", [{"name": "a", "url": "http://127.0.0.1:8/v1"}]
    )
    proc = run_servegate("matrix", str(path), "--ray", f"127.0.0.1:{free_port()}",
                         "--db", str(tmp_path / "runs.db"), timeout_s=60)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("servegate: error: cannot connect to the Ray cluster at 127.0.0.1:")


@pytest.mark.parametrize("baseline", ["url", "shared-node"])
def test_ctrl_c_cancels_every_task_and_leaves_no_engine_running_on_any_node(
    two_nodes: LocalRayCluster,
    clean_engine: RunningEngine,
    postgres_url: str,
    tmp_path: Path,
    baseline: str,
) -> None:
    mark = uuid.uuid4().hex
    launch = {"command": _llama(), "env": {"SERVEGATE_TEST_MARK": mark}}
    # shared-node: a baseline per node, launched with the same mark, stopped by Ctrl-C too.
    shared = {"launch": launch, "shared": "node"} if baseline == "shared-node" else None
    # The whole golden suite: minutes, so both entries are mid-run when Ctrl-C comes.
    path = _matrix(tmp_path, clean_engine.base_url, [
        {"name": "a", "launch": launch, "resources": ONE_GPU},
        {"name": "b", "launch": launch, "resources": ONE_GPU},
    ], settings={"gates": ["startup", "golden"]}, baseline_block=shared)  # fmt: skip
    driver = _driver(path, two_nodes.address, postgres_url, tmp_path / "matrix.json")
    try:
        running = _running_runs(postgres_url, 2)
        assert {two_nodes.node_of(pid) for _, pid in running} == {"head", "worker"}
        assert len(_marked(mark)) >= 4  # two engines, each under its guard
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode != 0, stderr
    assert "Traceback" not in stderr, stderr
    assert _wait_gone(mark) == []  # no engine left on either node
    listed = run_servegate("runs", "--db", postgres_url, "--json")
    assert sorted(r["state"] for r in json.loads(listed.stdout)) == ["interrupted"] * 2
