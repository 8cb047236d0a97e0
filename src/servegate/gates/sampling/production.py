"""Answers at production settings (temperature 0.7, top_p 0.9), repeated: judged as
distributions, pair by pair (the i-th answer of a probe on each side), with the rules replay and
the shadow proxy use (verdict/sampled_checks.py).

Four probes, each sent `repeats` times to each side with the settings users run and nothing
else (an engine's own sampler defaults apply, as they do for its users):

- `sampled_success`: three checkable probes (arithmetic, a JSON object, the OK canary) — the
  candidate's answer is wrong where the baseline's is right more often than the reverse
  (McNemar, one-sided; a candidate's failed request counts as wrong);
- `sampled_degenerate`: degenerate answers (the gates' one classifier), McNemar one-sided;
- `sampled_finish`: stopping by itself against running to `max_tokens`, McNemar two-sided;
- `sampled_length`, `sampled_symbols`: sign tests on length and the share of punctuation;
- `sampled_openings`: each probe's first words, Pearson homogeneity (the probes are repeated
  MIN_REPEATS times by default, the open-ended one twice that: a collapse to one opening shows
  only when the rest of the baseline's openings expect `sampling.min_expected` together): a
  sampler that collapses (greedy, another temperature) opens differently. The diversity of
  the answers is that distribution: distinct openings are shown on both sides.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servegate.config.policy import SamplingPolicy
from servegate.endpoints.json_text import is_json_object
from servegate.endpoints.text import opening
from servegate.endpoints.types import Completion
from servegate.gates.evidence import curl, excerpt
from servegate.stats.degeneration import DegenerationMetrics, degeneration_metrics, is_severe
from servegate.verdict.judgement import not_applicable
from servegate.verdict.model import Check, Finding, Outcome, Severity
from servegate.verdict.sampled_checks import (
    LENGTH,
    MIN_REPEATS,
    STOPPED,
    SYMBOLS,
    openings_check,
    paired_check,
    sign_check,
)

KIND = "production"
SETTINGS: Mapping[str, Any] = {"temperature": 0.7, "top_p": 0.9}
MAX_TOKENS = 32
Judged = tuple[Check, list[Finding]]


def _number(expected: str) -> Callable[[str], bool]:
    return lambda text: re.search(rf"(?<![\d.]){expected}(?!\.?\d)", text) is not None


def _json_object(text: str) -> bool:
    """A JSON object somewhere in the answer (words around it allowed), by the one strict rule."""
    start, end = text.find("{"), text.rfind("}")
    return 0 <= start < end and is_json_object(text[start : end + 1])


def _ok(text: str) -> bool:
    return text.strip().strip(".!\"'`").strip().lower() == "ok"


# (id, prompt, checker or None): the checkers accept any right answer, however it is phrased.
# The open-ended probe (no checker) is sent OPEN_FACTOR times as often: its openings test.
OPEN_FACTOR = 2
PROBES: tuple[tuple[str, str, Callable[[str], bool] | None], ...] = (
    ("sum", "What is 17 + 25? Reply with the number only.", _number("42")),
    ("json", 'Reply with a JSON object whose key "city" names a city in France.', _json_object),
    ("ok", "Reply with exactly the word OK.", _ok),
    ("story", "Tell me a very short story about a cat.", None),
)


def request(prompt: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS,
            **SETTINGS}  # fmt: skip


def _answers(draws: Any, side: str) -> list[Completion]:
    return [a for a in draws.side(side) if isinstance(a, Completion)]


def _degenerate(m: DegenerationMetrics | None) -> bool:
    return m is not None and is_severe(m) is not None


def _metrics(c: Completion) -> DegenerationMetrics | None:
    return degeneration_metrics(c.text) if c.text else None


def _symbols(m: DegenerationMetrics | None) -> float:
    return m.symbol_ratio if m is not None else 0.0


def _finding(check: Check, draws: Sequence[Any], url: str) -> Finding:
    """The failed check's evidence: the probe whose candidate answers differ most visibly."""
    worst = draws[0]
    for d in draws:
        b, c = _answers(d, "baseline"), _answers(d, "candidate")
        if sum(_degenerate(_metrics(a)) for a in c) > sum(_degenerate(_metrics(a)) for a in b):
            worst = d
            break
    shown = {s: " | ".join(excerpt(a.text, 40) for a in _answers(worst, s)[:4]) for s in
             ("baseline", "candidate")}  # fmt: skip
    return Finding(probe=f"{KIND}:{worst.label}", category=f"sampling_{check.name}",
                   severity=Severity.MAJOR, side="candidate", message=f"{check.title}: "
                   f"{check.reason}", baseline_excerpt=shown["baseline"],
                   candidate_excerpt=shown["candidate"],
                   curl=curl(url, "chat", worst.request))  # fmt: skip


def production_checks(draws: Sequence[Any], url: str, policy: SamplingPolicy) -> list[Judged]:
    """The production-settings checks over `draws` (SequenceDraws of kind KIND)."""
    if not draws:
        why = "no production-settings request was asked (plan.production_repeats is 0)"
        return [(not_applicable("sampled_success", "answers at production settings", why), [])]
    checkers = {pid: checker for pid, _, checker in PROBES}
    success: list[tuple[bool | None, bool | None]] = []
    pairs: list[tuple[Completion, Completion]] = []
    openings: dict[str, list[tuple[str, str]]] = {}
    for d in draws:
        checker = checkers.get(d.label)
        for b, c in zip(_answers(d, "baseline"), _answers(d, "candidate"), strict=False):
            if checker is not None and b.ok:
                success.append((not checker(b.text), not (c.ok and checker(c.text))))
            if b.ok and c.ok:
                pairs.append((b, c))
                openings.setdefault(d.label, []).append((opening(b), opening(c)))
    measured = [(_metrics(b), _metrics(c)) for b, c in pairs]  # once per answer
    checks = [
        paired_check("sampled_success", "checkable answers at production settings are right as "
                     "often as the baseline's", success, "wrong", policy),
        paired_check("sampled_degenerate", "answers at production settings degenerate no more "
                     "often than the baseline's", [(_degenerate(mb), _degenerate(mc))
                                                    for mb, mc in measured], "degenerate", policy),
        paired_check("sampled_finish", "answers at production settings stop by themselves as "
                     "the baseline's do", [(b.finish_reason not in STOPPED,
                                            c.finish_reason not in STOPPED) for b, c in pairs],
                     "cut at the length limit", policy, two_sided=True),
        sign_check(LENGTH, [(len(b.text), len(c.text)) for b, c in pairs], policy),
        sign_check(SYMBOLS, [(_symbols(mb), _symbols(mc)) for mb, mc in measured], policy),
        openings_check(openings, policy),
    ]  # fmt: skip
    return [(c, [_finding(c, draws, url)] if c.outcome is Outcome.FAIL else []) for c in checks]


__all__ = ["KIND", "MIN_REPEATS", "PROBES", "production_checks", "request"]
