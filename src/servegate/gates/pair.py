"""What every gate works on: the two endpoints, the model, and where results are recorded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion

Api = Literal["chat", "completions"]

# A request whose first token differs from every chat template's first token, so that a server that
# reuses the longest matching KV prefix (llama.cpp does) starts the next probe from scratch on both
# sides. Without it the same request twice can flip greedy answers, and a baseline that served an
# earlier run would not be comparable with a fresh candidate.
ISOLATION_REQUEST: Mapping[str, Any] = {"prompt": "0", "max_tokens": 1, "temperature": 0}


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
        result: Completion,
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
        result: Completion,
    ) -> None:
        return None


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

    def body(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The request as sent: with the model filled in when one is set."""
        out = dict(request)
        if self.model is not None:
            out.setdefault("model", self.model)
        return out

    async def send(
        self,
        endpoint: Endpoint,
        api: Api,
        request: Mapping[str, Any],
        *,
        gate: str,
        probe: str,
        deadline_s: float,
    ) -> Completion:
        """One probe request to one side, isolated and recorded."""
        body = self.body(request)
        if self.isolate:
            await endpoint.completion(self.body(ISOLATION_REQUEST), deadline_s=deadline_s)
        call = endpoint.chat if api == "chat" else endpoint.completion
        result = await call(body, deadline_s=deadline_s)
        self.recorder.record(
            gate=gate, probe=probe, side=endpoint.name, api=api, request=body, result=result
        )
        return result

    async def both(
        self, api: Api, request: Mapping[str, Any], *, gate: str, probe: str, deadline_s: float
    ) -> tuple[Completion, Completion]:
        """The same request to baseline then candidate, one after the other: sequential so neither
        side's timing is disturbed by the other on a shared host."""
        b = await self.send(
            self.baseline, api, request, gate=gate, probe=probe, deadline_s=deadline_s
        )
        c = await self.send(
            self.candidate, api, request, gate=gate, probe=probe, deadline_s=deadline_s
        )
        return b, c
