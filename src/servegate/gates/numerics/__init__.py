"""Gate 2, numerics: the math did not move beyond the noise.

`plan` (what is sent), `noise` (the baseline's own floor along its paths), `collect` (I/O),
`perplexity` and `echo_route` (prompt scoring through each side's checked route), `prompt`
(the same chat prompt on both sides), `judgement` (pure `evaluate`).
"""

from servegate.gates.numerics.collect import collect, plan
from servegate.gates.numerics.judgement import evaluate
from servegate.gates.numerics.noise import NAME
from servegate.gates.numerics.plan import PROMPTS, NumericsConfig, NumericsEvidence

__all__ = ["NAME", "PROMPTS", "NumericsConfig", "NumericsEvidence", "collect", "evaluate", "plan"]
