"""`--budget`: plan a run to fit a time, and say in each gate's report which power it gave up.

The cost model is each gate's seconds in the default run between two reference engines on the
2-core host (benchmarks/RESULTS-time.md, `full-defaults-2/ref-after`: 410 s), split into the
work a plan can scale and the rest, times the run's *speed*: the measured seconds of the gates
run so far over their modelled seconds (startup first, then each gate in turn). Left out of the
speed: prompt scoring, which is given seconds, not a share, and keeps to them itself
(`perplexity_budget_s`), and the baseline's own noise, sent only when answers differ (a
candidate that needs it spends that time, and the gates after it get less). Before each gate
the planner finds the largest share s of the scalable work whose plan for the gates still to
run fits the time left, each gate at s or its own least share (`_least`):

    speed × Σ (unscalable + max(s, least) × scalable) ≤ time left

and the gate about to run gets its part: numerics `ceil(s × numerics_prompts)` probes and
prompt scoring limited to s × SCORING_S × speed (more only from what would be left were the
gates after it SLOWER_RISK times slower, up to `perplexity_budget_s`); sampling
`sampling_share = s` of its first-token draws (its production-settings answers, seeds and
penalty answers run whole); performance `floor(s × 8)` requests a block (at least 5:
`performance_min_samples` over its 6 blocks, and as many prompts answered alone as
early_divergence's exact test needs) and the looks after its first that fit what the plan
leaves (a scaled gate keeps time for one; `max_blocks`, each look timed by the gate from its
first look's blocks against `performance.looks_within_s`).
Golden, context, startup and embeddings run whole: each of their probes is a behaviour, not a
draw, so cutting one would drop coverage, not power.
Planning again before each gate corrects the model with what the run has measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servegate.config.models import GateConfig, PerformanceConfig
from servegate.gates.golden.collect import HIT_PART
from servegate.gates.numerics.noise import NOISE_PART
from servegate.gates.performance.plan import LOOK_BLOCKS
from servegate.gates.performance.under_load import pairs_needed
from servegate.verdict.model import GateResult, Status

__all__ = ["MIN_SHARE", "Budget", "Planned"]

# (unscalable, scalable) seconds of each gate in the reference run named above; numerics'
# scalable seconds are its probes (9 s) and prompt scoring (SCORING_S).
COST: dict[str, tuple[float, float]] = {
    "startup": (9.0, 0.0),
    "numerics": (1.0, 54.0),
    "embeddings": (0.2, 0.0),
    "golden": (82.0, 0.0),
    # Its production answers, seeds and penalty answers run whole: 29 s, and the penalty
    # answers' 28 % of the gate (25 of 89 s in this host's whole run, 2026-12-07).
    "sampling": (59.0, 49.0),
    "context": (59.0, 0.0),
    "performance": (16.0, 81.0),  # its load blocks scale (requests a block)
}
SCORING_S = 45.0
SCORING_PART = "prompt scoring"
# Work a gate does only when its answers ask for it (the baseline's own noise, `when-needed`):
# its seconds are spent, but left out of the speed, as prompt scoring's are.
UNMODELLED = (SCORING_PART, NOISE_PART, HIT_PART)
MIN_SHARE = 0.25  # a sampling cell keeps a quarter of its draws, numerics 3 of its 12 probes
MIN_SCORING_S = 5.0  # the first reference text is scored whatever the budget (perplexity.py)
MIN_PROBES = 3
MAX_SCORING_SHARE = 20.0  # prompt scoring may be given up to 20 × its model seconds
SPEED_RANGE = (0.25, 10.0)
# The speed starts at the model's and moves with the measured seconds: after startup alone
# (9 model seconds) it has moved 9/24 of the way. Measured 2026-12-07: a startup 0.57× the model's
# gave prompt scoring 90 s where the gates after it then ran at 0.8-0.9×, and the run ended 7 %
# over its budget.
PRIOR_S = 15.0
# Numerics plans before any gate but startup has measured the speed: prompt scoring is given
# more than its model seconds only from what would be left were the gates after it this many
# times slower than measured. Measured 2026-12-07 on stock llama-cpp-python with 8 minutes:
# startup at 0.94× gave prompt scoring 138 s, the gates after it ran at 1.5-2.8×, and the run
# ended 7 % over its budget.
SLOWER_RISK = 2.0
WHOLE = "each probe is a behaviour, not a draw: run whole"


@dataclass(frozen=True)
class Planned:
    """One gate's part of the budget: the settings it runs with, and what they give up."""

    cfg: GateConfig
    share: float
    estimate_s: float
    text: str


def _unmodelled_seconds(result: GateResult) -> float:
    if result.time is None:
        return 0.0
    return sum(p.seconds for p in result.time.parts if p.part.startswith(UNMODELLED))


def _least_per_block(cfg: GateConfig) -> int:
    """The fewest requests a performance block may hold: enough answers for the latency checks
    over the first look's blocks (`performance_min_samples`), and enough prompts answered alone
    (as many as a block holds) for early_divergence's exact test."""
    perf = cfg.performance
    return min(
        perf.requests_per_block,
        max(
            math.ceil(cfg.policy.performance_min_samples / perf.blocks),
            min(perf.isolated_prompts, pairs_needed(cfg.policy.significance_alpha)),
        ),
    )


def _least(name: str, cfg: GateConfig) -> float:
    """The smallest share of its scalable work a gate is given."""
    if name == "numerics":
        return min(1.0, MIN_PROBES / cfg.numerics_prompts)
    if name == "sampling":
        return MIN_SHARE
    if name == "performance":
        return _least_per_block(cfg) / cfg.performance.requests_per_block
    return 0.0


def _cost(name: str, s: float, cfg: GateConfig) -> float:
    """A gate's model seconds when the run's scalable work is planned at `s` (prompt scoring
    at `s` × SCORING_S, which may pass 1: it takes what the time left gives it)."""
    unscalable, scaled = COST.get(name, (0.0, 0.0))
    share = min(1.0, max(s, _least(name, cfg)))
    if name == "numerics":
        return unscalable + share * (scaled - SCORING_S) + max(s, 0.0) * SCORING_S
    return unscalable + share * scaled


@dataclass
class Budget:
    """The run's budget, planned again before each gate from what the gates so far took."""

    total_s: float
    spent_s: float = 0.0
    _measured: float = 0.0  # seconds of the gates run, prompt scoring left out
    _modelled: float = 0.0  # their model seconds at the share each ran with

    @property
    def speed(self) -> float:
        """How much slower than the model this run's gates have been: their measured seconds over
        their model seconds, with PRIOR_S model seconds at the model's speed added to both (1
        before any ran), so that startup's few seconds alone do not set the plan."""
        low, high = SPEED_RANGE
        ratio = (self._measured + PRIOR_S) / (self._modelled + PRIOR_S)
        return min(high, max(low, ratio))

    def plan(self, name: str, todo: Sequence[str], cfg: GateConfig) -> Planned:
        """`cfg` for gate `name`, the first of `todo` (the gates still to run, in order)."""
        speed, left = self.speed, self.total_s - self.spent_s

        def cost(s: float) -> float:
            return speed * sum(_cost(g, s, cfg) for g in todo)

        smallest = cost(0.0) > left
        low, high = 0.0, MAX_SCORING_SHARE  # the largest s whose plan fits what is left
        if cost(high) <= left:
            low = high
        elif not smallest:
            for _ in range(40):
                mid = (low + high) / 2
                low, high = (mid, high) if cost(mid) <= left else (low, mid)
        share = min(1.0, max(low, _least(name, cfg)))

        def where(estimate: float) -> str:
            return (
                f"estimated {estimate:.0f} s at {speed:.2f}× the model's speed; {left:.0f} s of "
                f"the {self.total_s:g} s budget left"
                + (
                    f", {cost(0.0):.0f} s needed by the smallest plan: the smallest plan runs"
                    if smallest
                    else ""
                )
            )

        if name == "performance":
            later = speed * sum(_cost(g, low, cfg) for g in todo[1:])
            perf, fraction, estimate, gave = self._performance(cfg, share, left - later)
            text = (
                f"{'; '.join(gave)} ({where(estimate)})" if gave else f"whole ({where(estimate)})"
            )
            return Planned(cfg.model_copy(update={"performance": perf}), fraction, estimate, text)
        estimate = speed * _cost(name, low, cfg)
        if name == "numerics":
            scoring = speed * min(low, 1.0) * SCORING_S
            if low > 1.0:  # more than its model seconds: only what the rest leaves if slower
                rest = SLOWER_RISK * speed * sum(_cost(g, 1.0, cfg) for g in todo if g != name)
                own = speed * (_cost(name, 1.0, cfg) - SCORING_S)  # its probes, whole
                scoring = max(scoring, min(speed * low * SCORING_S, left - rest - own))
            return self._numerics(cfg, share, scoring, where(estimate))
        if name == "sampling" and share < 1.0:
            return Planned(
                cfg.model_copy(update={"sampling_share": min(share, cfg.sampling_share)}),
                share,
                estimate,
                f"{share:.0%} of the sampling plan's first-token draws ({where(estimate)}): the "
                "smallest temperature error a check would detect grows (each passing check's "
                "limit states it at the draws it got); a check left too few draws to test is "
                "not measured",
            )
        if COST.get(name, (0.0, 0.0))[1] > 0 and share >= 1.0:
            return Planned(cfg, share, estimate, f"whole ({where(estimate)})")
        return Planned(cfg, 1.0, estimate, f"{WHOLE} ({where(estimate)})")

    def _numerics(self, cfg: GateConfig, share: float, scoring_s: float, where: str) -> Planned:
        probes = min(cfg.numerics_prompts, max(MIN_PROBES, math.ceil(share * cfg.numerics_prompts)))
        scoring = min(cfg.perplexity_budget_s, max(MIN_SCORING_S, scoring_s))
        update = {"numerics_prompts": probes, "perplexity_budget_s": scoring}
        estimate = self.speed * (COST["numerics"][0] + share * (COST["numerics"][1] - SCORING_S))
        estimate += scoring
        if probes == cfg.numerics_prompts and scoring == cfg.perplexity_budget_s:
            text = f"whole ({where})"
        else:
            fewer = (
                "flips and Δlogprobs rest on fewer prompts; "
                if probes < cfg.numerics_prompts
                else ""
            )
            text = (
                f"{probes} of {cfg.numerics_prompts} probes, prompt scoring limited to "
                f"{scoring:.0f} s a side, not {cfg.perplexity_budget_s:g} s ({where}): {fewer}"
                "the texts that would not fit are left out, and the perplexity row says how "
                "many tokens were scored (its interval widens as 1/√tokens)"
            )
        return Planned(cfg.model_copy(update=update), share, estimate, text)

    def _performance(
        self, cfg: GateConfig, share: float, left: float
    ) -> tuple[PerformanceConfig, float, float, list[str]]:
        """Fewer requests a block (at least `_least_per_block`), and the looks after the first
        that fit the seconds the plan leaves (`left`: the time left less the gates after this
        one). A gate whose blocks are scaled keeps time for one look after its first (a single
        look left TTFT and E2EL open on stock servers, 2026-12-07); the looks that fit are
        planned before any block runs (`max_blocks`, so each look's level is that schedule's),
        and the gate times them by its first look's blocks (`looks_within_s`). Returns the
        settings, the share of the requests a block, the first look's estimate and what the
        plan gave up."""
        perf = cfg.performance
        least, asked = _least_per_block(cfg), perf.requests_per_block
        unscalable, scaled = COST["performance"]
        look = LOOK_BLOCKS / perf.blocks  # one look's blocks, as a share of the first look's
        if share < 1.0:  # the first look and one more fit `left` at this share of the blocks
            share = (left / self.speed - unscalable) / (scaled * (1.0 + look))
        per_block = min(asked, max(least, math.floor(share * asked)))
        fraction = per_block / asked
        estimate = self.speed * (unscalable + fraction * scaled)
        planned_looks = math.ceil(max(0, perf.max_blocks - perf.blocks) / LOOK_BLOCKS)
        one = self.speed * fraction * scaled * look
        within = max(0.0, left - estimate)
        if perf.looks_within_s is not None:
            within = min(within, perf.looks_within_s)
        fit = min(planned_looks, math.floor(within / one)) if one > 0 else planned_looks
        update: dict[str, object] = {"requests_per_block": per_block}
        gave = []
        if per_block < asked:
            gave.append(
                f"{per_block} requests a block, not {asked}: each block's P95 rests on fewer "
                "answers, so the intervals widen, and early divergence compares "
                f"{min(per_block, perf.isolated_prompts)} prompts, not "
                f"{min(asked, perf.isolated_prompts)}: at 5 each of them must part to fail it"
            )
        if fit < planned_looks:
            most = perf.blocks + LOOK_BLOCKS * fit
            update["max_blocks"] = most
            if fit:
                update["looks_within_s"] = within
            gave.append(
                (
                    f"{fit} look(s) after the first, not {planned_looks} (up to {most} blocks a "
                    f"side, not {perf.max_blocks}; each about {one:.0f} s, {within:.0f} s left "
                    "for them, and the gate times them by its first look's blocks)"
                    if fit
                    else f"no looks after the first ({perf.blocks} blocks a side, not up to "
                    f"{perf.max_blocks}: one would take about {one:.0f} s, {within:.0f} s left)"
                )
                + ": a check still open after them is not measured"
            )
        return perf.model_copy(update=update), fraction, estimate, gave

    def ran(self, name: str, result: GateResult) -> None:
        """Count a finished gate's seconds, and what they say of the run's speed."""
        if result.time is None:
            return
        self.spent_s += result.time.seconds
        if result.status is Status.SKIP or name not in COST:
            return
        unscalable, scaled = COST[name]
        share = 1.0 if result.time.share is None else result.time.share
        if name == "numerics":
            scaled -= SCORING_S
        self._measured += max(0.0, result.time.seconds - _unmodelled_seconds(result))
        self._modelled += unscalable + share * scaled
