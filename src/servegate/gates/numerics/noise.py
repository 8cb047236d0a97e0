"""The noise floor: how far the baseline drifts from itself, so a candidate is only blamed for more.

A deterministic engine answers the same request twice identically (A/A drift exactly 0), which is
no scale at all: every real kernel change would look like a bug. So the floor also takes the
engine's own *path noise* — the same greedy request along equivalent paths the baseline offers
without a restart:

- `repeat`: sent again, isolated (the A/A pair: non-zero on batch-variant engines such as vLLM);
- `cache-hit`: sent again right after itself without isolation, so the server can reuse the KV
  prefix (on llama.cpp this flips about one greedy answer in five);
- `stream`: the same request streamed;
- `alongside`: sent together with another request, so a batching server batches them;
- `replica`: a second baseline server (`--baseline-replica`).

Each path's answer is compared with the baseline's first answer exactly as the candidate's is
(tokens.compare), and the candidate's limits are `noise_k × floor + tolerance` (Policy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servegate.endpoints.recording import part
from servegate.endpoints.types import Completion
from servegate.gates.pair import Api, EndpointPair
from servegate.gates.tokens import TokenComparison, compare, token_pair
from servegate.stats.distribution import DistributionSummary

NAME = "numerics"
PATHS = ("repeat", "cache-hit", "stream", "alongside")
NOISE_PART = "noise floor (the baseline's own paths)"
# What the `alongside` path sends next to the probe: a short, unrelated request.
FILLER_REQUEST: Mapping[str, Any] = {
    "messages": [{"role": "user", "content": "Name a colour."}],
    "max_tokens": 8,
    "temperature": 0,
}


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """One numerics probe as sent to every side."""

    probe: str
    api: Api
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PathComparison:
    """The baseline's answer along one path against its first answer to the same request."""

    path: str
    comparison: TokenComparison


@dataclass(frozen=True)
class NoiseFloor:
    """The baseline against itself over every path; `zero()` when nothing was measured."""

    comparisons: tuple[PathComparison, ...]
    latency_spread: DistributionSummary  # |e2el_a - e2el_b| / max, per repeat pair
    unmeasured_paths: tuple[str, ...] = ()  # paths tried that gave no comparable answer
    # Why the paths were not sent: the candidate's answers decided every check the floor feeds
    # without it (judgement.floor_not_needed); "" when they were sent or tried.
    not_needed: str = ""

    @classmethod
    def zero(cls) -> NoiseFloor:
        """No A/A data: limits fall back to the policy tolerance alone (and the report says so)."""
        return cls((), DistributionSummary.from_values(()))

    @classmethod
    def skipped(cls, why: str) -> NoiseFloor:
        """The paths were not sent because the floor could not change the verdict: `why`."""
        return cls((), DistributionSummary.from_values(()), not_needed=why)

    @property
    def measured(self) -> bool:
        return bool(self.comparisons)

    @property
    def source(self) -> str:
        return "+".join(self.paths) or ("not needed" if self.not_needed else "none")

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.path for p in self.comparisons))

    def _of(self, path: str | None) -> list[TokenComparison]:
        return [p.comparison for p in self.comparisons if path is None or p.path == path]

    def flip_rate(self, path: str | None = None) -> float | None:
        """Share of pairs whose greedy tokens diverged at all."""
        cmps = self._of(path)
        return sum(not c.exact for c in cmps) / len(cmps) if cmps else None

    def mean_abs_dlogprob(self, path: str | None = None) -> float | None:
        values = [c.mean_abs_dlogprob for c in self._of(path) if c.mean_abs_dlogprob is not None]
        return sum(values) / len(values) if values else None

    def tie_gaps_nats(self, path: str | None = None) -> list[float]:
        """Every gap at which the baseline flipped against itself."""
        return [c.gap_nats for c in self._of(path) if c.gap_nats is not None]

    def tie_gap_nats(self, path: str | None = None) -> float | None:
        """The largest gap at which the baseline flipped against itself: benign by definition."""
        gaps = [c.gap_nats for c in self._of(path) if c.gap_nats is not None]
        return max(gaps, default=None)

    @property
    def exact_match_rate(self) -> float | None:
        rate = self.flip_rate()
        return None if rate is None else 1.0 - rate

    @property
    def divergence(self) -> DistributionSummary:
        """First-divergence token indices of the pairs that differed."""
        return DistributionSummary.from_values(
            c.first_divergence for c in self._of(None) if c.first_divergence is not None
        )

    @property
    def min_topk_jaccard(self) -> float | None:
        values = [c.topk_jaccard for c in self._of(None) if c.topk_jaccard is not None]
        return min(values, default=None)

    def metrics(self) -> dict[str, float | int | str | None]:
        """The floor as report metrics (prefixed `aa_`), overall and per path."""
        out: dict[str, float | int | str | None] = {
            "aa_source": self.source,
            "aa_pairs": len(self.comparisons),
            "aa_exact_match_rate": self.exact_match_rate,
            "aa_first_divergence_p50": self.divergence.p50,
            "aa_mean_abs_dlogprob_nats": self.mean_abs_dlogprob(),
            "aa_tie_gap_nats": self.tie_gap_nats(),
            "aa_min_topk_jaccard": self.min_topk_jaccard,
            "aa_latency_spread_p50": self.latency_spread.p50,
            "aa_latency_spread_max": self.latency_spread.max,
            "aa_unmeasured_paths": ",".join(self.unmeasured_paths) or None,
            "aa_not_needed": self.not_needed or None,
        }
        for path in self.paths:
            key = path.replace("-", "_")
            out[f"aa_{key}_flip_rate"] = self.flip_rate(path)
            out[f"aa_{key}_mean_abs_dlogprob_nats"] = self.mean_abs_dlogprob(path)
        return out


def _spread(a: Completion, b: Completion) -> float | None:
    ta, tb = a.timing.e2el_ms, b.timing.e2el_ms
    if ta is None or tb is None or max(ta, tb) <= 0:
        return None
    return abs(ta - tb) / max(ta, tb)


async def _alongside(
    pair: EndpointPair, req: ProbeRequest, label: str, deadline_s: float
) -> Completion:
    """The probe and a filler request in flight together (after one isolation request)."""
    probe, _ = await asyncio.gather(
        pair.send(pair.baseline, req.api, req.body, gate=NAME, probe=label, deadline_s=deadline_s),
        pair.send(
            pair.baseline,
            "chat",
            FILLER_REQUEST,
            gate=NAME,
            probe=f"{label}:filler",
            deadline_s=deadline_s,
            isolate=False,
        ),
    )
    return probe


async def _paths(
    pair: EndpointPair, req: ProbeRequest, paths: Sequence[str], deadline_s: float
) -> list[tuple[str, Completion]]:
    with part(NOISE_PART):
        return await _along(pair, req, paths, deadline_s)


async def _along(
    pair: EndpointPair, req: ProbeRequest, paths: Sequence[str], deadline_s: float
) -> list[tuple[str, Completion]]:
    out: list[tuple[str, Completion]] = []
    for path in paths:
        label = f"aa:{path}:{req.probe}"
        send = pair.send
        if path == "repeat":
            got = await send(
                pair.baseline, req.api, req.body, gate=NAME, probe=label, deadline_s=deadline_s
            )
        elif path == "cache-hit":  # right after `repeat` (or the first answer): the same prefix
            got = await send(
                pair.baseline,
                req.api,
                req.body,
                gate=NAME,
                probe=label,
                deadline_s=deadline_s,
                isolate=False,
            )
        elif path == "stream":
            body = {**req.body, "stream": True}
            got = await send(
                pair.baseline, req.api, body, gate=NAME, probe=label, deadline_s=deadline_s
            )
        else:
            got = await _alongside(pair, req, label, deadline_s)
        out.append((path, got))
    if pair.replica is not None:
        got = await pair.send(
            pair.replica,
            req.api,
            req.body,
            gate=NAME,
            probe=f"aa:replica:{req.probe}",
            deadline_s=deadline_s,
        )
        out.append(("replica", got))
    return out


async def first_answer(pair: EndpointPair, req: ProbeRequest, deadline_s: float) -> Completion:
    """The baseline's first answer to `req`, isolated: what every path and the candidate are
    compared with."""
    return await pair.send(
        pair.baseline, req.api, req.body, gate=NAME, probe=f"aa:first:{req.probe}",
        deadline_s=deadline_s,
    )  # fmt: skip


class _Floor:
    """The comparisons of each path's answer with the first answer, as they come in."""

    def __init__(self) -> None:
        self.comparisons: list[PathComparison] = []
        self.spreads: list[float] = []
        self.tried: set[str] = set()

    def add(
        self, req: ProbeRequest, first: Completion, answers: list[tuple[str, Completion]]
    ) -> None:
        for path, again in answers:
            self.tried.add(path)
            tokens = token_pair(first, again)
            if tokens is None:
                continue
            self.comparisons.append(PathComparison(path, compare(req.probe, *tokens)))
            if path in ("repeat", "replica") and (spread := _spread(first, again)) is not None:
                self.spreads.append(spread)

    def floor(self) -> NoiseFloor:
        got = {c.path for c in self.comparisons}
        return NoiseFloor(
            tuple(self.comparisons),
            DistributionSummary.from_values(self.spreads),
            tuple(sorted(self.tried - got)),
        )


async def collect(
    pair: EndpointPair,
    requests: Sequence[ProbeRequest],
    *,
    deadline_s: float,
    paths: Sequence[str] = PATHS,
    firsts: dict[str, Completion] | None = None,
    on_first: Callable[[str, Completion], None] | None = None,
) -> NoiseFloor:
    """Send each request to the baseline, then along each path (and to the replica), in order.
    The first answer of each probe goes into `firsts` when given, so the comparison with the
    candidate reuses it instead of asking the baseline again, and to `on_first` as it comes."""
    floor = _Floor()
    for req in requests:
        first = await first_answer(pair, req, deadline_s)
        if firsts is not None:
            firsts[req.probe] = first
        if on_first is not None:
            on_first(req.probe, first)
        floor.add(req, first, await _paths(pair, req, paths, deadline_s))
    return floor.floor()


async def along_paths(
    pair: EndpointPair,
    requests: Sequence[ProbeRequest],
    firsts: Mapping[str, Completion],
    *,
    deadline_s: float,
    paths: Sequence[str] = PATHS,
) -> NoiseFloor:
    """The floor from first answers already in hand: each request along each path (and to the
    replica), compared with its first answer. The `cache-hit` path still follows `repeat` of
    the same request, so the server can reuse its prefix as in `collect`."""
    floor = _Floor()
    for req in requests:
        floor.add(req, firsts[req.probe], await _paths(pair, req, paths, deadline_s))
    return floor.floor()
