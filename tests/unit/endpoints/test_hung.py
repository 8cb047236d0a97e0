"""One definition of a hang: no headers before the deadline, or silence after them."""

import pytest

from servegate.endpoints.answers import AnswerClass, classify_answer
from servegate.endpoints.errors import HUNG, ErrorCategory, RequestError
from servegate.endpoints.types import Completion
from servegate.gates.pair import timed_out


@pytest.mark.parametrize("category", list(ErrorCategory), ids=str)
def test_every_reader_of_a_failed_request_agrees_on_what_hung(category: ErrorCategory) -> None:
    error = RequestError(category, "x")
    expected = category in {ErrorCategory.TIMEOUT, ErrorCategory.STALLED}
    assert error.hung is expected
    assert (category in HUNG) is expected
    assert timed_out(Completion(status=None, error=error)) is expected
    seen = classify_answer(error=category.value)
    assert (seen.kind is AnswerClass.TIMEOUT) is expected
