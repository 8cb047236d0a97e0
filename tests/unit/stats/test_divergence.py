import pytest

from servegate.stats import first_divergence, noise_limit
from servegate.stats.divergence import near_tie_limit


@pytest.mark.parametrize(
    ("a", "b", "index"),
    [
        ("OK", "OK", None),
        ("OK", "OK!", 2),
        ("Hello", "Help", 3),
        ("", "", None),
        ("", "x", 0),
        (["Hel", "lo"], ["Hel", "p"], 1),
    ],
    ids=["identical", "prefix", "middle", "both-empty", "one-empty", "tokens"],
)
def test_first_divergence_index(a: str | list[str], b: str | list[str], index: int | None) -> None:
    assert first_divergence(a, b) == index


def test_the_limit_is_k_times_the_floor_plus_the_tolerance() -> None:
    assert noise_limit(0.05, 3.0, 0.1) == pytest.approx(0.25)
    assert noise_limit(0.0, 3.0, 0.1) == pytest.approx(0.1)  # a deterministic engine: tolerance


def test_negative_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        noise_limit(0.1, -1.0, 0.0)


@pytest.mark.parametrize(
    ("gaps", "expected"),
    [
        ((), 0.5),  # no self-flip: the policy's margin
        ((1.2,), 1.2),
        ((0.1, 0.2, 3.99), 0.5),  # one odd flip among small ones does not move the median
        ((3.99,), 2.0),  # alone, it raises the limit only to the cap
        ((1.5, 1.8, 1.9), 1.8),
    ],
    ids=["none", "one", "odd-one-among-small", "odd-one-alone", "median"],
)
def test_the_near_tie_limit_is_the_median_self_flip_within_the_margin_and_the_cap(
    gaps: tuple[float, ...], expected: float
) -> None:
    assert near_tie_limit(0.5, gaps, 2.0) == pytest.approx(expected)
