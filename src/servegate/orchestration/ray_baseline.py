"""`servegate matrix FILE --ray …` with `baseline: {launch: …, shared: node}`: one baseline server
per Ray node that runs an entry, started by the first entry placed there and reused by the others.

- `NodeBaselines`, an actor of the driver's job (it dies with the job), keeps one
  `BaselineServer` per node id. An entry's task asks it for its node's baseline (`acquire`);
  the first ask starts one, pinned to the node (NodeAffinitySchedulingStrategy, hard), and every
  ask waits until it answers (or failed to start: each entry's startup gate reports that).
- `BaselineServer` starts the baseline in a process of its own (`python -m
  servegate.orchestration.ray_baseline`): a Ray worker SIGKILLs its direct children when it
  exits, and an engine's guard killed so would leave the engine running. That process launches
  the engine under its guard, says how it started (one JSON line) and stops it when its stdin
  closes — the actor stopping it, or the actor's worker dying however.
- A node's baseline is stopped once its entries are done and no entry of the matrix is still
  waiting to start (one that starts later could land there); every one at the end of the run,
  on Ctrl-C, and with the job when the driver dies. A node lost takes its baseline with it: the
  retried entry asks for the baseline of the node it lands on, which starts one there.
- Resources: the baseline's own `resources` are reserved with every entry (the entry's task
  asks for both), so that wherever Ray places an entry both fit, and no baseline ever waits for
  room its node's entries took. The first entry on a node hands the baseline its last GPUs
  (`ray.get_gpu_ids()`); each entry's candidate gets the task's GPUs the baseline does not use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servegate.config.matrix import MatrixFile
from servegate.orchestration.shared_baseline import SharedBaseline, launch_shared

__all__ = ["BaselineServer", "NodeBaselines", "candidate_devices", "with_baseline"]

STOP_MARGIN_S = 20.0


def with_baseline(needs: Mapping[str, float], baseline: Mapping[str, float]) -> dict[str, float]:
    """An entry's resources with its node's shared baseline's added: both must fit."""
    out = dict(needs)
    for name, amount in baseline.items():
        out[name] = out.get(name, 0.0) + amount
    return out


def candidate_devices(assigned: Sequence[str], baseline: Sequence[str], count: int) -> list[str]:
    """The task's GPUs for its candidate: those the node's baseline does not use. The task
    holds its own GPUs plus the baseline's count, and Ray gives no two tasks one GPU, so at
    most `len(assigned) - count` of them are the baseline's."""
    return [d for d in assigned if d not in baseline][:count]


# ---- the baseline's own process ------------------------------------------------------------


async def _serve(job: Mapping[str, Any]) -> None:
    matrix = MatrixFile.model_validate(job["matrix"])
    cfg = matrix.config(matrix.entries[0], job["source"], None)
    if not cfg.run_dir.is_absolute():
        cfg = cfg.model_copy(update={"run_dir": Path(job["cwd"]) / cfg.run_dir})
    async with launch_shared(matrix, cfg, node=job["node"], label=job["label"],
                             devices=job["devices"]) as shared:  # fmt: skip
        sys.stdout.write(shared.to_json() + "\n")
        sys.stdout.flush()
        await asyncio.to_thread(sys.stdin.buffer.read)  # until the actor (or its worker) ends


def _baseline_process_main() -> None:
    """The job is the first line of stdin; the baseline's JSON goes to stdout once it started;
    end of stdin stops it."""
    asyncio.run(_serve(json.loads(sys.stdin.readline())))


# ---- the actors ----------------------------------------------------------------------------


class BaselineServer:
    """A Ray actor pinned to one node: that node's baseline, in a process of its own."""

    def __init__(self, job_json: str) -> None:
        self._child = subprocess.Popen(
            [sys.executable, "-m", "servegate.orchestration.ray_baseline"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self._child.stdin is not None
        assert self._child.stdout is not None
        self._child.stdin.write(job_json + "\n")
        self._child.stdin.flush()
        self._answer = self._child.stdout.readline().strip()

    def info(self) -> str:
        """The baseline as SharedBaseline JSON; "" when its process ended without starting it."""
        return self._answer

    def stop(self, timeout_s: float) -> int:
        """Stop the baseline (its process stops the engine and ends); its process's pid."""
        child = self._child
        if child.stdin is not None and not child.stdin.closed:
            child.stdin.close()
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()  # the engine's guard stops the engine when its owner dies
            child.wait()
        return child.pid


class NodeBaselines:
    """A Ray actor of the driver's job: one BaselineServer per node id that runs an entry."""

    def __init__(self, job: Mapping[str, Any], entries: Sequence[str], stop_timeout_s: float):
        self._job = dict(job)
        self._waiting = set(entries)  # entries that have not asked yet: they may land anywhere
        self._users: dict[str, set[str]] = {}  # node id -> entries running there
        self._servers: dict[str, Any] = {}  # node id -> BaselineServer handle, while it runs
        self._launches: list[str] = []  # node ids, one per baseline started
        self._every: list[Any] = []  # every BaselineServer started, stopped or not
        self._stop_s = stop_timeout_s + STOP_MARGIN_S
        self._lock = threading.Lock()

    def acquire(self, entry: str, node_id: str, node: str, spare: list[str]) -> str:
        """The baseline of `node_id` for `entry` (SharedBaseline JSON), started by the first
        entry there on the GPUs it spares; an error text when it could not be started."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self._lock:
            for users in self._users.values():
                users.discard(entry)  # a retried entry: its earlier node is left
            self._waiting.discard(entry)
            self._users.setdefault(node_id, set()).add(entry)
            server: Any = self._servers.get(node_id)
            if server is None:
                job = {**self._job, "node": node, "label": node_id[:8], "devices": spare}
                strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
                server = ray.remote(BaselineServer).options(
                    num_cpus=0, scheduling_strategy=strategy, max_restarts=0,
                    name=f"servegate-baseline-{self._job['matrix_id']}-{len(self._launches)}",
                ).remote(json.dumps(job))  # fmt: skip
                self._servers[node_id] = server
                self._launches.append(node_id)
                self._every.append(server)
        try:
            return str(ray.get(server.info.remote()))
        except ray.exceptions.RayError as exc:  # its node lost meanwhile
            return f"error: the node's baseline server was lost: {type(exc).__name__}"

    def release(self, entry: str) -> None:
        """`entry` is done (finished, failed, not placed): stop each baseline no entry needs."""
        with self._lock:
            self._waiting.discard(entry)
            idle = [] if self._waiting else [n for n, u in self._users.items() if not u - {entry}]
            for users in self._users.values():
                users.discard(entry)
            stopping = [self._servers.pop(n) for n in idle if n in self._servers]
        self._stop(stopping)

    def stop_all(self) -> list[str]:
        """Stop every baseline, and wait for those a `release` is stopping (a server's calls
        run one at a time: a second stop returns once the first has); the node ids of all
        baselines started."""
        with self._lock:
            self._servers = {}
            every = list(self._every)
        self._stop(every)
        return list(self._launches)

    def _stop(self, servers: Sequence[Any]) -> None:
        import ray

        refs = [s.stop.remote(self._stop_s - STOP_MARGIN_S) for s in servers]
        for server, ref in zip(servers, refs, strict=True):
            with contextlib.suppress(ray.exceptions.RayError):  # its node gone, and it too
                ray.get(ref, timeout=self._stop_s)
            ray.kill(server)


def shared_of(answer: str) -> SharedBaseline | str:
    """What `acquire` answered: the baseline, or the reason there is none."""
    if not answer.startswith("{"):
        return answer.removeprefix("error: ") or "the node's baseline process ended at start-up"
    return SharedBaseline.from_json(answer)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    _baseline_process_main()
