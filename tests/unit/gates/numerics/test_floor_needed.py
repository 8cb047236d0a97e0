"""Numerics measures the baseline's noise floor only when it can change the verdict.

The floor only widens two limits: the near-tie limit (never below the policy margin) and the
|Δlogprob| limit (`noise_k` × floor + tolerance). When every probe matched token for token and
the drift is within the tolerance alone, both checks pass at any floor (`floor_not_needed`).
The property test checks that claim against `evaluate` with floors of every size; the
collection tests use fake servers through the Endpoint interface (the engine runs are in
benchmarks/RESULTS-time.md)."""

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.gates.numerics.test_evaluate import judge, observe
from tests.unit.stub_endpoint import StubEndpoint

from servegate.config.models import GateConfig, Policy
from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates import numerics
from servegate.gates.numerics.judgement import floor_not_needed
from servegate.gates.numerics.noise import NoiseFloor, PathComparison
from servegate.gates.numerics.plan import NumericsConfig
from servegate.gates.pair import EndpointPair
from servegate.gates.tokens import compare
from servegate.stats.distribution import DistributionSummary
from servegate.verdict.model import GateResult, Outcome

TOLERANCE = Policy().tolerance_for("m").dlogprob_nats


def _tokens(words: tuple[str, ...], shift: float, gap: float) -> tuple[TokenLogprob, ...]:
    return tuple(
        TokenLogprob(w, -0.1 - shift, ((w, -0.1 - shift), ("z", -0.1 - shift - gap))) for w in words
    )


def _answer(tokens: tuple[TokenLogprob, ...]) -> Completion:
    return Completion(status=200, content="".join(t.token for t in tokens), logprobs=tokens)


words = st.lists(st.sampled_from(("O", "K", "!", "Paris")), min_size=1, max_size=4).map(tuple)


@st.composite
def observations(draw: st.DrawFn) -> list[Any]:
    out = []
    for i in range(draw(st.integers(1, 4))):
        b = draw(words)
        gap = draw(st.floats(0.0, 4.0))
        c = draw(st.one_of(st.just(b), words))  # the same words more often than not
        shift = draw(st.sampled_from((0.0, TOLERANCE / 2, TOLERANCE, 2 * TOLERANCE)))
        out.append(observe(_answer(_tokens(b, 0.0, gap)), _answer(_tokens(c, shift, gap)), f"p{i}"))
    return out


@st.composite
def floors(draw: st.DrawFn) -> NoiseFloor:
    """A floor as the baseline's paths could give it: flips at any gap, drift of any size."""
    comparisons = []
    for i in range(draw(st.integers(1, 4))):
        a, b = draw(words), draw(words)
        gap, shift = draw(st.floats(0.0, 4.0)), draw(st.floats(0.0, 1.0))
        cmp = compare(f"p{i}", _tokens(a, 0.0, gap), _tokens(b, shift, gap))
        comparisons.append(PathComparison(draw(st.sampled_from(("repeat", "cache-hit"))), cmp))
    return NoiseFloor(tuple(comparisons), DistributionSummary.from_values(()))


def _failed(result: GateResult) -> set[str]:
    return {c.name for c in result.checks if c.outcome is Outcome.FAIL}


@settings(max_examples=300, deadline=None)
@given(observations(), floors())
def test_where_the_floor_is_not_needed_no_floor_changes_the_verdict(
    observed: list[Any], floor: NoiseFloor
) -> None:
    why = floor_not_needed(observed, Policy(), "m")
    if why is None:
        return  # then the paths are sent (test_a_flip_or_drift_sends_the_paths)
    without = judge(*observed, noise=NoiseFloor.skipped(why))
    measured = judge(*observed, noise=floor)
    assert without.status == measured.status
    assert _failed(without) == _failed(measured)
    assert {f.category for f in without.findings if f.blocking} == {
        f.category for f in measured.findings if f.blocking
    }


def test_a_flip_or_drift_beyond_the_tolerance_needs_the_floor() -> None:
    ok = _tokens(("O", "K"), 0.0, 1.0)
    assert floor_not_needed([observe(_answer(ok), _answer(ok))], Policy(), "m") is not None
    flipped = _tokens(("O", "!"), 0.0, 1.0)
    assert floor_not_needed([observe(_answer(ok), _answer(flipped))], Policy(), "m") is None
    drifted = _tokens(("O", "K"), 2 * TOLERANCE, 1.0)
    assert floor_not_needed([observe(_answer(ok), _answer(drifted))], Policy(), "m") is None
    failed = Completion(status=None, content=None)
    assert floor_not_needed([observe(_answer(ok), failed)], Policy(), "m") is None


def test_a_floor_not_needed_is_said_where_its_limit_is_read() -> None:
    ok = _tokens(("O", "K"), 0.0, 1.0)
    why = floor_not_needed([observe(_answer(ok), _answer(ok))], Policy(), "m")
    assert why is not None
    result = judge(observe(_answer(ok), _answer(ok)), noise=NoiseFloor.skipped(why))
    drift = next(c for c in result.checks if c.name == "prefix_dlogprob")
    assert drift.outcome is Outcome.PASS
    assert "not needed" in drift.baseline
    assert "noise_floor" not in {c.name for c in result.checks}  # not a gap: a decision
    assert result.metrics["aa_source"] == "not needed"


class Server(StubEndpoint):
    """Answers every chat request with `words`, and counts the requests by their prompt."""

    def __init__(self, name: str, words: tuple[str, ...] = ("O", "K")) -> None:
        super().__init__(name)
        self.words = words
        self.sent: Counter[str] = Counter()

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        return Completion(status=200, content="0")  # the isolation request

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        self.sent[str(body["messages"][-1]["content"])] += 1
        return _answer(_tokens(self.words, 0.0, 1.0))


OPTS = NumericsConfig(
    prompts=(("a", "Say A."), ("b", "Say B.")), perplexity=False, cross_scoring=False
)


def _collect(candidate_words: tuple[str, ...], **settings: Any) -> tuple[Any, Server]:
    b, c = Server("b"), Server("c", candidate_words)
    cfg = GateConfig.model_validate(
        {"baseline": {"url": b.base_url}, "candidate": {"url": c.base_url}, **settings}
    )
    return asyncio.run(numerics.collect(EndpointPair(b, c), cfg, OPTS)), b


def test_an_identical_candidate_is_judged_without_the_baseline_paths() -> None:
    ev, baseline = _collect(("O", "K"))
    assert ev.noise.not_needed.startswith("not needed: all 2 probes answered token for token")
    # The pilot and each probe's first answer: nothing along the paths.
    assert baseline.sent == Counter({"Say A.": 2, "Say B.": 1})
    checks = {c.name: c.outcome for c in numerics.evaluate(ev, Policy()).checks}
    assert checks["confident_flips"] is checks["prefix_dlogprob"] is Outcome.PASS


def test_a_candidate_that_flips_gets_every_path_and_always_sends_them_anyway() -> None:
    flipped, baseline = _collect(("O", "!"))
    assert flipped.noise.measured
    assert set(flipped.noise.paths) == {"repeat", "cache-hit", "stream", "alongside"}
    always, baseline_always = _collect(("O", "K"), baseline_paths="always")
    assert always.noise.measured
    assert not always.noise.not_needed
    # Each probe along the four paths, the alongside path with its filler beside it.
    paths = Counter({"Say A.": 6, "Say B.": 5, "Name a colour.": 2})
    assert baseline.sent == baseline_always.sent == paths
