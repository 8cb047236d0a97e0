"""`servegate matrix FILE --ray ADDRESS|auto`: each entry of the matrix a task of a Ray cluster.

The driver (this process) submits one Ray task per entry, asking for what the entry needs
(`MatrixEntry.needs`: GPUs as tp x pp or its `resources:` block, CPUs, an accelerator type,
custom resources), so that Ray places it on a node that can launch its engines. The task runs
the entry's gates there, `launch` blocks included, and records the run in the run's one store
(`--db`: PostgreSQL when the cluster has more than one node; SQLite is one host's file). The
driver only waits and collects: a row per entry, in the file's order, as a local matrix gives.

Faults of a cluster:
- An entry that no alive node can place, even idle (no node with 4 GPUs), for
  `placement_timeout_s` is cancelled and reported as not run, with what it asked for and what
  the nodes have; Ray itself would wait for such a node forever. (An autoscaler may add one
  meanwhile: the timeout is its chance.)
- A node lost mid-entry: Ray runs the task again on another node (`TASK_RETRIES`). The new
  attempt finds the entry's run by its name in the store and resumes it once the lost attempt
  is dead by the heartbeat lease (store/heartbeat.py): the gates it judged are kept, its result
  is recorded once. An entry whose run already finished returns the stored report.
- Ctrl-C cancels every task: each task's worker is killed, and the guard of each engine it
  launched (engine/process.py) stops that engine when its worker dies; its run shows
  `interrupted`. A driver killed outright ends its Ray job, whose workers Ray kills alike.
- `baseline: {launch: …, shared: node}`: one baseline per node that runs an entry, shared by
  the entries there (orchestration/ray_baseline.py); each row names the one it was judged
  against.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from servegate.config.extras import require
from servegate.config.loader import ConfigError
from servegate.config.matrix import MatrixEntry, MatrixFile
from servegate.config.models import GateConfig
from servegate.endpoints.errors import EndpointError
from servegate.orchestration.matrix import MatrixRow
from servegate.orchestration.ray_baseline import (
    NodeBaselines,
    candidate_devices,
    shared_of,
    with_baseline,
)
from servegate.orchestration.runner import PreflightError, run
from servegate.orchestration.shared_baseline import SharedBaseline
from servegate.store.errors import StoreError
from servegate.store.heartbeat import HEARTBEAT_S, LEASE_S
from servegate.store.process import shown_state
from servegate.store.reader import latest_named_run, stored_report
from servegate.store.resume import ResumePoint, load_resume_point, takeover_refusal
from servegate.store.writer import open_engine
from servegate.verdict.model import Report
from servegate.verdict.rules import EXIT_INCONCLUSIVE, EXIT_USAGE

__all__ = [
    "PLACEMENT_TIMEOUT_S",
    "TASK_RETRIES",
    "EntryOutcome",
    "placeable",
    "run_entry",
    "run_matrix_on_ray",
]

PLACEMENT_TIMEOUT_S = 300.0
TASK_RETRIES = 3  # a node lost mid-entry: the entry runs again elsewhere, up to this often
POLL_S = 1.0
BASELINES_STOP_S = 120.0


@dataclass(frozen=True)
class EntryOutcome:
    """What an entry's task returns: its report (JSON), or why it could not be compared."""

    report_json: str | None
    error: str | None
    exit_code: int
    node: str
    seconds: float
    baseline: dict[str, Any] | None = None  # the node's shared baseline it was judged against


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _ray() -> Any:
    """The `ray` module, or MissingExtraError naming `pip install 'servegate[ray]'`."""
    require("ray", "servegate matrix --ray")
    return importlib.import_module("ray")


# ---- on the node: one entry ------------------------------------------------------------------


def _terminal(row: Mapping[str, Any]) -> bool:
    return shown_state(row) not in ("running", "interrupted", "crashed")


async def _previous_attempt(
    store: Engine, run_name: str
) -> tuple[Report | None, ResumePoint | None]:
    """What an earlier attempt of this entry left: its report when it finished, else the point
    to resume it from, waiting (up to the lease) until the lost attempt counts as dead."""
    deadline = time.monotonic() + LEASE_S + 2 * HEARTBEAT_S
    while True:
        row = latest_named_run(store, run_name)
        if row is None:
            return None, None
        if _terminal(row):
            return stored_report(store, str(row["id"])), None
        if takeover_refusal(row) is None:
            return None, load_resume_point(store, str(row["id"]))
        if time.monotonic() > deadline:
            raise StoreError(
                f"{takeover_refusal(row)} (the entry's earlier Ray attempt did not stop)"
            )
        await asyncio.sleep(HEARTBEAT_S / 3)


async def _entry_report(
    cfg: GateConfig, store: Engine, run_name: str, shared: SharedBaseline | None
) -> Report:
    report, resume = await _previous_attempt(store, run_name)
    if report is not None:
        return report
    given = {} if shared is None else {"baseline": shared.managed}
    return await run(cfg, store=store, run_name=run_name, resume=resume, shared=given)


@dataclass(frozen=True)
class _Job:
    """One entry's work, as the driver sends it (JSON: Ray carries plain text only)."""

    matrix: MatrixFile
    entry_name: str
    source: str
    db: str
    stored_url: str | None
    run_name: str
    cwd: str
    shared_baseline: str | None = None  # its node's baseline (SharedBaseline JSON), if shared

    def to_json(self) -> str:
        return json.dumps({"matrix": self.matrix.model_dump(mode="json"),
                           "entry": self.entry_name, "source": self.source, "db": self.db,
                           "stored_url": self.stored_url, "run_name": self.run_name,
                           "cwd": self.cwd, "shared_baseline": self.shared_baseline})  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> _Job:
        data = json.loads(text)
        return cls(MatrixFile.model_validate(data["matrix"]), data["entry"], data["source"],
                   data["db"], data["stored_url"], data["run_name"], data["cwd"],
                   data.get("shared_baseline"))  # fmt: skip


def _outcome_json(report: Report | None, error: str | None, exit_code: int) -> str:
    return json.dumps({"report": None if report is None else report.model_dump(mode="json"),
                       "error": error, "exit_code": exit_code})  # fmt: skip


def _run_job(job: _Job) -> str:
    """The entry's gates, in the entry's own process: its outcome as JSON."""
    [entry] = [e for e in job.matrix.entries if e.name == job.entry_name]
    shared = None if job.shared_baseline is None else SharedBaseline.from_json(job.shared_baseline)
    try:
        cfg = job.matrix.config(entry, job.source, job.stored_url)
        if not cfg.run_dir.is_absolute():
            cfg = cfg.model_copy(update={"run_dir": Path(job.cwd) / cfg.run_dir})
        store = open_engine(job.db)
        try:
            report = asyncio.run(_entry_report(cfg, store, job.run_name, shared))
        finally:
            store.dispose()
    except (PreflightError, ConfigError, EndpointError, StoreError) as exc:
        return _outcome_json(None, str(exc), exc.exit_code)
    return _outcome_json(report, None, report.exit_code)


def _entry_process_main() -> None:
    """`python -m servegate.orchestration.ray_matrix`: the entry's process. Its job is the first
    line of stdin, its outcome goes to stdout. The rest of stdin stays open while its task's
    worker lives: at end of file (the worker died, however) the process ends at once, and the
    guard of each engine it launched stops that engine."""
    job = _Job.from_json(sys.stdin.readline())

    def watch_owner() -> None:
        sys.stdin.buffer.read()
        os._exit(EXIT_INCONCLUSIVE)

    threading.Thread(target=watch_owner, daemon=True, name="owner-watch").start()
    outcome = _run_job(job)
    sys.stdout.write(outcome + "\n")
    sys.stdout.flush()


def _node_baseline(
    ray: Any, baselines: Any, job: _Job, node_id: str, node: str
) -> tuple[_Job, dict[str, str], SharedBaseline | str]:
    """Ask for the node's shared baseline: the job that uses it, the entry's process's
    environment (its candidate's GPUs: the task's, less the baseline's), the baseline or why
    there is none."""
    assert job.matrix.baseline is not None
    assigned = [str(i) for i in ray.get_gpu_ids()]
    spare = int(job.matrix.baseline.needs().get("GPU", 0))
    offered = assigned[len(assigned) - spare :] if spare else []
    answer = ray.get(baselines.acquire.remote(job.entry_name, node_id, node, offered))
    shared = shared_of(answer)
    env = dict(os.environ)
    if isinstance(shared, SharedBaseline):
        job = dataclasses.replace(job, shared_baseline=answer)
        if assigned:
            used = shared.managed.launch.env.get("CUDA_VISIBLE_DEVICES", "").split(",")
            own = candidate_devices(assigned, used, len(assigned) - spare)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(own)
    return job, env, shared


def run_entry(job_json: str, baselines: Any = None) -> str:
    """A Ray task: one entry's gates on whichever node Ray chose; EntryOutcome as JSON.

    The entry runs in a child process of the task's worker, not in the worker: a Ray worker
    SIGKILLs its own child processes when it exits (`kill_child_processes_on_worker_exit`), and
    an engine's guard killed so would leave its engine running. The entry's process is killed
    instead (or ends when the worker's pipe closes), and the guards stop the engines. (A fresh
    interpreter also runs on asyncio's own loop: Ray's workers install uvloop's, whose
    transports servegate's client does not take.)"""
    t0 = time.perf_counter()
    ray = _ray()
    node_id = str(ray.get_runtime_context().get_node_id())
    node = f"{socket.gethostname()} (node {node_id[:8]})"
    env: dict[str, str] | None = None
    shared: SharedBaseline | str | None = None
    if baselines is not None:
        job, env, shared = _node_baseline(ray, baselines, _Job.from_json(job_json), node_id, node)
        if not isinstance(shared, SharedBaseline):
            baselines.release.remote(job.entry_name)
            return json.dumps({"report_json": None, "exit_code": EXIT_INCONCLUSIVE,
                               "error": f"the node's shared baseline: {shared}", "node": node,
                               "seconds": time.perf_counter() - t0})  # fmt: skip
        job_json = job.to_json()
    try:
        answer, code = _entry_process(job_json, env)
    finally:
        if baselines is not None:
            baselines.release.remote(_Job.from_json(job_json).entry_name)
    try:
        data = json.loads(answer.strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = {"report": None, "error": f"the entry's process ended with exit code "
                f"{code} without an outcome (its log: the Ray worker's)",
                "exit_code": EXIT_INCONCLUSIVE}  # fmt: skip
    report = data["report"]
    return json.dumps({
        "report_json": None if report is None else json.dumps(report),
        "error": data["error"], "exit_code": data["exit_code"], "node": node,
        "seconds": time.perf_counter() - t0,
        "baseline": shared.info() if isinstance(shared, SharedBaseline) else None,
    })  # fmt: skip


def _entry_process(job_json: str, env: dict[str, str] | None) -> tuple[str, int | None]:
    """Run the entry in a process of its own: what it printed, its exit code."""
    child = subprocess.Popen(
        [sys.executable, "-m", "servegate.orchestration.ray_matrix"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        child.stdin.write(job_json + "\n")
        child.stdin.flush()
        answer = child.stdout.read()
        child.wait()
    finally:
        child.stdin.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    return answer, child.returncode


# ---- the driver ------------------------------------------------------------------------------


def placeable(needs: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> bool:
    """Whether any node, idle, has every resource of `needs` (Ray's names)."""
    return any(all(node.get(k, 0.0) >= v for k, v in needs.items()) for node in nodes)


def _amounts(resources: Mapping[str, float]) -> str:
    shown = [
        f"{v:g} {k}" for k, v in sorted(resources.items())
        if not k.startswith(("node:", "memory", "object_store_memory"))
    ]  # fmt: skip
    return ", ".join(shown) or "nothing"


def _alive_nodes(ray: Any) -> list[Mapping[str, float]]:
    return [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]


def _not_placed(
    needs: Mapping[str, float], nodes: Sequence[Mapping[str, float]], timeout_s: float
) -> str:
    have = "; ".join(_amounts(n) for n in nodes[:4]) + ("; …" if len(nodes) > 4 else "")
    return (
        f"not run: no node of the Ray cluster could place it within {timeout_s:g} s "
        f"({_amounts(needs)} asked; {len(nodes)} node(s) alive: {have or 'none'})"
    )


def _outcome_row(ray: Any, entry: MatrixEntry, ref: Any) -> MatrixRow:
    try:
        outcome = EntryOutcome(**json.loads(ray.get(ref)))
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        frames = re.findall(r'File "([^"]+)", line (\d+)', str(exc))
        at = f" (at {Path(frames[-1][0]).name}:{frames[-1][1]})" if frames else ""
        return MatrixRow(entry, None, f"the entry's task failed: {_one_line(cause)}{at}",
                         EXIT_INCONCLUSIVE)  # fmt: skip
    except ray.exceptions.RayError as exc:  # the worker or its node died, retries spent
        return MatrixRow(entry, None, f"the entry's task was lost: {_one_line(exc)}",
                         EXIT_INCONCLUSIVE)  # fmt: skip
    report = (
        None if outcome.report_json is None else Report.model_validate_json(outcome.report_json)
    )
    return MatrixRow(entry, report, outcome.error, outcome.exit_code, node=outcome.node,
                     seconds=round(outcome.seconds, 2), baseline=outcome.baseline)  # fmt: skip


def _database(store: Engine) -> str:
    """The store's URL for the tasks: SQLite's file as an absolute path."""
    url = store.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return str(Path(str(url.database)).resolve())
    return url.render_as_string(hide_password=False)


def _cancel(ray: Any, pending: Mapping[Any, MatrixEntry]) -> None:
    """Kill every task still pending or running. Ray's gentler cancel (a KeyboardInterrupt in
    the task) did not reach a task inside asyncio's loop here (measured: still running 40 s
    later), so each task's worker is killed; its engines' guards stop them, and its run shows
    `interrupted` (its process is gone) and can be resumed."""
    for ref in pending:
        ray.cancel(ref, force=True)


CONNECT_TIMEOUT_S = 10.0


def _refuse_unreachable(address: str) -> None:
    """A `host:port` nothing answers on is one line now; Ray's own connect retries for minutes.
    (`auto` and `ray://` addresses are left to Ray.)"""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise PreflightError(
            f"cannot connect to the Ray cluster at {address}: {_one_line(exc)}", EXIT_INCONCLUSIVE
        ) from None


def new_matrix_id() -> str:
    """Names one matrix's runs (`entry_run_name`): a retried task finds its own run by it, and
    `--collect` all of them."""
    return uuid.uuid4().hex[:8]


def entry_run_name(entry: str, matrix_id: str) -> str:
    return f"matrix {entry} [ray {matrix_id}]"


def collect_rows(matrix: MatrixFile, store: Engine, matrix_id: str) -> list[MatrixRow]:
    """The matrix's table from the store alone, while its entries still run (`servegate matrix
    FILE --collect ID`): a finished entry's stored report; one still running, interrupted or
    not started yet says so (inconclusive, exit 3 — no verdict yet)."""
    rows: list[MatrixRow] = []
    for entry in matrix.entries:
        found = latest_named_run(store, entry_run_name(entry.name, matrix_id))
        if found is None:
            rows.append(MatrixRow(entry, None, "not started", EXIT_INCONCLUSIVE))
        elif _terminal(found) and found.get("report_json"):
            rows.append(MatrixRow(entry, stored_report(store, str(found["id"])), None,
                                  int(found.get("exit_code") or 0)))  # fmt: skip
        else:
            state = shown_state(found)
            rows.append(MatrixRow(entry, None, f"{state} (run {found['id']}, attempt "
                                  f"{found.get('attempt') or 1})", EXIT_INCONCLUSIVE))  # fmt: skip
    return rows


def run_matrix_on_ray(
    matrix: MatrixFile,
    *,
    source: str,
    store: Engine,
    address: str,
    stored_url: str | None = None,
    placement_timeout_s: float = PLACEMENT_TIMEOUT_S,
    announce: Callable[[MatrixRow], None] | None = None,
    matrix_id: str | None = None,
    started: Callable[[], None] | None = None,
) -> list[MatrixRow]:
    """Run every entry as a task of the Ray cluster at `address` (`auto`: the one this machine
    belongs to); a row per entry, in the file's order. PreflightError when the cluster cannot be
    reached, or when the store is SQLite and the cluster has more than one node; `started` is
    called once neither refused it."""
    ray = _ray()
    _refuse_unreachable(address)
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise PreflightError(
            f"cannot connect to the Ray cluster at {address}: {_one_line(exc)}", EXIT_INCONCLUSIVE
        ) from None
    try:
        nodes = _alive_nodes(ray)
        if store.dialect.name == "sqlite" and len(nodes) > 1:
            raise PreflightError(
                f"the Ray cluster has {len(nodes)} nodes and --db is a SQLite file, which only "
                "its own host can write: give a shared database (--db postgresql://…)",
                EXIT_USAGE,
            )
        if started is not None:
            started()
        return _run(ray, matrix, source=source, db=_database(store), stored_url=stored_url,
                    placement_timeout_s=placement_timeout_s, announce=announce,
                    matrix_id=matrix_id or new_matrix_id())  # fmt: skip
    finally:
        ray.shutdown()


def _run(
    ray: Any,
    matrix: MatrixFile,
    *,
    source: str,
    db: str,
    stored_url: str | None,
    placement_timeout_s: float,
    announce: Callable[[MatrixRow], None] | None,
    matrix_id: str,
) -> list[MatrixRow]:
    task = ray.remote(run_entry)
    baselines = _node_baselines(ray, matrix, source, matrix_id) if matrix.shared_per_node else None
    pending: dict[Any, MatrixEntry] = {}
    for entry in matrix.entries:
        needs = _needs(matrix, entry)
        custom = {k: v for k, v in needs.items() if k not in ("CPU", "GPU")}
        ref = task.options(
            num_cpus=needs.get("CPU", 0), num_gpus=needs.get("GPU", 0), resources=custom,
            max_retries=TASK_RETRIES, retry_exceptions=False, name=f"matrix {entry.name}",
        ).remote(_Job(matrix, entry.name, source=source, db=db, stored_url=stored_url,
                      run_name=entry_run_name(entry.name, matrix_id),
                      cwd=os.getcwd()).to_json(), baselines)  # fmt: skip
        pending[ref] = entry
    rows: dict[str, MatrixRow] = {}

    def done(row: MatrixRow) -> None:
        rows[row.entry.name] = row
        if baselines is not None:  # its node's baseline may stop (the entry's task said so too)
            baselines.release.remote(row.entry.name)
        if announce is not None:
            announce(row)

    unplaceable_since: dict[str, float] = {}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                done(_outcome_row(ray, pending.pop(ref), ref))
            nodes, now = _alive_nodes(ray), time.monotonic()
            for ref, entry in list(pending.items()):
                if placeable(_needs(matrix, entry), nodes):
                    unplaceable_since.pop(entry.name, None)
                    continue
                since = unplaceable_since.setdefault(entry.name, now)
                if now - since >= placement_timeout_s:
                    ray.cancel(ref, force=True)
                    del pending[ref]
                    reason = _not_placed(_needs(matrix, entry), nodes, placement_timeout_s)
                    done(MatrixRow(entry, None, reason, EXIT_USAGE))
    except BaseException:  # Ctrl-C (or the driver failing): no task is left running
        _cancel(ray, pending)
        raise
    finally:
        if baselines is not None:
            _stop_baselines(ray, baselines)
    return [rows[e.name] for e in matrix.entries]


def _needs(matrix: MatrixFile, entry: MatrixEntry) -> dict[str, float]:
    """What an entry's task asks for: its own needs, plus its node's shared baseline's."""
    if matrix.baseline is None or not matrix.shared_per_node:
        return entry.needs()
    return with_baseline(entry.needs(), matrix.baseline.needs())


def _node_baselines(ray: Any, matrix: MatrixFile, source: str, matrix_id: str) -> Any:
    """The NodeBaselines actor of this run, on the driver's node (it dies with the job)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    assert matrix.baseline is not None
    assert matrix.baseline.launch is not None
    job = {"matrix": matrix.model_dump(mode="json"), "source": source, "cwd": os.getcwd(),
           "matrix_id": matrix_id}  # fmt: skip
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return (
        ray.remote(NodeBaselines)
        .options(num_cpus=0, max_concurrency=64, scheduling_strategy=here, max_restarts=0)
        .remote(job, [e.name for e in matrix.entries], matrix.baseline.launch.stop_timeout_s)
    )


def _stop_baselines(ray: Any, baselines: Any) -> None:
    """Stop every node's baseline (a Ray error: the job's end takes them down regardless)."""
    with contextlib.suppress(ray.exceptions.RayError):
        ray.get(baselines.stop_all.remote(), timeout=BASELINES_STOP_S)
    ray.kill(baselines)


if __name__ == "__main__":
    _entry_process_main()
