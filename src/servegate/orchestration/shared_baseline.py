"""A matrix's baseline launched once and shared by several entries (`baseline: {launch: …,
shared: node}`): locally one for the whole run, on Ray one per node (orchestration/ray_baseline.py).

Each entry's run is given the launched side (`runner.run(shared=…)`): its launch is judged by
the startup gate and recorded in the run's baseline fingerprint as if the run had started it,
but the run neither starts nor stops it. The launch itself (its log, its start-up time) happens
once, in a folder of its own; each entry's row says which baseline it was judged against
(`SharedBaseline.info`: node, URL, pid).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servegate.config.matrix import MatrixFile
from servegate.config.models import EndpointConfig, GateConfig, LaunchConfig
from servegate.managed.launch_evidence import LaunchEvidence, LaunchOutcome, LogHit
from servegate.managed.launcher import Managed
from servegate.managed.sides import launched
from servegate.verdict.model import Severity

__all__ = ["SharedBaseline", "baseline_folder", "launch_shared", "with_devices"]


@dataclass(frozen=True)
class SharedBaseline:
    """A launched baseline that several entries are judged against, and where it runs."""

    managed: Managed
    node: str

    def info(self) -> dict[str, Any]:
        """What an entry's row shows of the baseline it was judged against."""
        ev = self.managed.evidence
        return {"node": self.node, "url": self.managed.url, "pid": ev.pid,
                "ready_s": None if ev.ready_s is None else round(ev.ready_s, 2),
                "outcome": str(ev.outcome), "log": ev.log_path}  # fmt: skip

    def to_json(self) -> str:
        """For an entry in another process of the same node (its env: the launch's own keys)."""
        m = self.managed
        return json.dumps({"node": self.node, "url": m.url, "argv": m.argv,
                           "env": {k: m.env[k] for k in m.launch.env if k in m.env},
                           "launch": m.launch.model_dump(mode="json"),
                           "evidence": dataclasses.asdict(m.evidence)})  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> SharedBaseline:
        """The baseline as another process of its node sees it: nothing to stop (its own
        process stops it), memory peaks as of its start-up."""
        data = json.loads(text)
        ev = dict(data["evidence"])
        ev["outcome"] = LaunchOutcome(ev["outcome"])
        ev["hits"] = tuple(LogHit(**{**h, "severity": Severity(h["severity"])})
                           for h in ev["hits"])  # fmt: skip
        managed = Managed(side="baseline", url=data["url"], argv=list(data["argv"]),
                          env={**os.environ, **data["env"]},
                          launch=LaunchConfig.model_validate(data["launch"]),
                          evidence=LaunchEvidence(**ev))  # fmt: skip
        return cls(managed, data["node"])


def baseline_folder(cfg: GateConfig, label: str) -> Path:
    """Where a shared baseline's log goes: under the run folder, once per launch."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return cfg.run_dir / f"{stamp}-{os.getpid()}-shared-baseline-{label}"


def with_devices(endpoint: EndpointConfig, devices: Sequence[str]) -> EndpointConfig:
    """The baseline's launch on these GPUs (CUDA_VISIBLE_DEVICES), unless its env names them."""
    launch = endpoint.launch
    if not devices or launch is None or "CUDA_VISIBLE_DEVICES" in launch.env:
        return endpoint
    env = {**launch.env, "CUDA_VISIBLE_DEVICES": ",".join(devices)}
    return endpoint.model_copy(update={"launch": launch.model_copy(update={"env": env})})


@contextlib.asynccontextmanager
async def launch_shared(
    matrix: MatrixFile,
    cfg: GateConfig,
    *,
    node: str,
    label: str,
    devices: Sequence[str] = (),
) -> AsyncIterator[SharedBaseline]:
    """Start the matrix's baseline once (`cfg`: an entry's run settings, for the run folder, log
    patterns and probe deadline) and stop it on exit, however the block ends. A baseline that
    did not start is yielded too: each entry's startup gate reports it."""
    assert matrix.baseline is not None
    endpoint = with_devices(matrix.baseline.endpoint(), devices)
    async with launched(
        [("baseline", endpoint)], baseline_folder(cfg, label),
        log_patterns=cfg.log_patterns, probe_deadline_s=cfg.probe_deadline_s,
    ) as managed:  # fmt: skip
        yield SharedBaseline(managed["baseline"], node)
