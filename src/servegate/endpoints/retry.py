"""When to try a request again and how long to wait: server hints honoured up to a cap, with jitter.

Only infrastructure failures (refused, DNS, closed before headers) and 429/503 are retried. A
4xx or 500 is an answer, and retrying it would hide a deterministic fault behind attempts.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from servegate.endpoints.errors import ErrorCategory, RequestError

RETRY_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """Retry budget of one request; every wait also stays inside the request's deadline."""

    max_attempts: int = 3
    budget_s: float = 30.0  # total waiting across all retries of one request
    max_wait_s: float = 10.0  # cap on any one wait, however large the server's hint
    backoff_s: float = 0.25  # first backoff when the server gives no usable hint; doubles
    jitter: float = 0.1  # a hinted wait is stretched by up to this fraction


def is_retryable(error: RequestError) -> bool:
    """Infra failures and 429/503; never rejections, server errors or anything after headers."""
    return error.category is ErrorCategory.INFRA or (
        error.category is ErrorCategory.RATE_LIMITED and error.status in RETRY_STATUSES
    )


def retry_after_s(headers: Mapping[str, str], *, now_s: float | None = None) -> float | None:
    """The server's wait hint in seconds from `retry-after-ms` or `Retry-After` (seconds or
    HTTP date); None when absent, negative, non-finite or unparseable."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        value = _number(raw_ms)
        if value is not None:
            return value / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    value = _number(raw)
    if value is not None:
        return value
    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    delta = when.timestamp() - (time.time() if now_s is None else now_s)
    return max(delta, 0.0)


def _number(raw: str) -> float | None:
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def wait_s(
    config: RetryConfig, attempt: int, hint_s: float | None, rng: random.Random | None = None
) -> float:
    """Seconds to wait before attempt `attempt + 1`: the hint stretched by jitter, else an
    exponential backoff with equal jitter; never more than `max_wait_s`."""
    draw = (rng or random).random()
    if hint_s is not None:
        return min(hint_s * (1.0 + config.jitter * draw), config.max_wait_s)
    base = min(config.backoff_s * 2.0 ** (attempt - 1), config.max_wait_s)
    return base * (0.5 + 0.5 * draw)
