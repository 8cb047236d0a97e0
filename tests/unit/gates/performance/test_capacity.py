"""Capacity under an SLO, judged on plain data: sweeps of timed answers, no server."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from servegate.config.models import PerformanceConfig, Policy
from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing, Usage
from servegate.gates.performance import evaluate
from servegate.gates.performance.capacity import capacity_check
from servegate.gates.performance.plan import (
    CapacityStep,
    PerformanceEvidence,
    capacity_first_index,
    workload,
)
from servegate.gates.performance.table import CAPACITY_ROW
from servegate.load.arrival import closed_loop
from servegate.load.driver import Exchange, StepBounds, StepEvidence
from servegate.load.monitor import ClientEvidence
from servegate.load.workload import synthetic_source
from servegate.verdict.model import Check, Outcome

SLO_TEXT = "e2el_ms=500"
SETTINGS = PerformanceConfig.model_validate(
    {"slo": SLO_TEXT, "capacity_concurrency": [1, 2, 4, 8], "capacity_requests": 16}
)
SOURCE = synthetic_source(workload(SETTINGS), "m")
TOKENS = 8


@dataclass(frozen=True)
class Step:
    """How one side did at one concurrency: requests over the SLO, and what else went wrong."""

    slow: int = 0  # requests with E2EL 900 ms, over the SLO's 500 ms (the rest take 100 ms)
    timed_out: bool = False  # every request timed out
    client_bound: bool = False  # the load generator was the bottleneck


MET, HUNG = Step(), Step(timed_out=True)
TIMEOUT = RequestError(ErrorCategory.TIMEOUT, "no answer within 60 s")


def _answer(sent_ns: int, e2el_ms: float) -> Completion:
    chunks = tuple(sent_ns + int((20 + (e2el_ms - 20) * k / (TOKENS - 1)) * 1e6)
                   for k in range(TOKENS))  # fmt: skip
    return Completion(
        status=200, content="Once upon a time", finish_reason="length",
        usage=Usage(prompt_tokens=40, completion_tokens=TOKENS, total_tokens=40 + TOKENS),
        timing=Timing(sent_ns=sent_ns, token_chunk_ns=chunks,
                      token_chunk_tokens=(1,) * TOKENS, done_ns=chunks[-1]),
    )  # fmt: skip


def _step(n: int, j: int, how: Step, settings: PerformanceConfig) -> StepEvidence:
    first, t = capacity_first_index(settings, j), 10**12 + j * 10**11
    exchanges = []
    for i in range(settings.capacity_requests):
        if how.timed_out:
            c = Completion(status=None, error=TIMEOUT, timing=Timing(sent_ns=t))
            end = t + 60 * 10**9
        else:
            c = _answer(t, 900.0 if i < how.slow else 100.0)
            end = c.timing.done_ns or t
        exchanges.append(Exchange(first + i, SOURCE(first + i), c, t, end))
    busy, end = (1.0 if how.client_bound else 0.05), max(x.finished_ns for x in exchanges)
    return StepEvidence(
        arrival=closed_loop(n),
        bounds=StepBounds(requests=len(exchanges), duration_s=600, warmup=0, deadline_s=60),
        warmup=(), exchanges=tuple(exchanges), start_ns=t, end_ns=end,
        planned=len(exchanges), stopped_by="requests", peak_in_flight=n,
        client=ClientEvidence(cpu_s=busy, wall_s=1.0, loop_lag_ms=(0.2,) * 50),
        next_index=first + len(exchanges),
    )  # fmt: skip


def _sweep(
    baseline: list[Step],
    candidate: list[Step],
    settings: PerformanceConfig = SETTINGS,
    hung_before: str | None = None,
) -> PerformanceEvidence:
    """The steps as `collect` runs them: sides alternate, a side stops after its first miss
    or a step that timed out entirely (the steps given end where the side stopped)."""
    sides = {"baseline": baseline, "candidate": candidate}
    slo = settings.slo
    assert slo is not None
    run: list[CapacityStep] = []
    for j, n in enumerate(settings.capacity_concurrency):
        for name in ("baseline", "candidate") if j % 2 == 0 else ("candidate", "baseline"):
            if name == hung_before:
                run.append(CapacityStep(name, n, None, f"not sent: {name} was hung", True))
            elif j < len(sides[name]):
                run.append(CapacityStep(name, n, _step(n, j, sides[name][j], settings)))
            else:
                run.append(CapacityStep(name, n, None, f"not sent: {name} stopped"))
    return PerformanceEvidence(
        settings=settings, workload=workload(settings), blocks=(),
        warmup={"baseline": None, "candidate": None}, alone={"baseline": (), "candidate": ()},
        baseline_url="http://b/v1", candidate_url="http://c/v1", model="m", capacity=tuple(run),
    )  # fmt: skip


def _judged(ev: PerformanceEvidence, policy: Policy | None = None) -> Check:
    got = capacity_check(ev, policy or Policy())
    assert got is not None
    assert got.row == CAPACITY_ROW
    return got


def test_both_sides_meeting_the_slo_at_every_step_pass_at_the_highest_tried() -> None:
    got = _judged(_sweep([MET] * 4, [MET] * 4))
    assert got.outcome is Outcome.PASS, got.reason
    assert got.baseline.startswith("≥ 8 (the highest tried) (c1 16/16 met; c2 16/16 met;")
    assert got.candidate == got.baseline
    assert got.ratio == "-"  # both at least 8: the sweep cannot tell them apart
    assert got.policy_key == "capacity_attainment_drop_max"  # its band; alpha is in the limit
    assert "e2el_ms=500" in got.limit


def test_a_candidate_missing_the_slo_where_the_baseline_met_it_fails_naming_the_step() -> None:
    got = _judged(_sweep([MET] * 4, [MET, MET, Step(slow=10)]))
    assert got.outcome is Outcome.FAIL
    assert "at concurrency 4 the baseline met the SLO and the candidate did not" in got.reason
    assert "candidate 6/16 (38%) against the baseline's 16/16 (100%)" in got.reason
    assert "Fisher exact p = " in got.reason
    assert got.candidate == "2 (c1 16/16 met; c2 16/16 met; c4 6/16 missed; not run above c4)"
    assert got.ratio == "≤ 0.25×"  # 2 / (at least 8)


def test_a_miss_that_is_not_significant_passes_and_says_so() -> None:
    # 15 of 16 is below 95 %, so the step missed — but one request is noise, not a regression.
    got = _judged(_sweep([MET] * 4, [MET, MET, Step(slow=1)]))
    assert got.outcome is Outcome.PASS
    assert "missed the SLO at concurrency 4 where the baseline met it, but not" in got.reason
    assert "p = 0.5" in got.reason


def test_a_significant_miss_within_the_effect_size_band_passes_and_names_the_key() -> None:
    # 11 of 16 against 16 of 16: Fisher p 0.022, significant — but a drop of 31 % of requests,
    # the size a burst of load on one side's step gave two clean engines (RESULTS.md)
    got = _judged(_sweep([MET] * 4, [MET, MET, Step(slow=5)]))
    assert got.outcome is Outcome.PASS, got.reason
    assert "p = 0.022" in got.reason
    assert "by 31% of requests, within capacity_attainment_drop_max (50%)" in got.reason
    assert got.policy_key == "capacity_attainment_drop_max"
    tight = Policy(capacity_attainment_drop_max=0.25)
    failed = _judged(_sweep([MET] * 4, [MET, MET, Step(slow=5)]), tight)
    assert failed.outcome is Outcome.FAIL, failed.reason
    assert "at concurrency 4 the baseline met the SLO and the candidate did not" in failed.reason


def test_a_client_bound_deciding_step_is_not_measured_never_a_pass_or_fail() -> None:
    cand = [MET, MET, Step(slow=10, client_bound=True)]
    got = _judged(_sweep([MET] * 4, cand))
    assert got.outcome is Outcome.NOT_MEASURED
    assert "candidate load generator was the bottleneck at concurrency 4" in got.reason
    assert "c4 6/16 missed, client-bound" in got.candidate
    # The baseline's client-bound step where the candidate missed is as undecidable.
    base = [MET, MET, Step(client_bound=True), MET]
    got = _judged(_sweep(base, [MET, MET, Step(slow=10)]))
    assert got.outcome is Outcome.NOT_MEASURED
    assert "baseline load generator" in got.reason


def test_client_bound_steps_that_decide_nothing_leave_the_check_measured() -> None:
    base = [MET, MET, MET, Step(slow=16, client_bound=True)]
    got = _judged(_sweep(base, [MET, MET, MET, MET]))
    assert got.outcome is Outcome.PASS
    assert got.ratio == "≥ 2.00×"


def test_too_few_requests_to_ever_be_significant_are_not_measured() -> None:
    few = SETTINGS.model_copy(update={"capacity_requests": 3})
    got = _judged(_sweep([MET] * 4, [Step(slow=3)], settings=few))
    assert got.outcome is Outcome.NOT_MEASURED
    assert "too few requests at concurrency 1 (3 baseline, 3 candidate)" in got.reason
    assert "capacity_requests" in got.reason


def test_both_sides_missing_at_the_same_step_pass() -> None:
    got = _judged(_sweep([MET, MET, Step(slow=8)], [MET, MET, Step(slow=12)]))
    assert got.outcome is Outcome.PASS
    assert "both sides missed the SLO at concurrency 4" in got.reason
    assert got.ratio == "1.00×"


def test_a_candidate_that_outlasts_the_baseline_passes() -> None:
    got = _judged(_sweep([MET, Step(slow=16)], [MET, MET, Step(slow=16)]))
    assert got.outcome is Outcome.PASS
    assert "the baseline missed the SLO first, at concurrency 2" in got.reason
    assert got.ratio == "2.00×"


def test_a_baseline_that_meets_the_slo_nowhere_leaves_nothing_to_compare() -> None:
    got = _judged(_sweep([Step(slow=16)], [Step(slow=16)]))
    assert got.outcome is Outcome.NOT_MEASURED
    assert "the baseline met the SLO at no concurrency tried" in got.reason
    assert got.baseline == "none (< 1) (c1 0/16 missed; not run above c1)"


def test_a_side_hung_before_the_sweep_is_not_measured() -> None:
    got = _judged(_sweep([MET] * 4, [], hung_before="candidate"))
    assert got.outcome is Outcome.NOT_MEASURED
    assert "the candidate was sent no capacity step: not sent: candidate was hung" in got.reason


def test_a_candidate_that_times_out_on_a_whole_step_fails_there_and_is_reported_hung() -> None:
    ev = _sweep([MET] * 4, [MET, MET, HUNG])
    got = _judged(ev)
    assert got.outcome is Outcome.FAIL
    assert "c4 0/16 missed, every request timed out" in got.candidate
    result = evaluate(ev, Policy())
    [hung] = [f for f in result.findings if f.category == "hung"]
    assert (hung.side, hung.probe) == ("candidate", "capacity:c4")
    assert any(f.probe == CAPACITY_ROW and f.category == "regression" for f in result.findings)


def test_the_sweep_and_each_sides_limit_are_in_the_gate_details() -> None:
    result = evaluate(_sweep([MET] * 4, [MET, Step(slow=16)]), Policy())
    details = result.details["capacity"]
    assert details["slo"] == "e2el_ms=500"
    assert details["baseline"]["limit"]["best"] == 8
    assert details["candidate"]["limit"]["best"] == 1
    assert [s["met"] for s in details["candidate"]["steps"]] == [True, False]
    assert details["candidate"]["not_sent"] == ["not sent: candidate stopped"] * 2


def test_no_slo_is_no_check() -> None:
    ev = _sweep([MET], [MET])
    no_slo = ev.settings.model_copy(update={"slo": None})
    assert capacity_check(replace(ev, settings=no_slo), Policy()) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ttft_ms=fast", "not a number"),
        ("p99=5", "unknown SLO key"),
        ("", "empty SLO"),
    ],
    ids=["not-a-number", "unknown-key", "empty"],
)
def test_a_bad_slo_in_the_configuration_names_the_problem(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PerformanceConfig.model_validate({"slo": value})


@pytest.mark.parametrize(
    "value", [(), (0, 1), (4, 2), (2, 2)], ids=["empty", "zero", "descending", "repeated"]
)
def test_capacity_concurrencies_must_be_positive_and_ascend(value: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="capacity_concurrency"):
        PerformanceConfig.model_validate({"capacity_concurrency": value})


def test_capacity_concurrencies_read_from_yaml_as_a_list_or_a_string_alike() -> None:
    for given in ([1, 2, 4], "1, 2,4"):
        settings = PerformanceConfig.model_validate({"capacity_concurrency": given})
        assert settings.capacity_concurrency == (1, 2, 4)
