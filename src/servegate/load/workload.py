"""Workloads as data: what a load run sends, recorded in its result so a later run repeats it.

A workload spec is frozen data (synthetic lengths and seed; the golden suite's name, version and
probe ids; a replay file's path and SHA-256). `work_source` turns a spec into a function from a
run-wide request index to the request to send: request i of a run is always the same request.
Every request is streamed with usage (`stream: true`, `stream_options.include_usage`), because
TTFT and ITL need the stream; a replayed body that asked for no stream is streamed all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servegate.load.replay import ReplayTraffic
from servegate.load.synthetic import synthetic_prompt
from servegate.probes.models import Suite

__all__ = [
    "Api",
    "GoldenWorkload",
    "ReplayWorkload",
    "SyntheticWorkload",
    "WorkItem",
    "WorkSource",
    "Workload",
    "golden_source",
    "golden_workload",
    "replay_source",
    "replay_workload",
    "streamed",
    "synthetic_source",
]

Api = Literal["chat", "completions"]
JSON_FORMATS = frozenset({"json_object", "json_schema"})


class SyntheticWorkload(BaseModel):
    """Random-word prompts of about `input_tokens` tokens asking for `output_tokens` tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["synthetic"] = "synthetic"
    input_tokens: int = Field(default=256, ge=1)
    output_tokens: int = Field(default=128, ge=1)
    seed: int = 0
    temperature: float = Field(default=0.0, ge=0)
    logprobs: bool = False  # ask for them so every chunk's token count is known (per-token ITL)


class GoldenWorkload(BaseModel):
    """The golden suite's requests, in suite order, cycled."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["golden"] = "golden"
    suite: str
    suite_version: int
    probe_ids: tuple[str, ...]


class ReplayWorkload(BaseModel):
    """A JSONL traffic file; `time_scale` multiplies its timestamp gaps (0.5 = twice as fast)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["replay"] = "replay"
    path: str
    sha256: str
    requests: int = Field(ge=1)
    timestamps: bool
    time_scale: float = Field(default=1.0, gt=0)


Workload = Annotated[
    SyntheticWorkload | GoldenWorkload | ReplayWorkload, Field(discriminator="kind")
]


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One request to send, and what it asked for (to check the answer against)."""

    api: Api
    body: Mapping[str, Any]
    label: str
    expects_json: bool = False
    input_tokens: int | None = None  # synthetic: the prompt length asked for, before the template
    max_tokens: int | None = None


WorkSource = Callable[[int], WorkItem]


def streamed(
    body: Mapping[str, Any], model: str | None, *, keep_model: bool = False
) -> dict[str, Any]:
    """The body as sent: the model set (kept if `keep_model` and present), streamed with usage."""
    out = dict(body)
    if model is not None and not (keep_model and "model" in out):
        out["model"] = model
    options = out.get("stream_options")
    out["stream"] = True
    out["stream_options"] = {
        **(options if isinstance(options, dict) else {}),
        "include_usage": True,
    }
    return out


def _expects_json(body: Mapping[str, Any]) -> bool:
    fmt = body.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") in JSON_FORMATS


def _api(body: Mapping[str, Any]) -> Api:
    return "chat" if "messages" in body else "completions"


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def synthetic_source(spec: SyntheticWorkload, model: str | None) -> WorkSource:
    def item(index: int) -> WorkItem:
        body: dict[str, Any] = {
            "messages": [
                {"role": "user", "content": synthetic_prompt(spec.seed, index, spec.input_tokens)}
            ],
            "max_tokens": spec.output_tokens,
            "temperature": spec.temperature,
        }
        if spec.logprobs:
            body["logprobs"] = True
        return WorkItem(
            api="chat",
            body=streamed(body, model),
            label=f"synthetic {index}",
            input_tokens=spec.input_tokens,
            max_tokens=spec.output_tokens,
        )

    return item


def _cycled(items: tuple[WorkItem, ...]) -> WorkSource:
    if not items:
        raise ValueError("a workload needs at least one request")

    def item(index: int) -> WorkItem:
        return items[index % len(items)]

    return item


def golden_workload(suite: Suite) -> GoldenWorkload:
    return GoldenWorkload(
        suite=suite.name, suite_version=suite.version, probe_ids=tuple(p.id for p in suite.probes)
    )


def golden_source(suite: Suite, model: str | None) -> WorkSource:
    """The suite's requests as sent by the golden gate (greedy unless the probe says otherwise)."""
    return _cycled(
        tuple(
            WorkItem(
                api=probe.api,
                body=streamed(probe.request, model),
                label=probe.id,
                expects_json=_expects_json(probe.request),
                max_tokens=_max_tokens(probe.request),
            )
            for probe in suite.probes
        )
    )


def replay_workload(traffic: ReplayTraffic, time_scale: float = 1.0) -> ReplayWorkload:
    return ReplayWorkload(
        path=traffic.path,
        sha256=traffic.sha256,
        requests=len(traffic.bodies),
        timestamps=traffic.offsets_s is not None,
        time_scale=time_scale,
    )


def replay_source(traffic: ReplayTraffic, model: str | None, *, keep_model: bool) -> WorkSource:
    """The file's bodies in order, cycled; each keeps its own `model` when `keep_model`."""
    return _cycled(
        tuple(
            WorkItem(
                api=_api(body),
                body=streamed(body, model, keep_model=keep_model),
                label=f"line {line}",
                expects_json=_expects_json(body),
                max_tokens=_max_tokens(body),
            )
            for body, line in zip(traffic.bodies, traffic.line_numbers, strict=True)
        )
    )
