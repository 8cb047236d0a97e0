"""Every request a gate sends is recorded: an Endpoint that hands each exchange to the Recorder.

Gates that call an endpoint directly (capability discovery, embeddings, `GET /models`, the
isolation requests before each probe) get it wrapped, so the store sees every request the
servers see, labelled with the gate and probe that sent it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion, Embeddings, RawResponse

Result = Completion | Embeddings | RawResponse

# What the requests a gate sends at a point of its work are for ("noise floor", "prompt scoring",
# "load blocks"): the gate's time is reported per part (GateTime.parts). A context variable, so
# that the baseline's and the candidate's tasks of one gate, running at once, each keep theirs.
_PART: ContextVar[str | None] = ContextVar("servegate_part", default=None)
UNNAMED_PART = "probes"
ISOLATION_PART = "isolation (prefix-cache reset)"


@contextmanager
def part(name: str) -> Iterator[None]:
    """Requests recorded inside (and in tasks started inside) count under `name`."""
    token = _PART.set(name)
    try:
        yield
    finally:
        _PART.reset(token)


def part_of(probe: str) -> str:
    """The part a request recorded now belongs to: an isolation request is its own part
    whatever it isolates, else the innermost `part` around it, else UNNAMED_PART."""
    if probe.endswith(":isolation"):
        return ISOLATION_PART
    return _PART.get() or UNNAMED_PART


class Recorder(Protocol):
    """Where each request and its result go as they complete (the store implements this)."""

    def record(
        self,
        *,
        gate: str,
        probe: str,
        side: str,
        api: str,
        request: Mapping[str, Any],
        result: Result,
    ) -> None: ...


class NullRecorder:
    """Records nothing: for evaluating gates in tests and one-off calls."""

    def record(
        self,
        *,
        gate: str,
        probe: str,
        side: str,
        api: str,
        request: Mapping[str, Any],
        result: Result,
    ) -> None:
        return None


@dataclass(frozen=True)
class RecordingEndpoint:
    """`inner`, with every call recorded under `gate`/`probe` (the api names what was called)."""

    inner: Endpoint
    recorder: Recorder
    gate: str
    probe: str

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def base_url(self) -> str:
        return self.inner.base_url

    def _keep(self, api: str, request: Mapping[str, Any], result: Result) -> None:
        self.recorder.record(gate=self.gate, probe=self.probe, side=self.inner.name, api=api,
                             request=request, result=result)  # fmt: skip

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        result = await self.inner.chat(body, deadline_s=deadline_s)
        self._keep("chat", body, result)
        return result

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        result = await self.inner.completion(body, deadline_s=deadline_s)
        self._keep("completions", body, result)
        return result

    async def embeddings(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Embeddings:
        result = await self.inner.embeddings(body, deadline_s=deadline_s)
        self._keep("embeddings", body, result)
        return result

    async def raw(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline_s: float | None = None,
    ) -> RawResponse:
        result = await self.inner.raw(method, path, body, deadline_s=deadline_s)
        self._keep(f"{method} {path}", body or {}, result)
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


class HeldRecords:
    """A Recorder that keeps what it is given until `flush`: for requests sent before the run's
    row exists (the endpoints' environment fingerprints), recorded once it does."""

    GATE = "fingerprint"

    def __init__(self) -> None:
        self._held: list[dict[str, Any]] = []

    def record(
        self,
        *,
        gate: str,
        probe: str,
        side: str,
        api: str,
        request: Mapping[str, Any],
        result: Result,
    ) -> None:
        self._held.append({"gate": gate, "probe": probe, "side": side, "api": api,
                           "request": request, "result": result})  # fmt: skip

    def wrap(self, endpoint: Endpoint) -> Endpoint:
        """`endpoint`, each call held under gate "fingerprint", probe "environment"."""
        return RecordingEndpoint(endpoint, self, gate=self.GATE, probe="environment")

    def flush(self, recorder: Recorder) -> None:
        """Hand everything held to `recorder`, in the order it was sent."""
        held, self._held = self._held, []
        for item in held:
            recorder.record(**item)
