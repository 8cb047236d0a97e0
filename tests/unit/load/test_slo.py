import pytest

from servegate.load import SLO, SLOError, parse_slo


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ttft_ms=500", SLO(ttft_ms=500)),
        ("ttft_ms=500,tpot_ms=50,e2el_ms=5000", SLO(ttft_ms=500, tpot_ms=50, e2el_ms=5000)),
        ("ttft_ms=500 tpot_ms=50", SLO(ttft_ms=500, tpot_ms=50)),
        (" e2el_ms=2.5e3 , ttft_ms=0.5 ", SLO(ttft_ms=0.5, e2el_ms=2500)),
    ],
    ids=["one", "all-commas", "spaces", "floats-and-padding"],
)
def test_slo_strings_parse(text: str, expected: SLO) -> None:
    assert parse_slo(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty SLO"),
        ("ttft_ms", "is not key=value"),
        ("ttft=500", "unknown SLO key 'ttft'"),
        ("ttft_ms=fast", "not a number"),
        ("ttft_ms=0", "positive"),
        ("ttft_ms=-5", "positive"),
        ("ttft_ms=inf", "finite"),
        ("ttft_ms=1,ttft_ms=2", "given twice"),
    ],
    ids=["empty", "no-value", "unknown-key", "word", "zero", "negative", "inf", "twice"],
)
def test_bad_slo_strings_name_the_problem_on_one_line(text: str, message: str) -> None:
    with pytest.raises(SLOError, match=message) as info:
        parse_slo(text)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_a_request_meets_the_slo_only_when_every_bound_holds() -> None:
    slo = SLO(ttft_ms=100, tpot_ms=10, e2el_ms=1000)
    assert slo.met(ttft_ms=100, tpot_ms=10, e2el_ms=1000)
    assert not slo.met(ttft_ms=101, tpot_ms=10, e2el_ms=1000)
    assert not slo.met(ttft_ms=50, tpot_ms=11, e2el_ms=1000)
    assert not slo.met(ttft_ms=50, tpot_ms=5, e2el_ms=1001)


def test_a_one_token_answer_meets_a_tpot_bound_vacuously_but_a_missing_ttft_never_does() -> None:
    slo = SLO(ttft_ms=100, tpot_ms=10)
    assert slo.met(ttft_ms=20, tpot_ms=None, e2el_ms=20)
    assert not slo.met(ttft_ms=None, tpot_ms=None, e2el_ms=None)


def test_describe_round_trips() -> None:
    slo = SLO(ttft_ms=500, e2el_ms=2500.5)
    assert parse_slo(slo.describe()) == slo
