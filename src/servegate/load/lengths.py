"""Asked versus served lengths: did the prompt have the tokens the workload meant, and did the
server generate the tokens it was asked for?

Synthetic prompts are sized in words that are one token each, but the server's chat template
adds tokens of its own, so the deviation is measured from `usage.prompt_tokens`, never assumed.
Output lengths are asked with `max_tokens` only (no `ignore_eos`, which not every server takes):
an answer that stops early is counted, one that runs past `max_tokens` is a server bug.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from servegate.load.metrics import RequestMeasure
from servegate.load.workload import WorkItem

__all__ = ["DEFINITIONS", "LengthCheck", "check_lengths"]

DEFINITIONS = {
    "prompt_deviation_tokens": "usage.prompt_tokens − input tokens asked, mean over requests "
    "that reported usage (the chat template's own tokens land here)",
    "prompt_deviation_ratio": "prompt_deviation_tokens / input tokens asked",
    "output_short": "successful requests that ended with fewer output tokens than max_tokens",
    "output_over": "successful requests with more output tokens than max_tokens (a server bug)",
}


class LengthCheck(BaseModel):
    """Lengths asked and served over one step's successful requests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    definitions: dict[str, str]
    input_tokens_asked: int | None  # when every request asked the same
    prompt_tokens_reported: int  # requests whose usage gave prompt_tokens
    prompt_deviation_tokens: float | None
    prompt_deviation_ratio: float | None
    max_tokens_asked: int | None  # when every request asked the same
    output_counted: int  # requests with max_tokens and a known output count
    output_short: int
    output_over: int


def _same(values: Sequence[int | None]) -> int | None:
    distinct = set(values)
    if len(distinct) == 1:
        (only,) = distinct
        return only
    return None


def check_lengths(pairs: Sequence[tuple[WorkItem, RequestMeasure]]) -> LengthCheck:
    """Compare each successful request's usage with what its work item asked for."""
    good = [(item, m) for item, m in pairs if m.ok]
    deviations: list[float] = []
    ratios: list[float] = []
    for item, m in good:
        if item.input_tokens is not None and m.prompt_tokens is not None:
            deviations.append(m.prompt_tokens - item.input_tokens)
            ratios.append((m.prompt_tokens - item.input_tokens) / item.input_tokens)
    counted = [
        (item.max_tokens, m.output_tokens)
        for item, m in good
        if item.max_tokens is not None and m.output_tokens is not None
    ]
    return LengthCheck(
        definitions=DEFINITIONS,
        input_tokens_asked=_same([item.input_tokens for item, _ in pairs]),
        prompt_tokens_reported=len(deviations),
        prompt_deviation_tokens=sum(deviations) / len(deviations) if deviations else None,
        prompt_deviation_ratio=sum(ratios) / len(ratios) if ratios else None,
        max_tokens_asked=_same([item.max_tokens for item, _ in pairs]),
        output_counted=len(counted),
        output_short=sum(out < asked for asked, out in counted),
        output_over=sum(out > asked for asked, out in counted),
    )
