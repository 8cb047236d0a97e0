"""Checks over many sampled pairs (baseline answer, candidate answer to one sampled request),
judged as distributions — the one home of the rules that `servegate replay`, the shadow proxy
(proxy/sampled.py) and the sampling gate's production-settings requests share:

- `paired_check`: McNemar's exact test on "the answer is bad" per pair (one-sided: the
  candidate's more often; two-sided where either way is a change);
- `sign_check`: the sign test on a per-answer value (`LENGTH` two-sided, `SYMBOLS` one-sided);
- `openings_check`: Pearson's homogeneity on the first words of a request repeated at least
  MIN_REPEATS times, Bonferroni across the requests whose baseline draws could show a collapse.

Each check runs at `sampling.alpha`, states its power at `sampling.power`, and is not measured
where its pairs cannot reach `sampling.alpha` at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servegate.config.policy import SamplingPolicy
from servegate.stats.goodness_of_fit import bonferroni, homogeneity
from servegate.stats.paired import (
    PairedCounts,
    detectable_share,
    mcnemar_exact,
    sign_detectable,
    sign_test,
)
from servegate.verdict.judgement import check, not_measured
from servegate.verdict.model import Check

# A request seen fewer times than this gets no openings test of its own: with fewer answers a
# side, pooling to `min_expected` (5) leaves too few bins for even a collapse to one opening to
# show. At this many or more the check still asks whether its draws could show a collapse, and
# leaves out a request whose draws could not (its power statement).
MIN_REPEATS = 10
STOPPED = frozenset({"stop", "tool_calls"})  # finish reasons of an answer that ended by itself


def pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def paired_check(
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
        f"on ≥ {pct(share)} of pairs would be caught with probability ≥ "
        f"{float(policy.power):g}",
        policy_key="sampling.alpha",
        reason=f"the candidate's answer is {what} where the baseline's is not in "
        f"{counts.regressions} pair(s), the reverse in {counts.improvements} (p {p:.3g})",
    )  # fmt: skip


@dataclass(frozen=True)
class SignMeasure:
    """A per-answer value the sign test compares pair by pair, and how its results read."""

    name: str
    title: str
    two_sided: bool
    larger: str  # "longer", "more symbol-heavy": the candidate's value the larger
    unit: str  # how the values read in the evidence: "chars", "share"


LENGTH = SignMeasure("sampled_length", "sampled answers are as long as the baseline's", True,
                       "longer", "chars")  # fmt: skip
SYMBOLS = SignMeasure("sampled_symbols", "sampled answers are no more symbol-heavy than the "
                        "baseline's", False, "more symbol-heavy", "share")  # fmt: skip


def sign_check(
    measure: SignMeasure, values: Sequence[tuple[float, float]], policy: SamplingPolicy
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
        f"candidate {measure.larger}{either} in ≥ {pct(q)} of untied pairs caught with "
        f"probability ≥ {float(policy.power):g}",
        policy_key="sampling.alpha",
        reason=f"the candidate's answers are {measure.larger} than the baseline's in {larger} "
        f"pair(s), the reverse in {smaller} (mean {mean(1)} against {mean(0)}; p {p:.3g})",
    )  # fmt: skip


def openings_check(
    groups: Mapping[str, Sequence[tuple[str, str]]], policy: SamplingPolicy
) -> Check:
    """Per repeated request (`groups`: its pairs' (baseline, candidate) openings), Pearson's
    homogeneity test on the openings across sides, Bonferroni over the requests whose
    baseline draws could show a collapse to one opening."""
    name = "sampled_openings"
    title = "repeated sampled requests open with the baseline's distribution of first words"
    tested = {k: v for k, v in groups.items() if len(v) >= MIN_REPEATS}
    if not tested:
        why = f"no sampled request was repeated {MIN_REPEATS} times or more (nothing to compare"
        return not_measured(name, title, why + " the distributions of answers on)")
    # The family: the repeated requests whose draws could show even the least visible collapse
    # (a candidate giving the baseline's commonest opening every time) — chosen from the
    # baseline's answers alone, so the choice cannot favour either verdict.
    counts = [
        (Counter(b for b, _ in pairs), Counter(c for _, c in pairs)) for pairs in tested.values()
    ]
    collapse = sorted(
        (homogeneity_p(b, {b.most_common(1)[0][0]: b.total()}, policy), i)
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
        p_values.append(homogeneity_p(base, cand, policy))
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


def homogeneity_p(a: Mapping[str, int], b: Mapping[str, int], policy: SamplingPolicy) -> float:
    fit = homogeneity(a, b, min_expected=policy.min_expected)
    return 1.0 if fit is None else fit.p_value
