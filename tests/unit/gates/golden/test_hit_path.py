"""Golden's cache-hit path is sent only when a probe needs the baseline's noise.

The noise (each probe's cache-hit answer, and the near-tie limit, degeneration kinds and
allowance drawn from all of them) is read only where the candidate fails a probe the baseline
passes, fails or changes it when streamed, or degenerates where the baseline did not
(`needs_noise`). The property test checks the claim the saving rests on: wherever no probe
needs it, the verdict and every blocking finding are the same whatever the cache-hit answers
were. The collection tests use fake servers through the Endpoint interface (the engine run is
measured in benchmarks/RESULTS-time.md)."""

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.stub_endpoint import StubEndpoint

from servegate.config.models import GateConfig, Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.golden import GoldenEvidence, evaluate
from servegate.gates.golden.collect import collect
from servegate.gates.golden.probe import HIT_NOT_SENT, ProbeObservation, needs_noise
from servegate.gates.pair import EndpointPair, not_sent
from servegate.probes import Probe, default_suite
from servegate.verdict.model import GateResult, Outcome

PROBES = tuple(p for p in default_suite().probes if p.category == "canary")
# Two probes that pass on one of the answers below: "OK" and "Paris".
JUDGED = tuple(p for p in PROBES if p.id in ("canary-ok", "canary-capital"))
# Answers a small model gives: right, wrong, degenerate, empty, looping.
TEXTS = ("OK", "Paris", ",,,,,,,,,,,,,,,,", "", "the the the the the the the the the the")


def _answer(text: str, *, gap: float = 0.3) -> Completion:
    lp = (TokenLogprob(text[:2] or "x", -0.1, top=(("a", -0.1), ("b", -0.1 - gap))),)
    return Completion(status=200, content=text, finish_reason="stop", logprobs=lp)


FAILED = Completion(status=500, error=RequestError(ErrorCategory.SERVER, "HTTP 500"))
answers = st.one_of(
    st.builds(_answer, st.sampled_from(TEXTS), gap=st.floats(0.0, 3.0)), st.just(FAILED)
)


@st.composite
def observation(draw: st.DrawFn) -> ProbeObservation:
    probe = draw(st.sampled_from(JUDGED))
    b = draw(answers)
    # The candidate and the streams repeat the baseline's plain answer more often than not.
    same_or = st.one_of(st.just(b), answers)
    return ProbeObservation(probe, b, draw(same_or), draw(same_or), draw(same_or), draw(same_or))


def _held(obs: ProbeObservation) -> ProbeObservation:
    return ProbeObservation(
        obs.probe, obs.baseline, obs.baseline_stream, not_sent("baseline", HIT_NOT_SENT),
        obs.candidate, obs.candidate_stream,
    )  # fmt: skip


def _evidence(observations: tuple[ProbeObservation, ...]) -> GoldenEvidence:
    return GoldenEvidence(observations, "http://b/v1", "http://c/v1", "m", logprobs=True)


@settings(max_examples=400, deadline=None)
@given(st.lists(observation(), min_size=1, max_size=4))
def test_where_no_probe_needs_the_noise_the_cache_hits_change_nothing(
    observations: list[ProbeObservation],
) -> None:
    full = evaluate(_evidence(tuple(observations)), Policy())
    held = evaluate(_evidence(tuple(_held(o) for o in observations)), Policy())
    if any(needs_noise(o) for o in observations):
        return  # then every cache hit is sent (collect_hits_from_the_first_probe_that_needs_it)
    assert held.status == full.status
    assert sorted((f.probe, f.category) for f in held.findings if f.blocking) == sorted(
        (f.probe, f.category) for f in full.findings if f.blocking
    )
    # No check fails in one and not the other. (The paired degeneration rate may read
    # not-applicable without the cache hits where it passed or was not measured with them:
    # when only a cache hit showed the baseline degenerating. Neither blocks.)
    assert _failed(held) == _failed(full)


def _failed(result: GateResult) -> set[str]:
    return {c.name for c in result.checks if c.outcome is Outcome.FAIL}


def test_a_candidate_failure_on_a_passing_probe_needs_the_noise() -> None:
    ok, wrong = _answer("OK"), _answer(",,,,,,,,,,,,,,,,")
    probe = next(p for p in PROBES if p.id == "canary-ok")
    assert not needs_noise(ProbeObservation(probe, ok, ok, ok, ok, ok))
    assert needs_noise(ProbeObservation(probe, ok, ok, ok, wrong, ok))
    assert needs_noise(ProbeObservation(probe, ok, ok, ok, ok, wrong))  # the stream only


class Server(StubEndpoint):
    """Answers `answer(messages)`; records the label of every request it is sent."""

    def __init__(self, name: str, wrong: frozenset[str] = frozenset()) -> None:
        super().__init__(name, raw_status=404)  # serves no Responses API
        self.wrong = wrong  # probe contents answered with commas
        self.sent: list[str] = []

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        return Completion(status=200, content="0")  # the isolation request

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        content = str(body["messages"][-1]["content"])
        self.sent.append(content)
        return _answer(",,,,,,,,,,,,,,,," if content in self.wrong else "OK")


def _collect(b: Server, c: Server, **settings: Any) -> GoldenEvidence:
    cfg = GateConfig.model_validate(
        {"baseline": {"url": b.base_url}, "candidate": {"url": c.base_url},
         "categories": ["canary"], **settings}
    )  # fmt: skip
    return asyncio.run(collect(EndpointPair(b, c), cfg))


def _content(probe: Probe) -> str:
    return str(probe.request["messages"][-1]["content"])


def _sent(**settings: Any) -> tuple[GoldenEvidence, Counter[str]]:
    """The evidence, and how often the baseline was asked each probe's content."""
    b, c = Server("b"), Server("c", **settings.pop("candidate", {}))
    return _collect(b, c, **settings), Counter(b.sent)


def test_an_identical_candidate_gets_no_cache_hit_and_the_report_says_so() -> None:
    ev, held = _sent()
    assert all(o.hit_not_sent for o in ev.observations)
    _, always = _sent(baseline_paths="always")
    assert always - held == Counter(_content(p) for p in PROBES)  # one cache hit each
    result = evaluate(ev, Policy())
    assert result.status == "pass"
    regressions = next(ch for ch in result.checks if ch.name == "regressions")
    assert f"cache-hit path not sent to {len(PROBES)}" in regressions.baseline
    assert result.metrics["cache_hits_not_sent"] == len(PROBES)


def test_with_always_every_probe_gets_its_cache_hit() -> None:
    ev, _ = _sent(baseline_paths="always")
    assert all(o.baseline_hit.ok and not o.hit_not_sent for o in ev.observations)
    result = evaluate(ev, Policy())
    assert result.metrics["cache_hits_not_sent"] == 0
    assert "not sent" not in next(ch for ch in result.checks if ch.name == "regressions").baseline


def test_cache_hits_from_the_first_probe_that_needs_them_and_the_earlier_ones_filled() -> None:
    wrong = {"wrong": frozenset({_content(PROBES[2])})}
    ev, needed = _sent(candidate=wrong)
    _, always = _sent(baseline_paths="always", candidate=wrong)
    # Every probe has its cache hit, so the noise is read as with `always`; the two before the
    # third (the first that needed it) were sent once more, isolated, before theirs.
    assert all(o.baseline_hit.ok and not o.hit_not_sent for o in ev.observations)
    assert needed - always == Counter(_content(p) for p in PROBES[:2])
    assert evaluate(ev, Policy()).status == "fail"


def test_the_filled_cache_hits_move_the_progress_bar_after_the_probes() -> None:
    b, c = Server("b"), Server("c", wrong=frozenset({_content(PROBES[2])}))
    cfg = GateConfig.model_validate(
        {"baseline": {"url": b.base_url}, "candidate": {"url": c.base_url},
         "categories": ["canary"]}
    )  # fmt: skip
    seen: list[tuple[int, int, str]] = []
    asyncio.run(collect(EndpointPair(b, c), cfg, progress=lambda *step: seen.append(step)))
    n = len(PROBES)
    # The probes one by one, then the two held-back cache hits counted after them, then done.
    assert seen == [
        *((i, n, p.id) for i, p in enumerate(PROBES)),
        (n, n + 2, f"{PROBES[0].id}: cache hit"),
        (n + 1, n + 2, f"{PROBES[1].id}: cache hit"),
        (n + 2, n + 2, ""),
    ]
