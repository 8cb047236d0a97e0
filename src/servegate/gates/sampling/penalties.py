"""Do presence, frequency and repetition penalties work? Judged token by token against each
side's own raw logprobs.

Every answer is sampled at temperature 1 with its top 20 logprobs. At each position after the
first, the report gives the probability q of drawing a token the answer already holds; the draw
either is such a repeat or not (o). Without a penalty the draws follow the report and o − q
averages 0; a penalty makes repeats rarer than the raw report says, so the mean *repeat deficit*
D = mean(o − q) turns negative. Raw logprobs are the default of llama.cpp and vLLM; a server
whose logprobs already include the penalty shows no deficit (then the check is not measured).

The check: the baseline's deficit with the penalty is significantly negative (else the baseline
gives nothing to hold the candidate to: not measured), and the candidate's is not significantly
higher than the baseline's (a one-sided z test with answer-level standard errors: the tokens of
one answer are not independent). A stripped penalty leaves the candidate at D ≈ 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servegate.endpoints.types import Completion, TokenLogprob

PROMPT = "List the days of the week, twice."
TOKENS = 32
TOP_LOGPROBS = 20
# Each at a strength that leaves the small reference model fluent enough to list the days.
PENALTIES: Mapping[str, Mapping[str, float]] = {
    "presence": {"presence_penalty": 1.5},
    "frequency": {"frequency_penalty": 1.5},
    "repetition": {"repetition_penalty": 1.5, "repeat_penalty": 1.5},
}
# The baseline's own deficit only decides whether the check has a reference; the candidate
# fails by the family's Bonferroni level, so a looser level here raises no false alarm.
EFFECT_P = 0.05


def request(neutral: Mapping[str, Any], penalty: Mapping[str, float]) -> dict[str, Any]:
    """A penalty draw: temperature 1, top logprobs, the side's neutral sampler and the penalty."""
    return {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": TOKENS,
        "temperature": 1.0,
        "logprobs": True,
        "top_logprobs": TOP_LOGPROBS,
        **neutral,
        **penalty,
    }


@dataclass(frozen=True)
class Deficit:
    """A side's mean repeat deficit over its answers, with an answer-level standard error."""

    mean: float
    stderr: float
    positions: int
    answers: int

    @property
    def z(self) -> float:
        return (
            self.mean / self.stderr if self.stderr > 0 else (0.0 if self.mean == 0 else -math.inf)
        )

    @property
    def text(self) -> str:
        return (f"repeat deficit {self.mean:+.3f} ± {self.stderr:.3f} per token "
                f"({self.answers} answers, {self.positions} tokens)")  # fmt: skip


def _top(entry: TokenLogprob) -> list[tuple[str, float]]:
    # Some servers add the drawn token to its top list: only the 20 most likely are the report.
    return sorted(entry.top, key=lambda item: -item[1])[:TOP_LOGPROBS]


def answer_deficit(tokens: Sequence[TokenLogprob]) -> tuple[float, int]:
    """Σ (o − q) over one answer's positions after the first, and how many there were."""
    total, count = 0.0, 0
    seen: set[str] = set()
    for entry in tokens:
        if seen and entry.top:
            q = sum(math.exp(lp) for token, lp in _top(entry) if token in seen)
            total += float(entry.token in seen) - min(q, 1.0)
            count += 1
        seen.add(entry.token)
    return total, count


def deficit(answers: Sequence[Completion]) -> Deficit | None:
    """The mean deficit per token over the answers that carried logprobs (a ratio estimate: its
    standard error from the answers' sums); None with fewer than two such answers."""
    sums = [answer_deficit(c.logprobs) for c in answers if c.ok and c.logprobs]
    sums = [(s, n) for s, n in sums if n]
    if len(sums) < 2:
        return None
    positions = sum(n for _, n in sums)
    mean = sum(s for s, _ in sums) / positions
    k = len(sums)
    spread = sum((s - mean * n) ** 2 for s, n in sums) * k / (k - 1)
    return Deficit(mean, math.sqrt(spread) / positions, positions, k)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


@dataclass(frozen=True)
class PenaltyReading:
    """One penalty on both sides."""

    baseline: Deficit | None
    candidate: Deficit | None

    @property
    def baseline_effect_p(self) -> float | None:
        """One-sided p that the baseline's deficit is below 0."""
        b = self.baseline
        return None if b is None else (_normal_sf(-b.z) if math.isfinite(b.z) else 0.0)

    def higher_p(self) -> float | None:
        """One-sided p that the candidate's deficit is above the baseline's."""
        b, c = self.baseline, self.candidate
        if b is None or c is None:
            return None
        spread = math.hypot(b.stderr, c.stderr)
        if spread == 0:
            return 1.0 if c.mean <= b.mean else 0.0
        return _normal_sf((c.mean - b.mean) / spread)

    def stripped_power(self, level: float, unpenalised: Deficit | None = None) -> float | None:
        """Probability that a candidate whose penalty has no effect fails at `level`: the normal
        approximation of the test above, the candidate's deficit 0 with the standard error of
        answers drawn without a penalty (`unpenalised`: the baseline's control draws; answers
        without a penalty spread more than penalised ones — assuming the baseline's penalised
        spread overstated the power, 0.96 for a check that then missed on vLLM), else the
        baseline's own."""
        b = self.baseline
        if b is None:
            return None
        from statistics import NormalDist

        critical = NormalDist().inv_cdf(1 - level)
        other = unpenalised.stderr if unpenalised is not None else b.stderr
        spread = math.hypot(b.stderr, other)
        if spread == 0:
            return 1.0 if b.mean < 0 else 0.0
        return 1 - NormalDist().cdf(critical - (0 - b.mean) / spread)


def readings(
    draws: Mapping[str, tuple[Sequence[Completion], Sequence[Completion]]],
) -> dict[str, PenaltyReading]:
    """Each label's (baseline answers, candidate answers) as deficits on both sides."""
    return {label: PenaltyReading(deficit(b), deficit(c)) for label, (b, c) in draws.items()}


def judge(
    reading: PenaltyReading, control: PenaltyReading | None, label: str, level: float
) -> tuple[bool | None, str, str, str, str]:
    """(failed, baseline text, candidate text, limit, reason) of one penalty; failed None: not
    measured (the reason says why). `control` is the draws without a penalty: on the baseline
    their deficit must be indistinguishable from 0, or its logprobs do not describe its draws."""
    b, c = reading.baseline, reading.candidate
    if b is None or c is None:
        who = "baseline" if b is None else "candidate"
        return None, "-", "-", "-", f"{who}: fewer than two answers carried logprobs"
    if control is not None and control.baseline is not None and abs(control.baseline.z) > 3:
        why = (f"without a penalty the baseline's draws do not follow its logprobs "
               f"({control.baseline.text}): its logprobs are not the raw report")  # fmt: skip
        return None, "-", "-", "-", why
    effect = reading.baseline_effect_p
    if effect is None or effect >= EFFECT_P:
        why = f"the baseline's {label} penalty shows no effect: {b.text} (p {effect:.2g})"
        return None, "-", "-", "-", why
    higher = reading.higher_p()
    power = reading.stripped_power(level, control.baseline if control is not None else None)
    limit = (f"not above the baseline's at p < {level:.2g} (Bonferroni); a penalty with no "
             f"effect is detected with probability ≈ {power:.2f}")  # fmt: skip
    failed = higher is not None and higher < level
    reason = (f"the candidate's {c.text} is above the baseline's {b.text} (p {higher:.2g}): "
              "the penalty does not act") if failed else ""  # fmt: skip
    return failed, b.text, c.text, limit, reason
