"""`logit_bias` at temperature 1: a banned token is never drawn, a forced one dominates.

Two first-token cells on one prompt (the neutral sampler, temperature 1): `logit_bias` −100 on
the token the baseline's temperature-1 report gives the most mass (`ban`), and +100 on one it
gives almost none (`force`). Token ids come from each side's own tokenizer (gates/tokenizer.py)
and must agree: the bias names ids, not strings. A side honours `logit_bias` when no draw of
`ban` is the banned token and at least half the draws of `force` are the forced one.

A baseline that ignores `logit_bias` does not offer it (llama-cpp-python's chat handler drops
it): not applicable, listed. A baseline that honours it holds the candidate to it: a candidate
that ignores it, or refuses it (HTTP 4xx), fails. Power: a candidate that ignored the ban would
draw the banned token with its reported probability p each draw, so `n` draws without it rule
that out with probability 1 − (1 − p)^n.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servegate.gates.evidence import curl
from servegate.gates.sampling.first_token import answered, counts, drawn, refused
from servegate.gates.sampling.plan import BiasTarget, CellDraws, Kind, Reported
from servegate.verdict.judgement import check, not_applicable, not_measured
from servegate.verdict.model import Check, Finding, Severity

NAME, TITLE = (
    "logit_bias",
    "logit_bias: a banned token (−100) is never drawn, a forced one (+100) dominates",
)
# The forced token: one the baseline reports at most this likely, so that only a bias makes it
# the usual draw (a forced share of one half is then more than 50 times its own probability).
FORCED_AT_MOST = 0.01
Judged = tuple[Check, list[Finding]]


def candidates(
    prompts: Sequence[tuple[str, str]], reports: Mapping[str, Reported]
) -> list[tuple[str, str, tuple[str, float], tuple[tuple[str, float], ...]]]:
    """Per prompt with a baseline report, most concentrated first: (prompt id, prompt, the
    token to ban with its probability, the tokens that may be forced, least likely first)."""
    out = []
    for pid, text in prompts:
        report = reports.get(pid)
        if report is None or not report.tokens:
            continue
        rare = tuple((t, p) for t, p in zip(report.tokens, report.probs, strict=True)
                     if p <= FORCED_AT_MOST and t.strip())  # fmt: skip
        out.append((pid, text, (report.tokens[0], report.probs[0]), tuple(reversed(rare))))
    return sorted(out, key=lambda c: -c[2][1])


@dataclass(frozen=True)
class BiasReading:
    """What one side's `ban` and `force` draws show."""

    banned_hits: int
    ban_draws: int
    forced_hits: int
    force_draws: int

    @property
    def honours(self) -> bool:
        return self.banned_hits == 0 and 2 * self.forced_hits >= self.force_draws

    def text(self, target: BiasTarget) -> str:
        return (f"banned {target.banned!r} drawn {self.banned_hits}/{self.ban_draws}, forced "
                f"{target.forced!r} {self.forced_hits}/{self.force_draws}")  # fmt: skip


def read(ban: CellDraws, force: CellDraws, side: str, target: BiasTarget) -> BiasReading | str:
    """A side's reading, or why its draws cannot be read (too many failed)."""
    b_ok, b_why = answered(ban.side(side))
    f_ok, f_why = answered(force.side(side))
    if b_why or f_why:
        return b_why or f_why
    return BiasReading(counts(b_ok)[target.banned], len(b_ok),
                       counts(f_ok)[target.forced], len(f_ok))  # fmt: skip


def _finding(cell: CellDraws, url: str, model: str | None, message: str) -> Finding:
    body = {**cell.candidate_request, **({"model": model} if model else {})}
    return Finding(probe=cell.cell.probe, category="sampling_logit_bias",
                   severity=Severity.MAJOR, side="candidate", message=message,
                   baseline_excerpt=drawn(cell.baseline), candidate_excerpt=drawn(cell.candidate),
                   curl=curl(url, "chat", body))  # fmt: skip


def bias_check(
    cells: Sequence[CellDraws],
    target: BiasTarget | None,
    unplanned: str,
    url: str,
    model: str | None,
    power: float,
) -> Judged:
    """The `logit_bias` check; `unplanned` says why no target was found (no tokenizer, ids
    that differ between the sides, no single-token choice)."""
    ban = next((cd for cd in cells if cd.cell.kind is Kind.BAN), None)
    force = next((cd for cd in cells if cd.cell.kind is Kind.FORCE), None)
    if target is None or ban is None or force is None:
        return not_measured(NAME, TITLE, unplanned or "no logit_bias cell was planned"), []
    why = refused([ban, force], "baseline")
    if why:
        return not_applicable(NAME, TITLE, f"the baseline refuses logit_bias: {why}"), []
    b = read(ban, force, "baseline", target)
    if isinstance(b, str):
        return not_measured(NAME, TITLE, f"baseline: {b}"), []
    if not b.honours:
        why = f"the baseline ignores logit_bias ({b.text(target)}): it does not offer it"
        return not_applicable(NAME, TITLE, why), []
    why = refused([ban, force], "candidate")
    if why:
        reason = f"the candidate refuses logit_bias, which the baseline honours: {why}"
        failed = check(NAME, TITLE, failed=True, candidate="refused", baseline=b.text(target),
                       limit="honoured as the baseline honours it", reason=reason)  # fmt: skip
        return failed, [_finding(ban, url, model, reason)]
    c = read(ban, force, "candidate", target)
    if isinstance(c, str):
        return not_measured(NAME, TITLE, f"candidate: {c}"), []
    limit = (f"banned token never drawn, forced token in ≥ half the draws (ids {target.banned_id}, "
             f"{target.forced_id} by each side's tokenizer)")  # fmt: skip
    if c.honours:
        detect = 1 - (1 - target.banned_p) ** c.ban_draws
        limit += (f"; a ban ignored (the token's reported p {target.banned_p:.2f}) is detected "
                  f"with probability {detect:.3f}")  # fmt: skip
        if detect < power:
            limit += f" (below sampling.power {power:g})"
        return check(NAME, TITLE, failed=False, candidate=c.text(target),
                     baseline=b.text(target), limit=limit), []  # fmt: skip
    reason = f"{c.text(target)} where the baseline's {b.text(target)}"
    worst = ban if c.banned_hits else force
    found = _finding(worst, url, model, f"{TITLE}: {reason}")
    return check(NAME, TITLE, failed=True, candidate=c.text(target), baseline=b.text(target),
                 limit=limit, reason=reason), [found]  # fmt: skip
