"""Sampled pairs (temperature above 0) judged as distributions, never answer by answer.

Two sampled answers to one request differ on a healthy server, and either may be degenerate or
unparsable by chance, so a sampled pair proves nothing alone. Over many pairs the sides must
agree in distribution, each check an exact paired test at `sampling.alpha` (the sampling gate's
level, family-wise per check; six or seven checks keep the replay's false-alarm rate under about
0.7 % for two servers that sample alike):

- `sampled_degenerate`, `sampled_empty`, `sampled_json`: McNemar's exact test, one-sided — the
  candidate's answer is degenerate (empty, unparsable JSON where JSON was asked) where the
  baseline's is not more often than the reverse;
- `sampled_finish`: McNemar, two-sided, on stopping by itself (`stop`/`tool_calls`) against
  running to the length limit — an ignored end-of-sequence token, or answers cut short;
- `sampled_length`: the sign test, two-sided, on the answers' lengths in characters;
- `sampled_symbols`: the sign test, one-sided, on the share of the answer that is punctuation
  and symbols — sampled garbage from a broken kernel (`and a-, the)` where the baseline wrote
  `The city I'm`) is word salad, not the runs of one symbol the absolute degeneration check
  looks for;
- `sampled_openings`: for a request repeated at least MIN_REPEATS times (the same body but for
  its seed, user and streaming), Pearson's homogeneity test on the answers' first words across
  sides (rare openings pooled to `sampling.min_expected`), Bonferroni across such requests — a
  candidate that answers greedily, or at another temperature, opens differently.

Every passing check states its power (what a pass rules out, at `sampling.power`); a check
whose pairs cannot reach `sampling.alpha` at all is not measured, never a pass.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servegate.config.policy import SamplingPolicy
from servegate.proxy.comparison import PairComparison
from servegate.verdict.judgement import judge
from servegate.verdict.model import Check, Status
from servegate.verdict.sampled_checks import (
    LENGTH,
    STOPPED,
    SYMBOLS,
    openings_check,
    paired_check,
    sign_check,
)

# What may differ between two sends of one request without changing the distribution asked for.
NOT_THE_DISTRIBUTION = frozenset({"seed", "user", "stream", "stream_options"})


def request_key(request: Mapping[str, Any]) -> str:
    """Requests with equal keys ask for one distribution (seed, user and streaming aside)."""
    kept = {k: v for k, v in request.items() if k not in NOT_THE_DISTRIBUTION}
    return json.dumps(kept, sort_keys=True, default=str)


@dataclass(frozen=True)
class SampledPair:
    """How the two answers to one sampled request compared; `key` is the request's
    `request_key` (what the proxy keeps instead of the request)."""

    key: str
    comparison: PairComparison

    @classmethod
    def of(cls, request: Mapping[str, Any], comparison: PairComparison) -> SampledPair:
        return cls(request_key(request), comparison)


def _answered(pair: SampledPair) -> bool:
    c = pair.comparison
    return c.primary_ok and c.candidate_ok and c.candidate_opening is not None


def _metric(comps: Sequence[PairComparison], name: str) -> list[tuple[bool | None, bool | None]]:
    """Per pair, whether each side's answer has metric `name` (None where it was not measured)."""

    def bad(metrics: Mapping[str, float]) -> bool | None:
        value = metrics.get(name)
        return None if value is None else value == 1.0

    return [(bad(c.primary_metrics), bad(c.candidate_metrics)) for c in comps]


def _openings(pairs: Sequence[SampledPair]) -> dict[str, list[tuple[str, str]]]:
    """Each repeated request's pairs as (baseline, candidate) openings."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for pair in pairs:
        c = pair.comparison
        if c.primary_opening is not None and c.candidate_opening is not None:
            groups.setdefault(pair.key, []).append((c.primary_opening, c.candidate_opening))
    return groups


def sampled_checks(pairs: Sequence[SampledPair], policy: SamplingPolicy) -> list[Check]:
    """The distribution checks over the sampled pairs both sides answered (module doc)."""
    answered = [p for p in pairs if _answered(p)]
    comps = [p.comparison for p in answered]
    return [
        paired_check("sampled_degenerate", "sampled answers degenerate no more often than the "
                      "baseline's", _metric(comps, "garbage"), "degenerate", policy),
        paired_check("sampled_empty", "sampled answers are empty no more often than the "
                      "baseline's", _metric(comps, "empty_output"), "empty", policy),
        paired_check("sampled_json", "sampled JSON answers parse as often as the baseline's",
                      _metric(comps, "json_parse_failure"), "unparsable JSON", policy),
        paired_check("sampled_finish", "sampled answers stop by themselves as the baseline's "
                      "do", [(c.primary_finish_reason not in STOPPED,
                              c.candidate_finish_reason not in STOPPED) for c in comps],
                      "cut at the length limit", policy, two_sided=True),
        sign_check(LENGTH, [(c.primary_length_chars or 0, c.candidate_length_chars or 0)
                              for c in comps], policy),
        sign_check(SYMBOLS, [(c.primary_symbol_ratio or 0.0, c.candidate_symbol_ratio or 0.0)
                               for c in comps], policy),
        openings_check(_openings(answered), policy),
    ]  # fmt: skip


# The live proxy judges the latest sampled pairs: enough for the openings of a popular request
# to be tested (MIN_REPEATS each), bounded so that a long shadow holds a few MB at most.
WINDOW = 5000


class SampledWindow:
    """The latest WINDOW sampled pairs the proxy compared, and their judgement on demand
    (`servegate proxy`'s /servegate/sampled). `add` runs on the judge's thread, `judge` on a
    worker thread: both under one lock, the checks on a copy."""

    def __init__(self, policy: SamplingPolicy, size: int = WINDOW) -> None:
        self.policy = policy
        self._pairs: deque[SampledPair] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.seen = 0  # every sampled pair added, the window's and those it let go

    def add(self, request: Mapping[str, Any], comparison: PairComparison) -> None:
        pair = SampledPair.of(request, comparison)
        with self._lock:
            self._pairs.append(pair)
            self.seen += 1

    def judge(self) -> dict[str, Any]:
        """The sampled checks over the window: the status by the gates' one rule (pass, fail,
        inconclusive when nothing is measurable yet), each check with its evidence."""
        with self._lock:
            pairs, seen = list(self._pairs), self.seen
        checks = sampled_checks(pairs, self.policy) if pairs else []
        status, summary = judge(checks) if checks else (Status.INCONCLUSIVE, "no sampled pairs")
        return {
            "status": status.value,
            "summary": summary,
            "pairs": len(pairs),
            "pairs_seen": seen,
            "window": self._pairs.maxlen,
            "checks": [c.model_dump(mode="json") for c in checks],
        }
