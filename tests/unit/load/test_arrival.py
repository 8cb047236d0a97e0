import numpy as np
import pytest
from pydantic import ValidationError

from servegate.load import Arrival, closed_loop, open_loop, ramp, send_offsets_s


def _gaps(offsets: tuple[float, ...]) -> np.ndarray:
    return np.diff(np.asarray(offsets))


def test_poisson_arrivals_have_the_asked_mean_rate_and_exponential_spread() -> None:
    offsets = send_offsets_s(open_loop(20.0, seed=3), 20_000)
    gaps = _gaps(offsets)
    assert offsets[0] == 0.0
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV = 1


@pytest.mark.parametrize("burstiness", [0.25, 4.0], ids=["bursty", "regular"])
def test_gamma_burstiness_changes_the_spread_not_the_rate(burstiness: float) -> None:
    gaps = _gaps(send_offsets_s(open_loop(10.0, burstiness=burstiness, seed=1), 20_000))
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.08)


def test_schedules_are_deterministic_from_the_seed() -> None:
    a = send_offsets_s(open_loop(5.0, seed=9), 50)
    assert a == send_offsets_s(open_loop(5.0, seed=9), 50)
    assert a != send_offsets_s(open_loop(5.0, seed=10), 50)


def test_replay_offsets_are_scaled_and_capped_at_the_file() -> None:
    arrival = Arrival(kind="replay", time_scale=0.5)
    assert send_offsets_s(arrival, 10, [0.0, 1.0, 3.0]) == (0.0, 0.5, 1.5)
    assert send_offsets_s(arrival, 2, [0.0, 1.0, 3.0]) == (0.0, 0.5)


def test_a_closed_loop_has_no_schedule() -> None:
    with pytest.raises(ValueError, match="no schedule"):
        send_offsets_s(closed_loop(4), 10)


def test_zero_requests_have_an_empty_schedule() -> None:
    assert send_offsets_s(open_loop(1.0), 0) == ()


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "closed"},
        {"kind": "closed", "concurrency": 0},
        {"kind": "poisson"},
        {"kind": "poisson", "rate_rps": 1.0, "burstiness": 0.5},
        {"kind": "gamma", "rate_rps": 1.0, "burstiness": 0},
    ],
    ids=["closed-no-concurrency", "concurrency-0", "no-rate", "poisson-burst", "burst-0"],
)
def test_incomplete_arrivals_are_rejected(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Arrival.model_validate(fields)


@pytest.mark.parametrize(
    ("arrival", "label"),
    [
        (closed_loop(8), "c=8"),
        (open_loop(2.5), "2.5/s poisson"),
        (open_loop(4, burstiness=0.5), "4/s gamma b=0.5"),
        (Arrival(kind="replay", time_scale=2), "replay x2"),
    ],
    ids=["closed", "poisson", "gamma", "replay"],
)
def test_labels_name_the_step(arrival: Arrival, label: str) -> None:
    assert arrival.label == label


def test_a_ramp_speeds_up_from_its_first_rate_to_its_last() -> None:
    offsets = send_offsets_s(ramp(2.0, 20.0, seed=3), 2001)
    assert offsets[0] == 0.0
    assert all(np.diff(offsets) >= 0)
    gaps = np.diff(offsets)
    # Poisson gaps at the rate of the moment: the mean gap of each end is 1 / its rate.
    assert np.mean(gaps[:200]) == pytest.approx(1 / 2.9, rel=0.2)
    assert np.mean(gaps[-200:]) == pytest.approx(1 / 19.1, rel=0.2)
    assert send_offsets_s(ramp(2.0, 20.0, seed=3), 2001) == offsets  # deterministic
    assert ramp(1, 8).label == "ramp 1→8/s"


def test_only_a_ramp_has_an_end_rate() -> None:
    with pytest.raises(ValueError, match="only a ramp"):
        Arrival(kind="poisson", rate_rps=1.0, rate_end_rps=2.0)
    with pytest.raises(ValueError, match="only a ramp"):
        Arrival(kind="ramp", rate_rps=1.0)
