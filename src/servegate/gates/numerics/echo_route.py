"""Prompt scoring is an instrument: each side's is checked, and calibrated, before it is read.

A server scores a prompt token by token when asked to echo it with logprobs. Whether those
numbers belong to the tokens they stand beside is measured, not assumed: a greedy continuation
is generated with logprobs, then echoed, and the two must agree (`EchoCheck`, observed by
`perplexity.alignment`). Stock servers do not always agree:

- llama-cpp-python (every release to 0.3.36 at least, measured 2026-12-02) pairs echoed prompt
  token i with the logits that predict token i+1 on models without BOS (SmolLM2): 13.7
  nats/token off its own generation logprobs. Entry i's *top-k* is then the genuine distribution
  over token i+1, so token i+1's logprob can be read from entry i's top-k — a one-token shift —
  wherever that token is among them (a greedy token always is). Tokens outside the previous
  position's top-k stay unscored, and the coverage says how many.

`choose` picks, per side, the first route whose measured error is within the policy's
`echo_alignment_max_nats` (as returned, then shifted by one); `realign` applies it. Every
consumer of prompt logprobs (perplexity, cross-scoring) reads entries through `realign` with the
route chosen here and nothing else: misaligned means not measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

from servegate.endpoints.types import Completion, TokenLogprob

RouteName = Literal["native", "echo", "echo-shifted", "none"]
# Offsets tried, in order of preference: 0 (as returned), 1 (entry i's top-k scores token i+1).
SHIFTS = (0, 1)
ROUTE_OF_SHIFT: dict[int, RouteName] = {0: "echo", 1: "echo-shifted"}


# Top-k asked per echoed position (5: the most OpenAI's legacy completions API allows).
TOP_K = 5


def _bound(top: dict[str, float], k: int) -> float:
    """The most a token missing from `top` can have: the k-th largest value. Stock
    llama-cpp-python adds the echoed token's own value to the top-k of the position after it;
    when that token is outside the top-k, its value is the lowest, and not a bound."""
    values = sorted(top.values(), reverse=True)
    return values[min(k, len(values)) - 1]


FFFD = "\ufffd"  # what a decoder writes for bytes that are not whole UTF-8 characters


def _names_one_token(text: str) -> bool:
    """A token string that can identify its token in a top dict keyed by strings: not empty and
    not holding U+FFFD (what a partial UTF-8 byte sequence decodes to)."""
    return bool(text) and FFFD not in text


def realign(
    entries: Sequence[TokenLogprob | None], shift: int, k: int = TOP_K
) -> tuple[list[TokenLogprob | None], frozenset[int]]:
    """Echo entries with `shift` applied, and the positions whose value is only a bound.

    Shift 0 returns the entries as they are. Shift 1 gives position i the logprob of its own token
    in entry i−1's top-k. Where the token is not among them its logprob is at most the k-th
    largest of those values (`_bound`): that upper bound is returned, and i is in the set of
    bounded positions (a lower bound on its NLL; never a score to average as if measured). A
    token whose string names no single token (empty, U+FFFD) is only bounded too.
    """
    if shift == 0:
        return list(entries), frozenset()
    if shift != 1:
        raise ValueError(f"unsupported echo shift {shift}")
    out: list[TokenLogprob | None] = [None] * min(1, len(entries))
    bounded: set[int] = set()
    for i, (prev, cur) in enumerate(pairwise(entries), start=1):
        if prev is None or cur is None or not prev.top:
            out.append(None)
            continue
        top = dict(prev.top)
        if not _names_one_token(cur.token):
            # Many tokens share this string (partial UTF-8 bytes decode to "" or U+FFFD), so the
            # value under it in a string-keyed top dict may be any of theirs — on stock
            # llama-cpp-python, the echoed token's own misaligned value. Only a bound: no token
            # can have more than the largest value shown.
            out.append(TokenLogprob(cur.token, max(top.values()), prev.top))
            bounded.add(i)
            continue
        value = top.get(cur.token)
        if value is None:
            value = _bound(top, k)
            bounded.add(i)
        out.append(TokenLogprob(cur.token, value, prev.top))
    return out, frozenset(bounded)


@dataclass(frozen=True)
class EchoCheck:
    """One side's echo logprobs against its own generation logprobs of the same tokens.

    `offered` is False when the server returned no echo logprobs at all (the feature is not
    there); `errors_nats[shift]` is the mean |echo − generation| logprob over the continuation
    with that shift applied (None: some token had no score there); `note` says why nothing
    could be measured when the feature is there but the check could not be made.
    """

    offered: bool
    errors_nats: dict[int, float | None] = field(default_factory=dict)
    tokens: int = 0
    note: str = ""
    # How long the echo took per prompt character: scoring a long text takes minutes on a
    # server that scores slowly (stock llama-cpp-python sorts the vocabulary per token), and
    # its deadline is scaled from this, never cut at the chat deadline.
    seconds_per_char: float | None = None
    # The server's own prompt scoring (vLLM's `prompt_logprobs` request field) on the same
    # continuation, when it answers one: preferred over echo, and checked the same way.
    native_nats: float | None = None
    native_note: str = ""

    @classmethod
    def aligned(cls, error_nats: float = 0.0) -> EchoCheck:
        """A side whose echo matched its generation as returned (tests, stored baselines)."""
        return cls(offered=True, errors_nats={0: error_nats, 1: None}, tokens=6)

    @classmethod
    def not_offered(cls, why: str) -> EchoCheck:
        return cls(offered=False, note=why)

    @property
    def as_returned_nats(self) -> float | None:
        return self.errors_nats.get(0)

    @property
    def native(self) -> bool:
        """Score prompts through the native route: the server answered one and it was measured."""
        return self.native_nats is not None


def measure(generated: Completion, echoed: Completion, prompt_chars: int = 0) -> EchoCheck:
    """Compare the echoed continuation with its generation logprobs, for every shift in SHIFTS.

    Garbage in the echo (wrong length, other tokens, no logprobs) is a measured failure with its
    reason, never an exception: NaN/Inf never reach here (the client refuses them as
    non_finite_logprob and the request fails).
    """
    gen = generated.logprobs or ()
    entries = echoed.prompt_logprobs or ()
    if not gen:
        return EchoCheck(offered=True, note="no generated tokens to compare the echo with")
    if not entries:
        return EchoCheck(offered=False, note="no echo logprobs came back")
    if len(entries) < len(gen) + 1:
        return EchoCheck(
            offered=True,
            note=f"{len(entries)} echo entries for a prompt that ends in {len(gen)} generated "
            "tokens: wrong length",
        )
    tail = entries[-len(gen) :]
    if [t.token if t else None for t in tail] != [g.token for g in gen]:
        return EchoCheck(offered=True, note="the continuation re-tokenizes differently when echoed")
    errors: dict[int, float | None] = {}
    for shift in SHIFTS:
        window, bounded = realign(entries[-len(gen) - shift :], shift)
        diffs = [
            abs(t.logprob - g.logprob)
            for i, (t, g) in enumerate(zip(window[shift:], gen, strict=True), start=shift)
            if t is not None and i not in bounded
        ]
        errors[shift] = sum(diffs) / len(diffs) if len(diffs) == len(gen) else None
    took_ms = echoed.timing.e2el_ms
    rate = took_ms / 1e3 / prompt_chars if took_ms and prompt_chars > 0 else None
    return EchoCheck(offered=True, errors_nats=errors, tokens=len(gen), seconds_per_char=rate)


@dataclass(frozen=True)
class ScoringRoute:
    """How one side's prompt tokens are read, and the measurement that chose it."""

    name: RouteName
    shift: int = 0
    as_returned_nats: float | None = None  # error before calibration
    calibrated_nats: float | None = None  # error with the chosen shift (same as above at 0)
    offered: bool = True
    reason: str = ""  # why no route: the measured errors, or what was missing

    @property
    def usable(self) -> bool:
        return self.name != "none"

    def describe(self) -> str:
        """One line for the report: which route, and the errors that chose it."""
        if self.name == "native":
            return f"native prompt_logprobs (off by {_nats(self.as_returned_nats)} nats/token)"
        if self.name == "echo":
            return f"echo as returned (off by {_nats(self.as_returned_nats)} nats/token)"
        if self.name == "echo-shifted":
            return (
                f"echo aligned after a one-token shift ({_nats(self.as_returned_nats)} → "
                f"{_nats(self.calibrated_nats)} nats/token)"
            )
        return f"none: {self.reason}"


def _nats(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def choose(check: EchoCheck | None, limit_nats: float) -> ScoringRoute:
    """The first shift whose measured error is within `limit_nats`; `none` with the measured
    errors when nothing aligns (the judgement the consumers obey)."""
    if check is None:
        return ScoringRoute("none", reason="echo alignment was not checked")
    if check.native_nats is not None:
        # The texts were scored through the native route: it alone can be read.
        if check.native_nats <= limit_nats:
            return ScoringRoute("native", 0, check.native_nats, check.native_nats)
        return ScoringRoute(
            "none",
            as_returned_nats=check.native_nats,
            reason=f"native prompt logprobs off their generation logprobs by "
            f"{check.native_nats:.3f} nats/token (limit {limit_nats:g}): not aligned",
        )
    if not check.offered:
        return ScoringRoute("none", offered=False, reason=check.note or "no echo logprobs")
    before = check.as_returned_nats
    for shift in SHIFTS:
        error = check.errors_nats.get(shift)
        if error is not None and error <= limit_nats:
            return ScoringRoute(ROUTE_OF_SHIFT[shift], shift, before, error)
    if check.note:
        return ScoringRoute("none", reason=check.note)
    tried = ", ".join(
        f"{'as returned' if s == 0 else f'shifted by {s}'} {_nats(check.errors_nats.get(s))}"
        for s in SHIFTS
    )
    return ScoringRoute(
        "none",
        as_returned_nats=before,
        reason=f"echo logprobs off their generation logprobs by {tried} nats/token "
        f"(limit {limit_nats:g}): not aligned by any shift",
    )
