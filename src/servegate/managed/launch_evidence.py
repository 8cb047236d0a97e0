"""What starting one engine showed: the launcher fills it, Gate 1 judges it, the fingerprint
records it. It lives here, below the gates, so that `managed`, `environment` and the gates can all
import it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from servegate.verdict.model import Severity


class LaunchOutcome(StrEnum):
    READY = "ready"  # answered a real completion
    EXITED = "exited"  # the process ended during start-up
    NOT_FOUND = "not-found"  # the command could not be executed
    PORT_TAKEN = "port-taken"  # something else already answered on its port
    TIMEOUT = "timeout"  # no completion before the ready timeout


@dataclass(frozen=True)
class LogHit:
    """One start-up log line that matched a catalogue pattern."""

    pattern: str  # the pattern's id, e.g. "llama.cpp-buffer-fallback"
    kind: str  # its class: fallback, unsupported-operator, optional-dependency, ...
    severity: Severity  # how much it matters when only the candidate shows it
    line_no: int
    line: str
    module: str | None = None  # optional-dependency: the module that failed to import

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.pattern, self.module)

    def describe(self) -> str:
        return f"log line {self.line_no}: {self.line}"


@dataclass(frozen=True)
class LaunchEvidence:
    """What starting one side's engine showed."""

    side: str
    command: str
    log_path: str
    outcome: LaunchOutcome
    message: str  # one line: what happened
    timeout_s: float
    pid: int | None = None  # the process servegate started (leader of its process group)
    exit_code: int | None = None
    port_open_s: float | None = None  # process start -> its port accepts connections
    ready_s: float | None = None  # process start -> first successful completion
    peak_rss_mb: float | None = None
    gpu_memory_mb: float | None = None
    gpu_note: str = ""  # why GPU memory was not measured
    log_tail: str = ""
    hits: tuple[LogHit, ...] = field(default_factory=tuple)
    # What the engine's own log says it started (vLLM: dtype, compile mode, compile cache, ...).
    engine: dict[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.outcome is LaunchOutcome.READY

    @property
    def reason(self) -> str:
        """One line: the error that ended the start-up, from the log (else the message). The
        first traceback is the root cause: vLLM's API server re-raises its worker's failure as
        "WorkerProc initialization failed ... See stack trace for root cause"."""
        for hit in self.hits:
            if hit.kind == "traceback" and " … " in hit.line:
                return f"{self.message}: {hit.line.split(' … ', 1)[1]}"
            if hit.pattern == "argparse-unrecognized":
                return f"{self.message}: {hit.line}"
        return self.message
