from collections.abc import Callable

import pytest

from servegate.endpoints.types import Completion
from servegate.load import WorkItem, check_lengths, measure

Make = Callable[..., Completion]
ASKED = WorkItem(api="chat", body={}, label="s", input_tokens=100, max_tokens=4)


def test_prompt_deviation_is_measured_from_usage(completion: Make) -> None:
    pairs = [
        (ASKED, measure(completion((1.0, 2.0, 3.0, 4.0), usage=4, prompt=110))),
        (ASKED, measure(completion((1.0, 2.0, 3.0, 4.0), usage=4, prompt=120))),
        (ASKED, measure(completion((1.0, 2.0), usage=2))),  # no prompt count, stopped short
    ]
    check = check_lengths(pairs)
    assert check.input_tokens_asked == 100
    assert check.prompt_tokens_reported == 2
    assert check.prompt_deviation_tokens == 15.0
    assert check.prompt_deviation_ratio == pytest.approx(0.15)
    assert (check.max_tokens_asked, check.output_counted) == (4, 3)
    assert (check.output_short, check.output_over) == (1, 0)


def test_an_answer_past_max_tokens_is_counted(completion: Make) -> None:
    check = check_lengths([(ASKED, measure(completion((1.0,) * 6, usage=6)))])
    assert check.output_over == 1


def test_mixed_asks_have_no_single_asked_length(completion: Make) -> None:
    other = WorkItem(api="chat", body={}, label="o", max_tokens=8)
    check = check_lengths(
        [(ASKED, measure(completion((1.0,), usage=1))), (other, measure(completion((1.0,))))]
    )
    assert check.input_tokens_asked is None
    assert check.max_tokens_asked is None
