"""What every gate works on: the two endpoints, the model, and where results are recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.recording import NullRecorder, Recorder, RecordingEndpoint
from servegate.endpoints.types import Completion
from servegate.managed.launch_evidence import LaunchEvidence

Api = Literal["chat", "completions"]
B = TypeVar("B")
C = TypeVar("C")

# A request whose first token differs from every chat template's first token, so that a server that
# reuses the longest matching KV prefix (llama.cpp does) starts the next probe from scratch on both
# sides. Without it the same request twice can flip greedy answers, and a baseline that served an
# earlier run would not be comparable with a fresh candidate.
ISOLATION_REQUEST: Mapping[str, Any] = {"prompt": "0", "max_tokens": 1, "temperature": 0}


def timed_out(r: Completion) -> bool:
    """The request hung: no answer (timeout) or silence after the headers (stalled)."""
    return r.error is not None and r.error.hung


def not_sent(side: str, why: str) -> Completion:
    """The result of a request servegate chose not to send (it is recorded like any other)."""
    return Completion(status=None, error=RequestError(ErrorCategory.NOT_SENT, why, side=side))


def scaled_deadline(deadline_s: float, reference: Completion | None, factor: float) -> float:
    """The deadline for a request the baseline already answered: at least `factor` times the
    baseline's own latency for it, so a slower machine is not mistaken for a hang."""
    took_ms = reference.timing.e2el_ms if reference is not None and reference.ok else None
    return deadline_s if took_ms is None else max(deadline_s, factor * took_ms / 1e3)


@dataclass
class EndpointPair:
    """Baseline and candidate, the model name to send, and the recorder for this run."""

    baseline: Endpoint
    candidate: Endpoint
    model: str | None = None
    recorder: Recorder = field(default_factory=NullRecorder)
    isolate: bool = True
    # A second baseline server, when given: its disagreement with the baseline joins the A/A floor.
    replica: Endpoint | None = None
    # After this many timeouts in a row a side is hung: it gets no more requests (`not_sent`).
    hung_after: int = 2
    # A request the baseline answered gets max(deadline, this × the baseline's latency).
    timeout_factor: float = 3.0
    # What starting each managed side showed ("baseline", "candidate"); empty when none was.
    launches: Mapping[str, LaunchEvidence] = field(default_factory=dict)
    # Serve baseline and candidate at the same time where a gate allows it (`at_once`): they are
    # different servers. Off, or one server reached as both sides, they take turns.
    sides_at_once: bool = True
    _timeouts_in_a_row: dict[str, int] = field(default_factory=dict)

    def body(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The request as sent: with the model filled in when one is set."""
        out = dict(request)
        if self.model is not None:
            out.setdefault("model", self.model)
        return out

    def recording(self, endpoint: Endpoint, *, gate: str, probe: str) -> Endpoint:
        """`endpoint` with every call it makes recorded under `gate`/`probe`."""
        return RecordingEndpoint(endpoint, self.recorder, gate, probe)

    def hung(self, endpoint: Endpoint) -> bool:
        """True once `endpoint` timed out on `hung_after` requests in a row."""
        return self._timeouts_in_a_row.get(endpoint.name, 0) >= self.hung_after

    async def send(
        self,
        endpoint: Endpoint,
        api: Api,
        request: Mapping[str, Any],
        *,
        gate: str,
        probe: str,
        deadline_s: float,
        isolate: bool | None = None,
        reference: Completion | None = None,
    ) -> Completion:
        """One probe request to one side, isolated (unless `isolate=False`) and recorded.

        With `reference` (the baseline's answer to the same request) the deadline is scaled to
        the baseline's latency and a timeout is retried once. A side that is hung gets nothing:
        the result says so (`not_sent`) and is recorded like an answer."""
        body = self.body(request)
        if self.hung(endpoint):
            n = self._timeouts_in_a_row[endpoint.name]
            result = not_sent(
                endpoint.name, f"not sent: {endpoint.name} timed out on {n} requests in a row"
            )
            self._record(gate, probe, endpoint, api, body, result)
            return result
        deadline = scaled_deadline(deadline_s, reference, self.timeout_factor)
        attempts = 2 if reference is not None else 1
        for _ in range(attempts):
            result = await self._attempt(endpoint, api, request, gate, probe, deadline, isolate)
            if not timed_out(result):
                break
        hung = timed_out(result)
        self._timeouts_in_a_row[endpoint.name] = (
            self._timeouts_in_a_row.get(endpoint.name, 0) + 1 if hung else 0
        )
        return result

    @property
    def at_once(self) -> bool:
        """Whether the two sides may be served at the same time: never when they are one server
        (then a side's request would run between the other's isolation and probe)."""
        same = self.baseline is self.candidate or (
            self.baseline.base_url.rstrip("/") == self.candidate.base_url.rstrip("/")
        )
        return self.sides_at_once and not same

    async def sides(
        self,
        baseline: Callable[[], Coroutine[Any, Any, B]],
        candidate: Callable[[], Coroutine[Any, Any, C]],
    ) -> tuple[B, C]:
        """The baseline's part of a probe and the candidate's: at the same time when `at_once`
        (two servers can work at once), else the baseline's first. The candidate's part takes
        the baseline's answers through futures (`send_against`)."""
        if not self.at_once:
            b = await baseline()
            return b, await candidate()
        try:
            async with asyncio.TaskGroup() as group:
                b_task, c_task = group.create_task(baseline()), group.create_task(candidate())
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None  # the same exception as one after the other
        return b_task.result(), c_task.result()

    async def send_against(
        self,
        endpoint: Endpoint,
        api: Api,
        request: Mapping[str, Any],
        *,
        gate: str,
        probe: str,
        deadline_s: float,
        reference: asyncio.Future[Completion],
        isolate: bool | None = None,
    ) -> Completion:
        """`send` with the baseline's answer as `reference`, whether it is in yet or not."""
        if reference.done():
            return await self.send(
                endpoint, api, request, gate=gate, probe=probe, deadline_s=deadline_s,
                isolate=isolate, reference=reference.result(),
            )  # fmt: skip
        return await self.send_beside(
            endpoint, api, request, gate=gate, probe=probe, deadline_s=deadline_s,
            reference=reference, isolate=isolate,
        )  # fmt: skip

    async def send_beside(
        self,
        endpoint: Endpoint,
        api: Api,
        request: Mapping[str, Any],
        *,
        gate: str,
        probe: str,
        deadline_s: float,
        reference: Awaitable[Completion],
        isolate: bool | None = None,
    ) -> Completion:
        """`send(..., reference=<the baseline's answer>)`, started before that answer is in.

        The request goes out at once with the unscaled deadline, the floor of the scaled one.
        Only when it times out is the baseline's answer awaited: if it scales the deadline up,
        the cut-short attempt (recorded like any other) is sent again with the scaled deadline,
        so a timeout is one only after the same time `send` would have waited, retried once."""
        if self.hung(endpoint):
            return await self.send(
                endpoint, api, request, gate=gate, probe=probe, deadline_s=deadline_s
            )
        first = await self._attempt(endpoint, api, request, gate, probe, deadline_s, isolate)
        if not timed_out(first):
            self._timeouts_in_a_row[endpoint.name] = 0
            return first
        scaled = scaled_deadline(deadline_s, await reference, self.timeout_factor)
        result = first
        for _ in range(2 if scaled > deadline_s else 1):
            result = await self._attempt(endpoint, api, request, gate, probe, scaled, isolate)
            if not timed_out(result):
                break
        hung = timed_out(result)
        self._timeouts_in_a_row[endpoint.name] = (
            self._timeouts_in_a_row.get(endpoint.name, 0) + 1 if hung else 0
        )
        return result

    async def _attempt(
        self,
        endpoint: Endpoint,
        api: Api,
        request: Mapping[str, Any],
        gate: str,
        probe: str,
        deadline_s: float,
        isolate: bool | None,
    ) -> Completion:
        """One attempt of `send`: the isolation request, then the request, recorded."""
        body = self.body(request)
        if self.isolate if isolate is None else isolate:
            tagged = self.recording(endpoint, gate=gate, probe=f"{probe}:isolation")
            await tagged.completion(self.body(ISOLATION_REQUEST), deadline_s=deadline_s)
        call = endpoint.chat if api == "chat" else endpoint.completion
        result = await call(body, deadline_s=deadline_s)
        self._record(gate, probe, endpoint, api, body, result)
        return result

    def _record(
        self,
        gate: str,
        probe: str,
        endpoint: Endpoint,
        api: Api,
        body: Mapping[str, Any],
        result: Completion,
    ) -> None:
        self.recorder.record(
            gate=gate, probe=probe, side=endpoint.name, api=api, request=body, result=result
        )

    async def both(
        self, api: Api, request: Mapping[str, Any], *, gate: str, probe: str, deadline_s: float
    ) -> tuple[Completion, Completion]:
        """The same request to baseline and candidate (at once when `at_once`); the candidate's
        deadline is scaled to the baseline's latency."""
        reference: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()

        async def baseline() -> Completion:
            b = await self.send(
                self.baseline, api, request, gate=gate, probe=probe, deadline_s=deadline_s
            )
            reference.set_result(b)
            return b

        async def candidate() -> Completion:
            return await self.send_against(
                self.candidate, api, request, gate=gate, probe=probe, deadline_s=deadline_s,
                reference=reference,
            )  # fmt: skip

        return await self.sides(baseline, candidate)
