"""Retry-After parsing and the wait it leads to."""

from __future__ import annotations

import random
from email.utils import formatdate

import pytest

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.retry import RetryConfig, is_retryable, retry_after_s, wait_s

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"Retry-After": " 1.5 "}, 1.5),
        ({"Retry-After": "0"}, 0.0),
        ({"retry-after": "2"}, 2.0),
        ({"Retry-After-Ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"retry-after-ms": "soon", "Retry-After": "9"}, 9.0),
        ({"Retry-After": formatdate(NOW + 20, usegmt=True)}, 20.0),
        ({"Retry-After": formatdate(NOW - 20, usegmt=True)}, 0.0),
        ({"Retry-After": "-1"}, None),
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": "inf"}, None),
        ({"Retry-After": "tomorrow"}, None),
        ({}, None),
    ],
    ids=[
        "seconds", "float", "zero", "lowercase", "ms", "ms-wins", "bad-ms-falls-back",
        "http-date", "past-date", "negative", "nan", "inf", "garbage", "absent",
    ],
)  # fmt: skip
def test_retry_after_hint_in_seconds(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_s(headers, now_s=NOW) == expected


def test_hinted_wait_is_stretched_by_jitter_and_capped() -> None:
    config = RetryConfig(max_wait_s=5.0, jitter=0.1)
    waits = [wait_s(config, 1, 2.0, random.Random(seed)) for seed in range(50)]
    assert all(2.0 <= w <= 2.2 for w in waits)
    assert len(set(waits)) > 1
    assert wait_s(config, 1, 10_000.0, random.Random(0)) == 5.0


def test_unhinted_wait_backs_off_exponentially_with_equal_jitter() -> None:
    config = RetryConfig(backoff_s=1.0, max_wait_s=100.0)
    for attempt in (1, 2, 3):
        w = wait_s(config, attempt, None, random.Random(attempt))
        assert 0.5 * 2 ** (attempt - 1) <= w <= 2 ** (attempt - 1)


@pytest.mark.parametrize(
    ("category", "status", "retryable"),
    [
        (ErrorCategory.INFRA, None, True),
        (ErrorCategory.RATE_LIMITED, 429, True),
        (ErrorCategory.RATE_LIMITED, 503, True),
        (ErrorCategory.SERVER, 500, False),
        (ErrorCategory.REJECTED, 400, False),
        (ErrorCategory.TIMEOUT, None, False),
        (ErrorCategory.RESET, 200, False),
    ],
)
def test_only_infra_and_429_503_are_retried(
    category: ErrorCategory, status: int | None, retryable: bool
) -> None:
    assert is_retryable(RequestError(category, "x", status=status)) is retryable
