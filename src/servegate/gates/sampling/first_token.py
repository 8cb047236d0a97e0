"""The first-token tests of one side, on plain data: what each cell's draws say.

- `reference_test`: temperature 1 against the side's own report (the unreported tokens pooled);
- `tempered_test`: another temperature against the tempered report — among the reported tokens
  exactly p ** (1/T), renormalised; the unreported tokens' share only within the bounds the
  report allows (stats.goodness_of_fit.rest_between);
- `truncation_test`: top_p / top_k / min_p — no draw outside the kept set the side's own
  temperature-1 report gives, and the renormalised report fits the draws inside it;
- `homogeneity_test`: the two sides' temperature-1 draws, one distribution;
- `logprobs_mode`: whether logprobs at another temperature are the raw (temperature-1) ones or
  processed (tempered): the slope of their log-ratios against the temperature-1 report's.

Each family of prompts is one test by Bonferroni (stats.goodness_of_fit.bonferroni).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.types import Completion
from servegate.gates.evidence import excerpt
from servegate.gates.sampling.plan import TOP_LOGPROBS, CellDraws, Kind, Reported, kept
from servegate.stats.goodness_of_fit import (
    Cell,
    bonferroni,
    goodness_of_fit,
    homogeneity,
    rest_between,
    rest_p,
    tempered,
)

# A cell is judged on a side only when at least this share of its draws came back.
MIN_ANSWERED = 0.5


@dataclass(frozen=True)
class CellResult:
    """One cell's test on one side."""

    probe: str
    p_value: float | None  # None: not tested (the reason says why)
    draws: int
    summary: str  # e.g. "'The' 41/96 (report 0.42) … χ² 3.1 df 3"
    outside: tuple[str, ...] = ()  # truncation: tokens drawn outside the kept set
    power_cell: Cell | None = None
    reason: str = ""


@dataclass(frozen=True)
class FamilyResult:
    """A check's test on one side: its cells as one family (Bonferroni)."""

    cells: tuple[CellResult, ...]
    alpha: float
    reason: str = ""  # why nothing was tested

    @property
    def tested(self) -> tuple[CellResult, ...]:
        return tuple(c for c in self.cells if c.p_value is not None)

    @property
    def p_value(self) -> float | None:
        """The family's Bonferroni-adjusted p; 0 when a draw fell outside a kept set."""
        if any(c.outside for c in self.cells):
            return 0.0
        tested = self.tested
        return (
            bonferroni([c.p_value for c in tested if c.p_value is not None], 1.0)[0]
            if tested
            else None
        )

    @property
    def failed(self) -> bool | None:
        p = self.p_value
        return None if p is None else p < self.alpha

    @property
    def worst(self) -> CellResult | None:
        tested = [c for c in self.cells if c.outside] or list(self.tested)
        return min(tested, key=lambda c: c.p_value if c.p_value is not None else 1.0, default=None)

    @property
    def draws(self) -> int:
        return sum(c.draws for c in self.tested)

    def power_cells(self) -> tuple[Cell, ...]:
        return tuple(c.power_cell for c in self.tested if c.power_cell is not None)


def sampled_token(c: Completion) -> str | None:
    """The token a draw sampled, as the side's logprobs name it (its content when they are
    missing); None for a failed draw."""
    if not c.ok:
        return None
    if c.logprobs:
        return c.logprobs[0].token
    return c.content or ""


def counts(draws: Sequence[Completion]) -> Counter[str]:
    return Counter(t for t in map(sampled_token, draws) if t is not None)


def _top(c: Completion, limit: int = TOP_LOGPROBS) -> dict[str, float]:
    """A draw's `limit` most likely reported tokens as probabilities (tokens that print alike
    are summed). Some servers add the sampled token when it is not among them (llama.cpp's
    chat logprobs list 21 then): kept out, or every drawn tail token would look reported."""
    import math

    out: dict[str, float] = {}
    if c.ok and c.logprobs:
        ranked = sorted(c.logprobs[0].top, key=lambda item: -item[1])[:limit]
        for token, logprob in ranked:
            out[token] = out.get(token, 0.0) + math.exp(logprob)
    return out


def reported(draws: Sequence[Completion]) -> Reported | None:
    """The side's report of the distribution from the draws that carried top logprobs: the
    tokens at least half of them list, each at its mean probability, most likely first."""
    tops = [top for top in map(_top, draws) if top]
    seen: dict[str, list[float]] = {}
    for top in tops:
        for token, p in top.items():
            seen.setdefault(token, []).append(p)
    listed = {t: v for t, v in seen.items() if 2 * len(v) >= len(tops)}
    if not listed:
        return None
    ranked = sorted(((sum(v) / len(v), t) for t, v in listed.items()), reverse=True)
    total = sum(p for p, _ in ranked)
    scale = 1.0 / total if total > 1.0 else 1.0  # rounding can add up past 1
    return Reported(tuple(t for _, t in ranked), tuple(p * scale for p, _ in ranked))


def answered(draws: Sequence[Completion]) -> tuple[list[Completion], str]:
    ok = [c for c in draws if c.ok]
    if not draws:
        return ok, "no draws were sent"
    if len(ok) < MIN_ANSWERED * len(draws):
        errors = Counter(str(c.error.category) for c in draws if c.error is not None)
        first = next(c.error for c in draws if c.error is not None)
        kinds = ", ".join(f"{k} {v}" for k, v in errors.items())
        failed = len(draws) - len(ok)
        return ok, f"{failed} of {len(draws)} draws failed ({kinds}; {excerpt(first.message, 120)})"
    return ok, ""


def refused(cells: Sequence[CellDraws], side: str) -> str | None:
    """Why a side refuses every draw of these cells (HTTP 4xx), or None."""
    draws = [c for cd in cells for c in cd.side(side)]
    if not draws or any(c.ok or c.error is None for c in draws):
        return None
    errors = [c.error for c in draws if c.error is not None]
    if not all(e.category is ErrorCategory.REJECTED for e in errors):
        return None
    first = errors[0]
    return f"HTTP {first.status}: {excerpt(first.body_excerpt or first.message, 160)}"


def drawn(draws: Sequence[Completion], limit: int = 6) -> str:
    """The tokens drawn, most often first: `'The' 41/96, 'A' 12/96, …`."""
    counted = counts(draws)
    n = sum(counted.values())
    return ", ".join(f"{t!r} {k}/{n}" for t, k in counted.most_common(limit)) or "no draws"


def _show(counted: Counter[str], report: Reported | None, n: int, limit: int = 4) -> str:
    parts = []
    for token, k in counted.most_common(limit):
        p = report.prob(token) if report is not None else None
        expected = f" (report {p:.2f})" if p is not None else " (unreported)"
        parts.append(f"{token!r} {k}/{n}{expected if report is not None else ''}")
    return ", ".join(parts)


def reference_test(
    cell: CellDraws, side: str, alpha: float, min_expected: float
) -> tuple[CellResult, Reported | None]:
    """Temperature 1 against the side's own report: Pearson with the unreported tokens pooled."""
    probe = cell.cell.probe
    draws, why = answered(cell.side(side))
    report = reported(draws)
    if why:
        return CellResult(probe, None, len(draws), "", reason=why), report
    if report is None:
        return CellResult(probe, None, len(draws), "", reason="no draw carried top logprobs"), None
    counted = counts(draws)
    n = sum(counted.values())
    observed = [counted.get(t, 0) for t in report.tokens]
    observed.append(n - sum(observed))
    fit = goodness_of_fit(observed, [*report.probs, report.rest], min_expected=min_expected)
    shown = _show(counted, report, n)
    if fit is None:
        return CellResult(probe, None, n, shown, reason="too few draws for two bins"), report
    power = Cell(report.probs, report.rest, 1.0, n)
    summary = f"{shown}; χ² {fit.statistic:.1f} df {fit.df}"
    return CellResult(probe, fit.p_value, n, summary, power_cell=power), report


def tempered_test(
    cell: CellDraws, side: str, report: Reported | None, min_expected: float
) -> CellResult:
    """Another temperature against the side's tempered temperature-1 report: the fit among the
    reported tokens and the unreported share against its bounds, each at half the level."""
    probe, t = cell.cell.probe, cell.cell.temperature
    draws, why = answered(cell.side(side))
    if why or report is None:
        return CellResult(probe, None, len(draws), "",
                          reason=why or "no temperature-1 report on this side")  # fmt: skip
    counted = counts(draws)
    n = sum(counted.values())
    observed = [counted.get(tok, 0) for tok in report.tokens]
    inside = sum(observed)
    expected = tempered(report.probs, t)
    fit = goodness_of_fit(observed, list(expected), min_expected=min_expected) if inside else None
    p_fit = fit.p_value if fit is not None else 1.0
    lo, hi = rest_between(report.probs, report.rest, t)
    out = n - inside
    p = min(1.0, 2 * min(p_fit, rest_p(out, n, (lo, hi))))
    shown = _show(counted, report, n)
    summary = (f"{shown}; unreported {out}/{n} (bounds {lo:.2f}-{hi:.2f})"
               + (f"; χ² {fit.statistic:.1f} df {fit.df}" if fit is not None else ""))  # fmt: skip
    power = Cell(report.probs, report.rest, t, n, inside)
    return CellResult(probe, p, n, summary, power_cell=power)


def truncation_test(
    cell: CellDraws, side: str, report: Reported | None, min_expected: float
) -> CellResult:
    """No draw outside the kept set of the side's own report; inside it, the renormalised
    report fits."""
    probe, kind = cell.cell.probe, cell.cell.kind
    draws, why = answered(cell.side(side))
    if why or report is None:
        return CellResult(probe, None, len(draws), "",
                          reason=why or "no temperature-1 report on this side")  # fmt: skip
    value = float(cell.cell.params[str(kind)])
    keep = kept(report, kind, value)
    if keep is None:
        why = f"this side's report puts a token within the margin of {kind} {value:g}'s boundary"
        return CellResult(probe, None, len(draws), "", reason=why)
    counted = counts(draws)
    n = sum(counted.values())
    outside = tuple(sorted(t for t in counted if t not in keep))
    observed = [counted.get(t, 0) for t in keep]
    probs = [report.prob(t) or 0.0 for t in keep]
    fit = goodness_of_fit(observed, probs, min_expected=min_expected) if sum(observed) else None
    shown = _show(counted, report, n)
    kept_text = ", ".join(repr(t) for t in keep)
    summary = f"{kind} {value:g} keeps {kept_text}; {shown}" + (
        f"; χ² {fit.statistic:.1f} df {fit.df}" if fit is not None else ""
    )
    if outside:
        drawn = ", ".join(f"{t!r} {counted[t]}×" for t in outside[:4])
        summary += f"; outside the kept set: {drawn}"
    inside = sum(observed)
    power = Cell(tuple(probs), 0.0, 1.0, inside, inside) if fit is not None else None
    p = 0.0 if outside else (fit.p_value if fit is not None else None)
    reason = "" if p is not None else "too few draws for two bins"
    return CellResult(probe, p, n, summary, outside, power, reason)


def homogeneity_test(
    a: Sequence[Completion], b: Sequence[Completion], probe: str, report: Reported | None,
    min_expected: float,
) -> CellResult:  # fmt: skip
    """Two sets of draws of one request: the same distribution (Pearson, 2 × c, pooled)."""
    counted_a, counted_b = counts(a), counts(b)
    n_a, n_b = sum(counted_a.values()), sum(counted_b.values())
    test = homogeneity(counted_a, counted_b, min_expected=min_expected)
    if test is None:
        return CellResult(probe, None, n_a + n_b, "", reason="a side has no draws")
    top = [t for t, _ in (counted_a + counted_b).most_common(3)]
    shown = ", ".join(f"{t!r} {counted_a[t]}/{n_a} vs {counted_b[t]}/{n_b}" for t in top)
    power = None
    if report is not None:
        power = Cell(report.probs, report.rest, 1.0, int(n_a * n_b / (n_a + n_b)))
    summary = f"{shown}; χ² {test.statistic:.1f} df {test.df}"
    return CellResult(probe, test.p_value, n_a + n_b, summary, power_cell=power)


def family(cells: Sequence[CellResult], alpha: float, reason: str = "") -> FamilyResult:
    return FamilyResult(tuple(cells), alpha, reason)


# --- raw or processed logprobs ---------------------------------------------------------------

# A slope within this relative distance of 1 reads raw, of 1/T processed.
MODE_TOLERANCE = 0.15


@dataclass(frozen=True)
class LogprobsMode:
    """What a side's logprobs at temperatures other than 1 are."""

    mode: str | None  # "raw", "processed", "unclear"; None: nothing to read
    slopes: tuple[tuple[float, float], ...] = ()  # (temperature, median slope)
    reason: str = ""

    @property
    def text(self) -> str:
        shown = ", ".join(f"T {t:g}: slope {s:.2f}" for t, s in self.slopes)
        return f"{self.mode} ({shown})" if self.mode else "-"


def _slope(draw: Completion, report: Reported) -> float | None:
    """The draw's top log-ratios against the temperature-1 report's, through the origin."""
    import math

    top = _top(draw)
    shared = [t for t in report.tokens[:10] if t in top]
    if len(shared) < 3:
        return None
    head = shared[0]
    xs = [math.log(report.prob(t) or 1e-300) - math.log(report.prob(head) or 1e-300)
          for t in shared[1:]]  # fmt: skip
    ys = [math.log(top[t]) - math.log(top[head]) for t in shared[1:]]
    denominator = sum(x * x for x in xs)
    return (
        None if denominator == 0 else sum(x * y for x, y in zip(xs, ys, strict=True)) / denominator
    )


def logprobs_mode(
    cells: Sequence[CellDraws], side: str, reports: Mapping[str, Reported]
) -> LogprobsMode:
    """Raw when the log-ratios at temperature T equal the temperature-1 ones (slope 1),
    processed when they are scaled by 1/T; from the tempered cells' draws."""
    by_t: dict[float, list[float]] = {}
    for cd in cells:
        if cd.cell.kind is not Kind.TEMPERED or cd.cell.prompt_id not in reports:
            continue
        for draw in cd.side(side):
            s = _slope(draw, reports[cd.cell.prompt_id])
            if s is not None:
                by_t.setdefault(cd.cell.temperature, []).append(s)
    if not by_t:
        return LogprobsMode(None, reason="no draw at another temperature carried top logprobs")
    slopes = tuple((t, statistics.median(v)) for t, v in sorted(by_t.items()))
    modes = set()
    for t, s in slopes:
        if abs(s - 1) <= MODE_TOLERANCE:
            modes.add("raw")
        elif abs(s * t - 1) <= MODE_TOLERANCE:
            modes.add("processed")
        else:
            modes.add("unclear")
    mode = modes.pop() if len(modes) == 1 else "unclear"
    return LogprobsMode(mode, slopes)
