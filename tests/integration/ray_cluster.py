"""A real local Ray cluster for the tests: a head node and worker nodes, each a `ray start
--block` process on 127.0.0.1 with free ports and the cluster's own temp folder, custom
resources standing in for GPUs. Each node is stopped by its own PID (SIGTERM: `ray start
--block` stops what it started; its reaper does so even after SIGKILL), never by name."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from servegate.engine.process import free_port

RAY = Path(sys.executable).with_name("ray")
START_TIMEOUT_S = 90.0


@dataclass
class LocalRayCluster:
    address: str  # host:port of the head's GCS
    temp_dir: Path
    logs: Path
    nodes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def add_node(self, name: str, *, cpus: float, resources: Mapping[str, float]) -> None:
        """Start a worker node joined to the head; returns once the cluster counts it alive."""
        before = self.alive_nodes()
        self.nodes[name] = _start(self.logs / f"{name}.log", [
            f"--address={self.address}", *_ports(), *_node_args(cpus, resources),
        ])  # fmt: skip
        self.wait_for(before + 1)

    def alive_nodes(self) -> int:
        """How many nodes the head counts alive (asked in a separate driver process)."""
        probe = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', "
            "log_to_driver=False); print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        done = subprocess.run([sys.executable, "-c", probe, self.address], capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        lines = done.stdout.strip().splitlines()
        return int(lines[-1]) if done.returncode == 0 and lines else 0

    def wait_for(self, count: int, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive_nodes() != count:
            dead = [n for n, p in self.nodes.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the local Ray cluster did not reach {count} nodes: "
                                   + self.log_tail())  # fmt: skip
            time.sleep(1)

    def node_of(self, pid: int) -> str | None:
        """The node whose `ray start` process is an ancestor of `pid` (a task's worker)."""
        by_pid = {p.pid: name for name, p in self.nodes.items()}
        while pid > 1:
            if pid in by_pid:
                return by_pid[pid]
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return None
            pid = int(stat[stat.rfind(")") + 2 :].split()[1])
        return None

    def kill_node(self, name: str) -> None:
        """The node is lost: SIGKILL to its `ray start` (its reaper takes the raylet down)."""
        process = self.nodes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self) -> None:
        for name in reversed(list(self.nodes)):  # the workers first, the head last
            _stop(self.nodes.pop(name))

    def log_tail(self) -> str:
        return " | ".join(
            f"{p.name}: {p.read_text(errors='replace')[-600:]}" for p in self.logs.glob("*.log")
        )


def _node_args(cpus: float, resources: Mapping[str, float]) -> list[str]:
    return [
        f"--num-cpus={cpus:g}", "--num-gpus=0", f"--resources={json.dumps(dict(resources))}",
        "--object-store-memory=100000000", "--block", "--disable-usage-stats",
    ]  # fmt: skip


def _ports() -> list[str]:
    """Free ports for one node's own servers (two nodes share this host)."""
    return [
        "--node-ip-address=127.0.0.1",
        f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
        f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
    ]  # fmt: skip


def _start(log: Path, args: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    with log.open("ab") as out:
        return subprocess.Popen([str(RAY), "start", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)  # fmt: skip


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


@contextlib.contextmanager
def local_ray_cluster(
    folder: Path, *, head_cpus: float, head_resources: Mapping[str, float]
) -> Iterator[LocalRayCluster]:
    """A head node on 127.0.0.1 (a free port, `folder` its temp and log folder); stopped, with
    every node added, on exit."""
    # A short temp path: Ray's Unix sockets live under it (at most 107 characters).
    temp_dir = Path(f"/tmp/sg-ray-{os.getpid()}-{free_port()}")
    logs = folder / "ray-logs"
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cluster = LocalRayCluster(address=f"127.0.0.1:{port}", temp_dir=temp_dir, logs=logs)
    cluster.nodes["head"] = _start(logs / "head.log", [
        "--head", f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false",
        *_ports(),
        *_node_args(head_cpus, head_resources),
    ])  # fmt: skip
    try:
        cluster.wait_for(1)
        yield cluster
    finally:
        cluster.stop()
        with contextlib.suppress(OSError):
            subprocess.run(["rm", "-rf", str(temp_dir)], check=False, timeout=60)
