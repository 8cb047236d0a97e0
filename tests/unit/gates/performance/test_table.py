from servegate.gates.performance.table import performance_table
from servegate.load.metrics import DEFINITIONS
from servegate.verdict.judgement import check, gate_result, not_measured
from servegate.verdict.model import GateResult, Status


def _gate(name: str, *checks_: object) -> GateResult:
    return gate_result(name, list(checks_))  # type: ignore[arg-type]


STARTUP = _gate(
    "startup", check("ready", "ready", failed=False, baseline="12 ms", candidate="15 ms",
                     row="ready time"),
)  # fmt: skip
PERFORMANCE = _gate(
    "performance",
    check("ttft_ms", "TTFT P95", failed=True, baseline="50 ms", candidate="65 ms", ratio="1.30×",
          interval="1.24–1.37× (95%)", limit="≤ 1.20×", row="TTFT P95"),
    not_measured("tpot_ms", "TPOT P95", "too few samples", row="TPOT P95"),
)  # fmt: skip


def test_rows_are_the_checks_with_their_ratio_interval_and_definition() -> None:
    ready, ttft, tpot = performance_table([STARTUP, PERFORMANCE])
    assert (ready.metric, ready.gate, ready.baseline, ready.candidate, ready.status) == (
        "ready time", "startup", "12 ms", "15 ms", Status.PASS,
    )  # fmt: skip
    assert (ttft.ratio, ttft.interval, ttft.threshold, ttft.status) == (
        "1.30×", "1.24–1.37× (95%)", "≤ 1.20×", Status.FAIL,
    )  # fmt: skip
    assert ttft.definition == DEFINITIONS["ttft_ms"]
    assert (tpot.metric, tpot.status) == ("TPOT P95", Status.INCONCLUSIVE)


def test_no_performance_report_without_a_performance_gate_that_ran() -> None:
    skipped = GateResult(name="performance", status=Status.SKIP, summary="skipped")
    assert performance_table([STARTUP]) == ()
    assert performance_table([STARTUP, skipped]) == ()
