import pytest

from servegate.stats import NoiseFloor, drift_threshold, first_divergence


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


def test_a_floor_with_no_pairs_is_unmeasured_and_sets_no_threshold() -> None:
    floor = NoiseFloor.from_pairs({})
    assert not floor.measured
    assert floor.exact_match_rate is None
    assert floor.drift_threshold(k=3, epsilon=0.02) is None
    assert floor.within_noise(0.0, k=3, epsilon=0.02) is None
    assert floor.divergence.count == 0


def test_an_identical_baseline_has_a_zero_floor_and_only_epsilon_of_room() -> None:
    floor = NoiseFloor.from_pairs({"ok": [("OK", "OK")] * 3, "sum": [("4", "4")]})
    assert floor.exact_match_rate == 1.0
    assert floor.drift_threshold(k=3, epsilon=0.02) == pytest.approx(0.02)
    assert floor.within_noise(0.0, k=3, epsilon=0.02)
    assert not floor.within_noise(0.25, k=3, epsilon=0.02)


def test_per_probe_rates_and_pooled_divergences() -> None:
    floor = NoiseFloor.from_pairs(
        {
            "story": [("abcdef", "abcxyz"), ("abcdef", "abcdef")],
            "ok": [("OK", "OK"), ("OK", "Ok")],
            "sum": [("4", "4")],
        }
    )
    story = floor.probe("story")
    assert story is not None
    assert story.exact_match_rate == 0.5
    assert story.divergences == (3,)
    assert floor.pairs == 5
    assert floor.exact_match_rate == pytest.approx(0.6)
    assert floor.divergence.count == 2
    assert floor.divergence.min == 1.0
    assert floor.probe("missing") is None


def test_threshold_scales_the_floor_by_k_and_adds_epsilon() -> None:
    floor = NoiseFloor.from_pairs({"p": [("a", "b"), ("a", "a"), ("a", "a"), ("a", "a")]})
    assert floor.mismatch_rate == 0.25
    assert floor.drift_threshold(k=2, epsilon=0.05) == pytest.approx(0.55)
    assert floor.drift_threshold(k=10, epsilon=0.0) == 1.0


def test_a_probe_with_one_pair_has_a_rate_of_zero_or_one() -> None:
    floor = NoiseFloor.from_pairs({"single": [("x", "y")]})
    assert floor.mismatch_rate == 1.0


def test_negative_k_or_epsilon_is_rejected() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        drift_threshold(0.1, k=-1, epsilon=0.0)
