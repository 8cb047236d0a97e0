from collections.abc import Callable

import pytest

from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.types import Completion
from servegate.load import SLO, measure, summarise
from servegate.load.metrics import DEFINITIONS

Make = Callable[..., Completion]


def test_ttft_e2el_and_tpot_follow_the_definitions(completion: Make) -> None:
    m = measure(completion((50.0, 60.0, 70.0, 80.0, 90.0), usage=5))
    assert m.ttft_ms == 50.0
    assert m.e2el_ms == 90.0
    assert m.tpot_ms == pytest.approx((90.0 - 50.0) / (5 - 1))
    assert m.itl_chunk_ms == pytest.approx((10.0, 10.0, 10.0, 10.0))
    assert (m.output_tokens, m.token_source) == (5, "usage")


def test_a_one_token_answer_has_ttft_and_e2el_but_no_tpot_or_itl(completion: Make) -> None:
    m = measure(completion((40.0,), usage=1))
    assert m.ttft_ms == m.e2el_ms == 40.0
    assert m.tpot_ms is None
    assert m.itl_chunk_ms == m.itl_token_ms == ()


def test_chunks_carrying_several_tokens_split_their_gap_per_token(completion: Make) -> None:
    # first chunk 2 tokens, then chunks of 3 and 1: 6 tokens in all
    m = measure(completion((10.0, 40.0, 50.0), tokens=(2, 3, 1), usage=6))
    assert m.itl_chunk_ms == pytest.approx((30.0, 10.0))
    assert m.itl_token_ms == pytest.approx((10.0, 10.0, 10.0, 10.0))
    assert m.tpot_ms == pytest.approx((50.0 - 10.0) / 5)


def test_without_usage_the_count_comes_from_logprobs_else_is_estimated(completion: Make) -> None:
    from_logprobs = measure(completion((10.0, 20.0, 30.0), logprobs=3))
    assert (from_logprobs.output_tokens, from_logprobs.token_source) == (3, "logprobs")
    estimated = measure(completion((10.0, 20.0, 30.0), tokens=(2, 2, 2)))
    assert (estimated.output_tokens, estimated.token_source) == (6, "estimated")
    summary = summarise([estimated], duration_s=1.0, peak_concurrency=1)
    assert summary.output_tokens_estimated
    assert summary.output_token_sources == {"estimated": 1}


def test_usage_beats_the_streamed_count_for_tpot(completion: Make) -> None:
    # 3 chunks, but the server says 9 tokens (e.g. chunks it did not mark)
    m = measure(completion((10.0, 20.0, 30.0), usage=9))
    assert m.tpot_ms == pytest.approx(20.0 / 8)


def test_a_stream_without_token_chunks_has_no_ttft(completion: Make) -> None:
    m = measure(completion((), usage=0, text=""))
    assert m.ttft_ms is None
    assert m.e2el_ms is None
    assert m.tpot_ms is None


def test_a_step_summary_counts_rates_over_its_duration(completion: Make) -> None:
    measures = [
        measure(completion((50.0, 60.0, 70.0), usage=3, prompt=12)),
        measure(completion((80.0, 100.0, 120.0), usage=3, prompt=12)),
        measure(completion(error=ErrorCategory.SERVER)),
        measure(completion(error=ErrorCategory.TIMEOUT)),
    ]
    s = summarise(measures, duration_s=2.0, peak_concurrency=3)
    assert (s.sent, s.succeeded, s.failed) == (4, 2, 2)
    assert s.errors == {"server": 1, "timeout": 1}
    assert s.requests_per_s.value == pytest.approx(1.0)
    assert s.output_tokens_per_s.value == pytest.approx(3.0)
    assert s.error_rate.value == pytest.approx(0.5)
    assert s.timeout_rate.value == pytest.approx(0.25)
    assert s.peak_concurrency.value == 3
    assert s.ttft_ms.count == 2
    assert s.ttft_ms.p50 == pytest.approx(65.0)
    assert s.prompt_tokens.mean == 12
    assert s.goodput_rps.value is None
    assert s.slo_met is None
    assert s.ttft_ms.definition == DEFINITIONS["ttft_ms"]


def test_goodput_counts_requests_meeting_every_slo(completion: Make) -> None:
    measures = [
        measure(completion((50.0, 60.0), usage=2)),  # tpot 10
        measure(completion((50.0, 90.0), usage=2)),  # tpot 40: misses
        measure(completion((150.0,), usage=1)),  # ttft misses
        measure(completion((20.0,), usage=1)),  # one token: tpot vacuous
    ]
    s = summarise(measures, duration_s=4.0, peak_concurrency=1, slo=SLO(ttft_ms=100, tpot_ms=20))
    assert s.slo_met == 2
    assert s.goodput_rps.value == pytest.approx(0.5)


def test_an_all_error_sample_has_no_latencies_and_full_error_rate(completion: Make) -> None:
    measures = [measure(completion(error=ErrorCategory.INFRA)) for _ in range(3)]
    s = summarise(measures, duration_s=1.0, peak_concurrency=3, slo=SLO(ttft_ms=1))
    assert (s.succeeded, s.failed) == (0, 3)
    assert s.error_rate.value == 1.0
    assert s.requests_per_s.value == 0.0
    assert s.goodput_rps.value == 0.0
    assert s.ttft_ms.count == 0
    assert s.ttft_ms.p95 is None
    assert s.output_tokens.count == 0


def test_an_empty_step_measures_no_rates(completion: Make) -> None:
    s = summarise([], duration_s=0.0, peak_concurrency=0)
    assert s.sent == 0
    assert s.requests_per_s.value is None
    assert s.error_rate.value is None


def test_buffered_streams_are_counted(completion: Make) -> None:
    s = summarise(
        [measure(completion((10.0, 10.0), usage=2, flags=("buffered_stream",)))],
        duration_s=1.0,
        peak_concurrency=1,
    )
    assert s.buffered_streams == 1


def test_every_metric_carries_its_definition(completion: Make) -> None:
    s = summarise([measure(completion((1.0,), usage=1))], duration_s=1.0, peak_concurrency=1)
    for name, value in s:
        if hasattr(value, "definition"):
            assert value.definition == DEFINITIONS[name]


def test_a_guessed_one_token_per_chunk_is_kept_only_when_usage_confirms_it(
    completion: Make,
) -> None:
    guessed = ("chunk_tokens_estimated",)
    confirmed = measure(completion((10.0, 20.0, 30.0), usage=3, flags=guessed))
    assert confirmed.token_split_known
    assert confirmed.itl_token_ms == pytest.approx((10.0, 10.0))
    # three chunks, six tokens, nobody said which chunk carried which: no per-token split
    unknown = measure(completion((10.0, 20.0, 30.0), usage=6, flags=guessed))
    assert not unknown.token_split_known
    assert unknown.itl_token_ms == ()
    assert unknown.tpot_ms == pytest.approx(20.0 / 5)  # TPOT needs only the total
    s = summarise([confirmed, unknown], duration_s=1.0, peak_concurrency=1)
    assert s.itl_token_unknown == 1
    assert s.itl_token_ms.count == 2
    assert s.itl_chunk_ms.count == 4
