import re

import pytest

from servegate.probes.needles import (
    POSITIONS,
    estimate_tokens,
    make_needle,
    needle_grid,
    recalled,
)


def test_the_same_seed_gives_the_same_needle_byte_for_byte() -> None:
    assert make_needle(7, 1500, "middle") == make_needle(7, 1500, "middle")


def test_another_seed_gives_another_haystack_and_code() -> None:
    a, b = make_needle(1, 500, "end"), make_needle(2, 500, "end")
    assert a.haystack != b.haystack
    assert a.code != b.code


def test_positions_share_the_haystack_and_differ_only_in_where_the_needle_is() -> None:
    needles = [make_needle(3, 800, p) for p in POSITIONS]
    fillers = {
        n.haystack.replace(n.sentence + " ", "").replace(" " + n.sentence, "") for n in needles
    }
    assert len(fillers) == 1


@pytest.mark.parametrize(
    ("position", "expected_fraction"),
    [("start", 0.0), ("middle", 0.5), ("end", 1.0)],
    ids=["start", "middle", "end"],
)
def test_the_needle_sits_at_its_position(position: str, expected_fraction: float) -> None:
    needle = make_needle(0, 1500, position)  # type: ignore[arg-type]
    sentences = needle.haystack.split(". ")
    at = next(i for i, s in enumerate(sentences) if s.startswith("The secret code"))
    assert abs(at / (len(sentences) - 1) - expected_fraction) < 0.01


@pytest.mark.parametrize("tokens", [500, 1500, 3000], ids=["500", "1500", "3000"])
def test_the_prompt_is_about_as_long_as_asked(tokens: int) -> None:
    needle = make_needle(0, tokens, "middle")
    assert 0.9 * tokens <= needle.estimated_tokens <= 1.05 * tokens
    assert estimate_tokens(needle.prompt) < tokens


def test_the_code_is_the_only_number_in_the_prompt() -> None:
    needle = make_needle(5, 3000, "start")
    assert re.findall(r"\d+", needle.prompt) == [needle.code]
    assert len(needle.code) == 7


def test_the_question_names_the_needle_and_the_request_is_greedy_chat() -> None:
    needle = make_needle(0, 500, "end")
    assert needle.name in needle.question
    request = needle.request(max_tokens=8)
    assert request["messages"][0]["content"].endswith(needle.question)
    assert (request["temperature"], request["max_tokens"]) == (0, 8)
    longer = needle.request(48, "Then describe it.")["messages"][0]["content"]
    assert longer == f"{needle.prompt} Then describe it."


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        ("7610750", True),
        ("The secret code for Juniper is 7610750.", True),
        ("7,610,750", True),
        ("7 610 750", True),
        ("17610750", False),
        ("761075", False),
        ("", False),
        (None, False),
    ],
    ids=["bare", "sentence", "commas", "spaces", "longer-number", "prefix", "empty", "null"],
)
def test_recall_needs_the_whole_number(answer: str | None, found: bool) -> None:
    assert recalled("7610750", answer) is found


def test_the_grid_has_every_length_and_position_shortest_first_with_unique_ids() -> None:
    grid = needle_grid(0, [3000, 500, 1500])
    assert [n.target_tokens for n in grid] == [500] * 3 + [1500] * 3 + [3000] * 3
    assert len({n.id for n in grid}) == 9
    assert grid[4].id == "needle-1500-middle"


def test_an_empty_grid_has_no_needles() -> None:
    assert needle_grid(0, []) == ()


@pytest.mark.parametrize(
    ("tokens", "position"), [(500, "nowhere"), (10, "end")], ids=["bad-position", "too-short"]
)
def test_impossible_needles_are_refused(tokens: int, position: str) -> None:
    with pytest.raises(ValueError, match="must be"):
        make_needle(0, tokens, position)  # type: ignore[arg-type]
