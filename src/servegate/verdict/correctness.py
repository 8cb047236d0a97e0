"""The Correctness Report table: the few numbers a reviewer reads first, with their thresholds.

Rows are the gates' own checks (never measured or judged again here), so the table and the gates
cannot disagree: a check names the row it feeds, its status is the check's outcome through the
one mapping in judgement.py, and a row several gates feed (hangs) is `combine`d the same way. A
row whose gate did not run is left out; a row with nothing measured is inconclusive.
"""

from __future__ import annotations

from collections.abc import Sequence

from servegate.verdict.judgement import STATUS_OF, combine
from servegate.verdict.model import Check, CorrectnessRow, GateResult, Status

ROWS = (
    "deterministic pass rate",
    "structured parse rate",
    "numerical drift",
    "perplexity shift",
    "severe degeneration",
    "sampled distribution",
    "long-context recall",
    "hangs",
    "start-up log",
)


def _row(name: str, fed: Sequence[tuple[str, Check]]) -> CorrectnessRow:
    if len(fed) == 1:
        gate, c = fed[0]
        return CorrectnessRow(
            metric=name, gate=gate, baseline=c.baseline, candidate=c.candidate,
            threshold=c.limit, status=STATUS_OF[c.outcome],
        )  # fmt: skip
    return CorrectnessRow(
        metric=name,
        gate=", ".join(g for g, _ in fed),
        baseline="; ".join(f"{g}: {c.baseline}" for g, c in fed if c.baseline != "-") or "-",
        candidate="; ".join(f"{g}: {c.candidate}" for g, c in fed),
        threshold=fed[0][1].limit,
        status=STATUS_OF[combine([c for _, c in fed])],
    )


def correctness_table(results: Sequence[GateResult]) -> tuple[CorrectnessRow, ...]:
    """One row per headline metric of the gates that ran, in the seed's order."""
    ran = [g for g in results if g.status is not Status.SKIP]
    rows = []
    for name in ROWS:
        fed = [(g.name, c) for g in ran for c in g.checks if c.row == name]
        if fed:
            rows.append(_row(name, fed))
    return tuple(rows)
