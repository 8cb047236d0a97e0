"""Gate 3, golden: behaviour users depend on still holds.

`probe` (one probe's observation and its judgement against the baseline), `responses` (the
`/v1/responses` parity), `collect` (I/O), `judgement` (pure `evaluate` of the probes).
"""

from servegate.gates.golden.collect import collect, evaluate
from servegate.gates.golden.probe import NAME, GoldenEvidence

__all__ = ["NAME", "GoldenEvidence", "collect", "evaluate"]
