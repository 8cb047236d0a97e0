"""What the context gate sends: its probes, plan and raw observations (no judgement here)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from servegate.endpoints.types import Completion
from servegate.gates.capabilities import WEATHER_TOOL
from servegate.probes.needles import POSITIONS, Needle, Position, make_needle, needle_grid

NAME = "context"

ProgressFn = Callable[[int, int, str], None]


class Kind(StrEnum):
    NEEDLE = "needle"
    PREFIX_CACHE = "prefix_cache"
    STREAM_TEXT = "stream_text"
    STREAM_TOOLS = "stream_tools"
    CANCEL = "cancel"
    REASONING = "reasoning"


CATEGORY = {
    Kind.NEEDLE: "long_context",
    Kind.PREFIX_CACHE: "prefix_cache",
    Kind.STREAM_TEXT: "stream_parity",
    Kind.STREAM_TOOLS: "stream_parity",
    Kind.CANCEL: "cancellation",
    Kind.REASONING: "reasoning_leak",
}
# What each side's runs of a probe are, in order.
RUN_LABELS = {
    Kind.NEEDLE: ("answer",),
    Kind.PREFIX_CACHE: ("miss", "hit"),
    Kind.STREAM_TEXT: ("plain", "stream"),
    Kind.STREAM_TOOLS: ("plain", "stream"),
    Kind.CANCEL: ("reference", "cut", "after-cancel"),
    Kind.REASONING: ("answer",),
}


def _chat(text: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, **extra}  # fmt: skip


_FORCE = {"type": "function", "function": {"name": "get_weather"}}
_STREAM = {"stream": True, "stream_options": {"include_usage": True}}
TEXT_REQUEST = _chat("Write two short sentences about the sea.", 40)
TOOL_REQUEST = _chat("What is the weather in Paris?", 48, tools=[WEATHER_TOOL],
                     tool_choice=_FORCE)  # fmt: skip
# Long on every model tried: SmolLM2-135M writes a story past 300 tokens, but cuts counting short.
LONG_STREAM_REQUEST = _chat("Write a long story about a dragon who learns to bake bread.", 600,
                            stream=True)  # fmt: skip
AFTER_CANCEL_REQUEST = _chat("Name the capital of France in one word.", 12)
REASONING_REQUEST = _chat("Is 91 a prime number? Think step by step.", 48)
THINK_TAG = re.compile(r"</?\s*(think|thinking|reasoning|thought)\s*>", re.IGNORECASE)


@dataclass(frozen=True)
class ContextPlan:
    """What the gate sends; the defaults fit a 4096-token context on a small CPU model.

    Prompt processing dominates the cost (measured 15-60 tokens/s per engine on a shared 2-core
    CPU; 3000 tokens then exceed a 60 s deadline), so the default needles are a sparse grid:
    every position at 500 tokens, the middle at 1500, and the start at 2500 (~60 % of a 4096
    context), where left truncation and position bugs show first. `full_grid()` gives all nine.
    The prefix-cache probe re-sends `cache_needle`; when that is one of `needles`, its miss is
    that needle's answer, so the long prompt is processed once, not twice."""

    seed: int = 0
    needles: tuple[tuple[int, Position], ...] = (
        (500, "start"), (500, "middle"), (500, "end"), (1500, "middle"), (2500, "start"),
    )  # fmt: skip
    needle_max_tokens: int = 16
    cache_needle: tuple[int, Position] = (1500, "middle")
    cache_max_tokens: int = 48
    hit_ttft_ratio_max: float = 0.5  # a hit is proven when its TTFT is at most this × the miss's
    cancel_after_s: float = 1.5  # streaming time before the cut, after a short answer's latency


@dataclass(frozen=True)
class Step:
    """A probe to send; its requests in the order its kind uses them (see `_run_side`)."""

    probe: str
    kind: Kind
    requests: tuple[Mapping[str, Any], ...]
    needle: Needle | None = None


@dataclass(frozen=True)
class StepObservation:
    """One probe: its main request as sent, and each side's runs (RUN_LABELS order).
    An empty candidate tuple means not sent (the candidate hung on a shorter prompt)."""

    probe: str
    kind: Kind
    request: Mapping[str, Any]
    baseline: tuple[Completion, ...]
    candidate: tuple[Completion, ...]
    needle: Needle | None = None


@dataclass(frozen=True)
class ContextEvidence:
    observations: tuple[StepObservation, ...]
    baseline_url: str
    candidate_url: str
    model: str | None
    plan: ContextPlan = ContextPlan()
    # Each side's context in tokens as it said (None: it did not say), and the needle added at
    # LONG_NEEDLE_SHARE of the smaller one (None: no context known, or the plan already reaches it)
    context_tokens: dict[str, int | None] | None = None
    long_needle_tokens: int | None = None


# A needle this far into the smaller discovered context: position and truncation bugs show at
# long positions first, and a fixed 2,500-token needle is 2 % of a 128k context.
LONG_NEEDLE_SHARE = 0.8


def long_needle(contexts: Mapping[str, int | None], plan: ContextPlan) -> int | None:
    """The length of the needle at LONG_NEEDLE_SHARE of the smaller known context, or None when
    no context is known or the plan's needles already reach that far."""
    known = [t for t in contexts.values() if t is not None]
    if not known:
        return None
    tokens = int(min(known) * LONG_NEEDLE_SHARE) // 100 * 100
    longest = max((n for n, _ in plan.needles), default=0)
    return tokens if tokens > longest else None


def full_grid(
    lengths: Sequence[int] = (500, 1500, 3000), positions: Sequence[Position] = POSITIONS
) -> tuple[tuple[int, Position], ...]:
    """Every (length, position) pair, for `ContextPlan(needles=full_grid())`."""
    return tuple((n.target_tokens, n.position) for n in needle_grid(0, lengths, positions))


def steps(plan: ContextPlan) -> tuple[Step, ...]:
    """Every probe the gate sends under `plan`, in order."""
    cache = make_needle(plan.seed, *plan.cache_needle)
    needles = [make_needle(plan.seed, *pair) for pair in plan.needles if pair != plan.cache_needle]
    # A longer answer than a bare number: KV reuse flips greedy tokens only after a few dozen.
    follow_up = f"Then describe {cache.name} in two sentences."
    cache_request = {**cache.request(plan.cache_max_tokens, follow_up), **_STREAM}
    return (
        *(Step(n.id, Kind.NEEDLE, (n.request(plan.needle_max_tokens),), n) for n in needles),
        Step("prefix-cache", Kind.PREFIX_CACHE, (cache_request,), cache),
        Step("stream-text", Kind.STREAM_TEXT, (TEXT_REQUEST, {**TEXT_REQUEST, **_STREAM})),
        Step("stream-tools", Kind.STREAM_TOOLS, (TOOL_REQUEST, {**TOOL_REQUEST, **_STREAM})),
        Step("cancel", Kind.CANCEL, (AFTER_CANCEL_REQUEST, LONG_STREAM_REQUEST)),
        Step("reasoning", Kind.REASONING, (REASONING_REQUEST,)),
    )
