"""What the startup gate sends and what it saw: the ready request, the evidence (no judgement)."""

from __future__ import annotations

from dataclasses import dataclass, field

from servegate.endpoints.types import Completion
from servegate.gates.capabilities import Capability
from servegate.gates.sizing import ImpossibleSize
from servegate.gates.startup.canary import CanaryAnswer
from servegate.gates.startup.capacity import CapacityEvidence
from servegate.managed.launch_evidence import LaunchEvidence

NAME = "startup"
READY_REQUEST = {"prompt": "Hello", "max_tokens": 1, "temperature": 0}


@dataclass(frozen=True)
class SideEvidence:
    """What one side showed at start-up."""

    name: str
    base_url: str
    models_status: int | None
    models: tuple[str, ...]
    ready: Completion
    ready_ms: float | None
    impossible: Completion
    impossible_ms: float
    capabilities: dict[str, Capability] = field(default_factory=dict)
    # After the over-long prompt timed out: ms from giving up on it until a 1-token completion
    # was answered again (None: never within the recovery window, or it did not time out).
    recovered_ms: float | None = None
    recovery_window_s: float = 0.0


@dataclass(frozen=True)
class StartupEvidence:
    baseline: SideEvidence
    candidate: SideEvidence
    impossible_words: int
    impossible_deadline_s: float
    # Managed sides only: what starting the engine showed (times, log pattern hits).
    baseline_launch: LaunchEvidence | None = None
    candidate_launch: LaunchEvidence | None = None
    sizing: ImpossibleSize | None = None  # how the over-long prompt's length was found
    # The over-KV-capacity prompt (startup_capacity), baseline and candidate; sent last.
    capacity: tuple[CapacityEvidence, CapacityEvidence] | None = None
    # The suite's first canaries on both sides, once both were probed (canary.py).
    canaries: tuple[CanaryAnswer, ...] = ()
