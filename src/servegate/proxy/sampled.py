"""Sampled pairs (temperature above 0) judged as distributions, never answer by answer.

Two sampled answers to one request differ on a healthy server, and either may be degenerate or
unparsable by chance, so a sampled pair proves nothing alone. Over many pairs the sides must
agree in distribution, each check an exact paired test at `sampling.alpha` (the sampling gate's
level, family-wise per check; six or seven checks keep the replay's false-alarm rate under about
0.7 % for two servers that sample alike):

- `sampled_degenerate`, `sampled_empty`, `sampled_json`: McNemar's exact test, one-sided — the
  candidate's answer is degenerate (empty, unparsable JSON where JSON was asked) where the
  baseline's is not more often than the reverse;
- `sampled_finish`: McNemar, two-sided, on stopping by itself (`stop`/`tool_calls`) against
  running to the length limit — an ignored end-of-sequence token, or answers cut short;
- `sampled_length`: the sign test, two-sided, on the answers' lengths in characters;
- `sampled_symbols`: the sign test, one-sided, on the share of the answer that is punctuation
  and symbols — sampled garbage from a broken kernel (`and a-, the)` where the baseline wrote
  `The city I'm`) is word salad, not the runs of one symbol the absolute degeneration check
  looks for;
- `sampled_openings`: for a request repeated at least MIN_REPEATS times (the same body but for
  its seed, user and streaming), Pearson's homogeneity test on the answers' first words across
  sides (rare openings pooled to `sampling.min_expected`), Bonferroni across such requests — a
  candidate that answers greedily, or at another temperature, opens differently.

Every passing check states its power (what a pass rules out, at `sampling.power`); a check
whose pairs cannot reach `sampling.alpha` at all is not measured, never a pass.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servegate.config.policy import SamplingPolicy
from servegate.proxy.comparison import PairComparison
from servegate.stats.goodness_of_fit import bonferroni, homogeneity
from servegate.stats.paired import (
    PairedCounts,
    detectable_share,
    mcnemar_exact,
    sign_detectable,
    sign_test,
)
from servegate.verdict.judgement import check, judge, not_measured
from servegate.verdict.model import Check, Status

# A request seen fewer times than this gets no openings test of its own: with fewer answers a
# side, pooling to `min_expected` (5) leaves too few bins for even a collapse to one opening to
# show. At this many or more the check still asks whether its draws could show a collapse, and
# leaves out a request whose draws could not (its power statement).
MIN_REPEATS = 10
# What may differ between two sends of one request without changing the distribution asked for.
NOT_THE_DISTRIBUTION = frozenset({"seed", "user", "stream", "stream_options"})
STOPPED = frozenset({"stop", "tool_calls"})


def request_key(request: Mapping[str, Any]) -> str:
    """Requests with equal keys ask for one distribution (seed, user and streaming aside)."""
    kept = {k: v for k, v in request.items() if k not in NOT_THE_DISTRIBUTION}
    return json.dumps(kept, sort_keys=True, default=str)


@dataclass(frozen=True)
class SampledPair:
    """How the two answers to one sampled request compared; `key` is the request's
    `request_key` (what the proxy keeps instead of the request)."""

    key: str
    comparison: PairComparison

    @classmethod
    def of(cls, request: Mapping[str, Any], comparison: PairComparison) -> SampledPair:
        return cls(request_key(request), comparison)


def _answered(pair: SampledPair) -> bool:
    c = pair.comparison
    return c.primary_ok and c.candidate_ok and c.candidate_opening is not None


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def _paired_check(
    name: str,
    title: str,
    bad: Sequence[tuple[bool | None, bool | None]],
    what: str,
    policy: SamplingPolicy,
    *,
    two_sided: bool = False,
) -> Check:
    """McNemar's test on (baseline, candidate) "the answer is bad" per pair (None: the pair does
    not have it, and counts only where both sides do); one-sided: the candidate's more often."""
    kept = [(not b, not c) for b, c in bad if b is not None and c is not None]
    share = detectable_share(len(kept), policy.alpha, float(policy.power), two_sided=two_sided)
    if share is None:
        return not_measured(name, title, f"{len(kept)} sampled pair(s) cannot reach p < "
                            f"{policy.alpha:g}: too few to tell {what} from chance")  # fmt: skip
    counts = PairedCounts.from_outcomes([b for b, _ in kept], [c for _, c in kept])
    result = mcnemar_exact(counts)
    p = result.p_two_sided if two_sided else result.p_candidate_worse
    sides = "two-sided" if two_sided else "one-sided"
    return check(
        name, title, failed=p < policy.alpha,
        candidate=f"{counts.regressions} pair(s) {what} where the baseline's is not",
        baseline=f"{counts.improvements} pair(s) the reverse, of {len(kept)}",
        limit=f"fails at McNemar {sides} p < {policy.alpha:g} (here p {p:.3g}); power: {what} "
        f"on ≥ {_pct(share)} of pairs would be caught with probability ≥ "
        f"{float(policy.power):g}",
        policy_key="sampling.alpha",
        reason=f"the candidate's answer is {what} where the baseline's is not in "
        f"{counts.regressions} pair(s), the reverse in {counts.improvements} (p {p:.3g})",
    )  # fmt: skip


def _metric(comps: Sequence[PairComparison], name: str) -> list[tuple[bool | None, bool | None]]:
    """Per pair, whether each side's answer has metric `name` (None where it was not measured)."""

    def bad(metrics: Mapping[str, float]) -> bool | None:
        value = metrics.get(name)
        return None if value is None else value == 1.0

    return [(bad(c.primary_metrics), bad(c.candidate_metrics)) for c in comps]


@dataclass(frozen=True)
class _SignMeasure:
    """A per-answer value the sign test compares pair by pair, and how its results read."""

    name: str
    title: str
    two_sided: bool
    larger: str  # "longer", "more symbol-heavy": the candidate's value the larger
    unit: str  # how the values read in the evidence: "chars", "share"


_LENGTH = _SignMeasure("sampled_length", "sampled answers are as long as the baseline's", True,
                       "longer", "chars")  # fmt: skip
_SYMBOLS = _SignMeasure("sampled_symbols", "sampled answers are no more symbol-heavy than the "
                        "baseline's", False, "more symbol-heavy", "share")  # fmt: skip


def _sign_check(
    measure: _SignMeasure, values: Sequence[tuple[float, float]], policy: SamplingPolicy
) -> Check:
    """The sign test on (baseline, candidate) values of each pair; ties left out."""
    larger = sum(1 for b, c in values if c > b)
    smaller = sum(1 for b, c in values if c < b)
    sides = "two-sided" if measure.two_sided else "one-sided"
    q = sign_detectable(larger + smaller, policy.alpha, float(policy.power),
                        two_sided=measure.two_sided)  # fmt: skip
    if q is None:
        return not_measured(measure.name, measure.title, f"{larger + smaller} untied sampled "
                            f"pair(s) cannot reach p < {policy.alpha:g}")  # fmt: skip
    p = sign_test(larger, smaller, two_sided=measure.two_sided)

    def mean(i: int) -> str:
        m = sum(v[i] for v in values) / len(values)
        return f"{m:.0%}" if measure.unit == "share" else f"{m:.0f} {measure.unit}"

    either = " (or the reverse)" if measure.two_sided else ""
    return check(
        measure.name, measure.title, failed=p < policy.alpha,
        candidate=f"{measure.larger} in {larger} pair(s), the reverse in {smaller}; mean "
        f"{mean(1)}",
        baseline=f"mean {mean(0)}; {len(values) - larger - smaller} tie(s) of {len(values)}",
        limit=f"fails at sign test {sides} p < {policy.alpha:g} (here p {p:.3g}); power: a "
        f"candidate {measure.larger}{either} in ≥ {_pct(q)} of untied pairs caught with "
        f"probability ≥ {float(policy.power):g}",
        policy_key="sampling.alpha",
        reason=f"the candidate's answers are {measure.larger} than the baseline's in {larger} "
        f"pair(s), the reverse in {smaller} (mean {mean(1)} against {mean(0)}; p {p:.3g})",
    )  # fmt: skip


def _openings_check(pairs: Sequence[SampledPair], policy: SamplingPolicy) -> Check:
    name = "sampled_openings"
    title = "repeated sampled requests open with the baseline's distribution of first words"
    groups: dict[str, list[PairComparison]] = {}
    for pair in pairs:
        c = pair.comparison
        if c.primary_opening is not None and c.candidate_opening is not None:
            groups.setdefault(pair.key, []).append(c)
    tested = {k: v for k, v in groups.items() if len(v) >= MIN_REPEATS}
    if not tested:
        why = f"no sampled request was repeated {MIN_REPEATS} times or more (nothing to compare"
        return not_measured(name, title, why + " the distributions of answers on)")
    # The family: the repeated requests whose draws could show even the least visible collapse
    # (a candidate giving the baseline's commonest opening every time) — chosen from the
    # baseline's answers alone, so the choice cannot favour either verdict.
    counts = [
        (Counter(c.primary_opening or "" for c in comps),
         Counter(c.candidate_opening or "" for c in comps))
        for comps in tested.values()
    ]  # fmt: skip
    collapse = sorted(
        (_homogeneity_p(b, {b.most_common(1)[0][0]: b.total()}, policy), i)
        for i, (b, _) in enumerate(counts)
    )
    kept = max((m for m in range(1, len(collapse) + 1) if collapse[m - 1][0] * m < policy.alpha),
               default=0)  # fmt: skip
    if not kept:
        why = (f"none of the {len(tested)} repeated request(s) could tell even a candidate "
               "answering one opening every time from the baseline: too few repeats for how "
               "diverse its answers are")  # fmt: skip
        return not_measured(name, title, why)
    family = [counts[i] for _, i in collapse[:kept]]
    detectable = collapse[kept - 1][0] * kept
    p_values, worst = [], ("", 1.0, 0, 0)
    for base, cand in family:
        p_values.append(_homogeneity_p(base, cand, policy))
        if p_values[-1] <= worst[1]:
            worst = (cand.most_common(1)[0][0], p_values[-1], len(base), len(cand))
    adjusted, rejects = bonferroni(p_values, policy.alpha)
    return check(
        name, title, failed=rejects,
        candidate=f"smallest p {min(p_values):.3g} over {kept} of {len(tested)} repeated "
        f"request(s) (those whose draws can show a collapse); the "
        f"candidate's commonest opening there {worst[0]!r} ({worst[3]} distinct openings)",
        baseline=f"{worst[2]} distinct openings",
        limit=f"fails at Pearson homogeneity, Bonferroni-adjusted p < {policy.alpha:g} (here p "
        f"{adjusted:.3g}); "
        f"power: a candidate answering the baseline's commonest opening every time (a greedy "
        f"sampler) gives adjusted p ≤ {detectable:.3g} on these draws",
        policy_key="sampling.alpha",
        reason=f"a repeated request's answers open differently on the candidate (adjusted p "
        f"{adjusted:.3g}; {worst[3]} distinct openings against the baseline's {worst[2]})",
    )  # fmt: skip


def _homogeneity_p(a: Mapping[str, int], b: Mapping[str, int], policy: SamplingPolicy) -> float:
    fit = homogeneity(a, b, min_expected=policy.min_expected)
    return 1.0 if fit is None else fit.p_value


def sampled_checks(pairs: Sequence[SampledPair], policy: SamplingPolicy) -> list[Check]:
    """The distribution checks over the sampled pairs both sides answered (module doc)."""
    answered = [p for p in pairs if _answered(p)]
    comps = [p.comparison for p in answered]
    return [
        _paired_check("sampled_degenerate", "sampled answers degenerate no more often than the "
                      "baseline's", _metric(comps, "garbage"), "degenerate", policy),
        _paired_check("sampled_empty", "sampled answers are empty no more often than the "
                      "baseline's", _metric(comps, "empty_output"), "empty", policy),
        _paired_check("sampled_json", "sampled JSON answers parse as often as the baseline's",
                      _metric(comps, "json_parse_failure"), "unparsable JSON", policy),
        _paired_check("sampled_finish", "sampled answers stop by themselves as the baseline's "
                      "do", [(c.primary_finish_reason not in STOPPED,
                              c.candidate_finish_reason not in STOPPED) for c in comps],
                      "cut at the length limit", policy, two_sided=True),
        _sign_check(_LENGTH, [(c.primary_length_chars or 0, c.candidate_length_chars or 0)
                              for c in comps], policy),
        _sign_check(_SYMBOLS, [(c.primary_symbol_ratio or 0.0, c.candidate_symbol_ratio or 0.0)
                               for c in comps], policy),
        _openings_check(answered, policy),
    ]  # fmt: skip


# The live proxy judges the latest sampled pairs: enough for the openings of a popular request
# to be tested (MIN_REPEATS each), bounded so that a long shadow holds a few MB at most.
WINDOW = 5000


class SampledWindow:
    """The latest WINDOW sampled pairs the proxy compared, and their judgement on demand
    (`servegate proxy`'s /servegate/sampled). `add` runs on the judge's thread, `judge` on a
    worker thread: both under one lock, the checks on a copy."""

    def __init__(self, policy: SamplingPolicy, size: int = WINDOW) -> None:
        self.policy = policy
        self._pairs: deque[SampledPair] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.seen = 0  # every sampled pair added, the window's and those it let go

    def add(self, request: Mapping[str, Any], comparison: PairComparison) -> None:
        pair = SampledPair.of(request, comparison)
        with self._lock:
            self._pairs.append(pair)
            self.seen += 1

    def judge(self) -> dict[str, Any]:
        """The sampled checks over the window: the status by the gates' one rule (pass, fail,
        inconclusive when nothing is measurable yet), each check with its evidence."""
        with self._lock:
            pairs, seen = list(self._pairs), self.seen
        checks = sampled_checks(pairs, self.policy) if pairs else []
        status, summary = judge(checks) if checks else (Status.INCONCLUSIVE, "no sampled pairs")
        return {
            "status": status.value,
            "summary": summary,
            "pairs": len(pairs),
            "pairs_seen": seen,
            "window": self._pairs.maxlen,
            "checks": [c.model_dump(mode="json") for c in checks],
        }
