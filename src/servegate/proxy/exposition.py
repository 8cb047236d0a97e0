"""The proxy's Prometheus metrics, one registry per proxy, served at /servegate/metrics.

Ratios are exported as counter pairs (events and the requests they were measured on), so a
rate over any window is `rate(x_total[5m]) / rate(measured_total[5m])`; per-request ratios of
the text (repeated tokens, abnormal characters) as histograms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from servegate.canary.protocol import ANSWER_PREFIX
from servegate.proxy.comparison import PairComparison

CONTENT_TYPE = CONTENT_TYPE_LATEST
PREFIX = "servegate_proxy"
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
RATIO_BUCKETS = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
CANARY_PHASES = ("progressing", "promoted", "rolled_back", "finalised")  # canary.controller.Phase
CANARY_ACTIONS = ("promote", "hold", "rollback", "complete", "finalise")  # canary.controller.Action
# METRICS name -> counter suffix, for the 0/1 per-request flags
FLAGS = {
    "error": "errors",
    "timeout": "timeouts",
    "empty_output": "empty_outputs",
    "garbage": "garbage_outputs",
    "json_parse_failure": "json_parse_failures",
    "tool_call_parse_failure": "tool_call_parse_failures",
}
# the denominator each flag is measured on
MEASURED_ON = {
    "error": "requests",
    "timeout": "requests",
    "empty_output": "outputs",
    "garbage": "outputs",
    "json_parse_failure": "json_requests",
    "tool_call_parse_failure": "tool_call_outputs",
}


class ProxyMetrics:
    """Counters and histograms for both sides (`side` label: primary, candidate, secondary)."""

    def __init__(self, queue_depth: Callable[[], int], queue_capacity: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        side = ["side"]
        self.requests = Counter(
            f"{PREFIX}_requests", "requests answered, per side", side, registry=r
        )
        self.outputs = Counter(
            f"{PREFIX}_outputs", "successful chat/completions answers measured", side, registry=r
        )
        self.json_requests = Counter(
            f"{PREFIX}_json_requests", "answers to requests that asked for JSON", side, registry=r
        )
        self.tool_call_outputs = Counter(
            f"{PREFIX}_tool_call_outputs", "answers that carried tool calls", side, registry=r
        )
        self.refused = Counter(
            f"{PREFIX}_refused",
            "requests the proxy answered itself instead of forwarding them: busy (503, too many "
            "bodies being read at once), in_flight (503, --max-in-flight requests already "
            "served), buffered_bytes (503, --max-buffered-bytes held by requests in flight) or "
            "body_timeout (408, a slow upload)",
            ["reason"], registry=r,
        )  # fmt: skip
        self.answers = Counter(
            f"{PREFIX}_answers",
            "answers by the one answer classifier's class (servegate.endpoints.answers)",
            ["side", "answer_class"], registry=r,
        )  # fmt: skip
        self.flags = {
            name: Counter(f"{PREFIX}_{suffix}", f"requests with {name}=1", side, registry=r)
            for name, suffix in FLAGS.items()
        }
        self.repeated = Histogram(
            f"{PREFIX}_repeated_token_ratio",
            "share of an answer's tokens that repeat the token before",
            side, buckets=RATIO_BUCKETS, registry=r,
        )  # fmt: skip
        self.abnormal = Histogram(
            f"{PREFIX}_abnormal_char_ratio",
            "share of an answer's characters that are replacement, control or private-use",
            side, buckets=RATIO_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttft = Histogram(
            f"{PREFIX}_ttft_seconds", "first token-carrying chunk - request forwarded (streams)",
            side, buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.e2el = Histogram(
            f"{PREFIX}_e2el_seconds", "last byte of the answer - request forwarded",
            side, buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.pairs = Counter(f"{PREFIX}_mirror_pairs", "mirrored pairs compared", registry=r)
        self.greedy_pairs = Counter(
            f"{PREFIX}_mirror_greedy_pairs",
            "temperature-0 pairs both sides answered (the exact-match denominator)", registry=r,
        )  # fmt: skip
        self.exact = Counter(
            f"{PREFIX}_mirror_exact_matches", "temperature-0 pairs with equal answers", registry=r
        )
        self.degenerate = Counter(
            f"{PREFIX}_mirror_candidate_degenerate",
            "pairs where the candidate's answer is degenerate and the primary's is not", registry=r,
        )  # fmt: skip
        self.drops = Counter(
            f"{PREFIX}_mirror_dropped", "sampled requests not mirrored: the queue was full",
            registry=r,
        )  # fmt: skip
        self.record_drops = Counter(
            f"{PREFIX}_records_dropped", "pairs not written: the store writer was behind",
            registry=r,
        )  # fmt: skip
        depth = Gauge(f"{PREFIX}_mirror_queue_depth", "mirror jobs waiting", registry=r)
        depth.set_function(lambda: float(queue_depth()))
        capacity = Gauge(f"{PREFIX}_mirror_queue_capacity", "mirror queue bound", registry=r)
        capacity.set(queue_capacity)
        self.in_flight = Gauge(f"{PREFIX}_in_flight", "user requests being served", registry=r)
        self.buffered = Gauge(
            f"{PREFIX}_buffered_bytes",
            "bytes held by requests in flight: their bodies and the answer bytes kept to measure",
            registry=r,
        )  # fmt: skip
        # The controller's snapshot as gauges, set at each scrape (`canary`): its weight is a
        # percentage, as --steps and the snapshot give it, and the name says so.
        self.canary_weight = Gauge(
            f"{PREFIX}_canary_weight_percent",
            "percent (0-100) of routable requests the canary controller sends to the candidate",
            registry=r,
        )  # fmt: skip
        self.canary_step = Gauge(
            f"{PREFIX}_canary_step_index", "index of the canary's current step in --steps",
            registry=r,
        )  # fmt: skip
        self.canary_phase = Gauge(
            f"{PREFIX}_canary_phase", "1 for the canary's current phase, 0 for the others",
            ["phase"], registry=r,
        )  # fmt: skip
        self.canary_decision = Gauge(
            f"{PREFIX}_canary_last_decision",
            "1 for the action of the canary's last judged interval, 0 for the others",
            ["action"], registry=r,
        )  # fmt: skip
        self.canary_faults = Counter(
            f"{PREFIX}_canary_faults",
            "decisions the canary controller could not compute or record (it failed safe: "
            "every request to the primary, healthz unhealthy, Flagger hooks not ready)",
            registry=r,
        )
        self._faults_seen = 0
        self.canary_score = Gauge(
            f"{PREFIX}_canary_last_score",
            "score (0-100) of the last judged interval; NaN when it had none",
            registry=r,
        )  # fmt: skip

    def canary(self, snapshot: Mapping[str, Any]) -> None:
        """Set the canary gauges from the controller's snapshot."""
        faults = snapshot.get("faults")
        if isinstance(faults, int) and faults > self._faults_seen:
            self.canary_faults.inc(faults - self._faults_seen)
            self._faults_seen = faults
        weight, step = snapshot.get("weight"), snapshot.get("step_index")
        if isinstance(weight, int | float):
            self.canary_weight.set(weight)
        if isinstance(step, int | float):
            self.canary_step.set(step)
        for phase in CANARY_PHASES:
            self.canary_phase.labels(phase=phase).set(float(snapshot.get("phase") == phase))
        last = snapshot.get("last_decision") or {}
        for action in CANARY_ACTIONS:
            self.canary_decision.labels(action=action).set(float(last.get("action") == action))
        score = last.get("score")
        self.canary_score.set(float(score) if isinstance(score, int | float) else math.nan)

    def served(self, side: str, metrics: Mapping[str, float]) -> None:
        """Count one answer and its measurements."""
        self.requests.labels(side).inc()
        if "empty_output" in metrics:
            self.outputs.labels(side).inc()
        if "json_parse_failure" in metrics:
            self.json_requests.labels(side).inc()
        if "tool_call_parse_failure" in metrics:
            self.tool_call_outputs.labels(side).inc()
        for name in metrics:
            if name.startswith(ANSWER_PREFIX):
                self.answers.labels(side, name.removeprefix(ANSWER_PREFIX)).inc()
        for name, counter in self.flags.items():
            if metrics.get(name):
                counter.labels(side).inc()
        if "repeated_token_ratio" in metrics:
            self.repeated.labels(side).observe(metrics["repeated_token_ratio"])
        if "abnormal_char_ratio" in metrics:
            self.abnormal.labels(side).observe(metrics["abnormal_char_ratio"])
        if "ttft_ms" in metrics:
            self.ttft.labels(side).observe(metrics["ttft_ms"] / 1e3)
        if "e2el_ms" in metrics:
            self.e2el.labels(side).observe(metrics["e2el_ms"] / 1e3)

    def paired(self, comparison: PairComparison) -> None:
        """Count one compared pair (the candidate's side was counted by `served`)."""
        self.pairs.inc()
        if comparison.exact_match is not None:
            self.greedy_pairs.inc()
            if comparison.exact_match:
                self.exact.inc()
        if comparison.candidate_degenerate:
            self.degenerate.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
