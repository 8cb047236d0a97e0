"""The performance gate: not slower, measured honestly (after the correctness gates).

`plan` (blocks, workloads, evidence types), `collect` (I/O: interleaved load blocks, capacity
sweep, answers alone), `capacity` (max concurrency under SLO), `under_load` (answers under load
against the same prompts alone), `judgement` (pure `evaluate`), `table` (the Performance Report
rows built from the gates' checks).
"""

from servegate.gates.performance.collect import collect
from servegate.gates.performance.judgement import evaluate
from servegate.gates.performance.plan import NAME, PerformanceEvidence

__all__ = ["NAME", "PerformanceEvidence", "collect", "evaluate"]
