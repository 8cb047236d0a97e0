"""Gate 4, context & tools: long sequences, caches and streaming paths agree.

`plan` (the steps: needles, prefix-cache parity, stream parity, cancellation, reasoning),
`collect` (I/O), `judgement` (pure `evaluate`).
"""

from servegate.gates.context.collect import collect
from servegate.gates.context.judgement import evaluate
from servegate.gates.context.plan import NAME, ContextEvidence, ContextPlan

__all__ = ["NAME", "ContextEvidence", "ContextPlan", "collect", "evaluate"]
