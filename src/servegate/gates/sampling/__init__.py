"""The sampling gate: sampled requests draw from the distribution each side reports, and the
candidate draws from the baseline's.

`plan` (the cells: prompts, temperatures, top_p/top_k/min_p, logit_bias, what was seen),
`collect` (I/O), `first_token` (each side's tests on plain data), `sequences` (seeds, n > 1,
penalties), `bias` (logit_bias), `judgement` (pure `evaluate`). The statistics
are in servegate.stats.goodness_of_fit.
"""

from servegate.gates.sampling.collect import collect
from servegate.gates.sampling.judgement import evaluate
from servegate.gates.sampling.plan import NAME, SamplingEvidence, SamplingPlan

__all__ = ["NAME", "SamplingEvidence", "SamplingPlan", "collect", "evaluate"]
