"""Gate 1's over-capacity request (vLLM #35541): a prompt that fits the served context but needs
more KV-cache blocks than the server has. The scheduler of the affected releases waited for
blocks that could never free up, forever, while /health stayed green.

Asked only where the capacity is known: vLLM's `vllm:cache_config_info` (num_gpu_blocks ×
block_size) and the context from `/v1/models` (`max_model_len`). The prompt must be answered or
rejected within the probe deadline; a timeout is a hang. Where the KV cache holds a whole
max-context prompt (vLLM 0.31 and 0.32 refuse to start otherwise, measured 2026-12-02: see
docs/engines.md) no prompt can be over capacity, and the check says so instead of passing.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from servegate.config.models import GateConfig, Policy
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion
from servegate.gates.evidence import describe
from servegate.gates.pair import EndpointPair
from servegate.verdict.judgement import check, not_applicable
from servegate.verdict.model import Check, Finding, Severity

PROBE = "over-capacity-request"
# " hello" is one token in the BPE vocabularies we serve (SmolLM2, Llama, Qwen); the prompt is
# sized halfway between capacity and context so a few tokens either way keep it in that gap.
WORD = "hello "
_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_CONTEXT_KEYS = ("max_model_len", "context_length", "max_context_length")


@dataclass(frozen=True)
class CapacityEvidence:
    """One side: what it said about its KV cache and context, and how it met the prompt."""

    side: str
    max_context: int | None
    kv_capacity_tokens: int | None  # num_gpu_blocks × block_size
    prompt_words: int | None = None  # None: no prompt was sent (see `note`)
    result: Completion | None = None
    elapsed_ms: float | None = None
    note: str = ""

    @property
    def hung(self) -> bool:
        err = self.result.error if self.result is not None else None
        return err is not None and err.hung


def kv_capacity(metrics_text: str) -> int | None:
    """num_gpu_blocks × block_size of the first `vllm:cache_config_info` series, if both are
    integers (None before profiling, or for any other server)."""
    match = _CACHE_INFO.search(metrics_text)
    if match is None:
        return None
    labels = dict(_LABEL.findall(match.group(1)))
    try:
        return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    except (KeyError, ValueError):
        return None


def max_context(listing: object, model: str | None) -> int | None:
    """The served context of `model` in a /v1/models answer."""
    data = listing.get("data") if isinstance(listing, dict) else None
    entries = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    entry = next((m for m in entries if m.get("id") == model), entries[0] if entries else None)
    if entry is None:
        return None
    return next((entry[k] for k in _CONTEXT_KEYS if isinstance(entry.get(k), int)), None)


async def collect_side(pair: EndpointPair, ep: Endpoint, cfg: GateConfig) -> CapacityEvidence:
    """Read capacity and context; send the over-capacity prompt only where one exists."""
    # Recorded like every request servegate sends (README: every request is in the store).
    probe = pair.recording(ep, gate="startup", probe="over-capacity:discovery")
    models = await probe.raw("GET", "/models", deadline_s=cfg.probe_deadline_s)
    try:
        context = max_context(models.json(), pair.model) if models.ok else None
    except ValueError:
        context = None
    metrics = await probe.raw("GET", "../metrics", deadline_s=cfg.probe_deadline_s)
    capacity = kv_capacity(metrics.body.decode("utf-8", "replace")) if metrics.ok else None
    if context is None or capacity is None:
        missing = "its KV capacity (vllm:cache_config_info)" if capacity is None else "its context"
        return CapacityEvidence(
            ep.name, context, capacity, note=f"the server does not say {missing}"
        )
    if capacity >= context:
        return CapacityEvidence(
            ep.name, context, capacity,
            note=f"its KV cache holds {capacity} tokens, a whole {context}-token context: "
            "no prompt that fits the context is over capacity",
        )  # fmt: skip
    words = (capacity + context) // 2
    body = pair.body({"prompt": WORD * words, "max_tokens": 4, "temperature": 0})
    t0 = time.perf_counter()
    result = await ep.completion(body, deadline_s=cfg.probe_deadline_s)
    elapsed_ms = (time.perf_counter() - t0) * 1e3
    pair.recorder.record(gate="startup", probe=PROBE, side=ep.name, api="completions",
                         request=body, result=result)  # fmt: skip
    return CapacityEvidence(ep.name, context, capacity, words, result, elapsed_ms)


def _shown(ev: CapacityEvidence) -> str:
    if ev.result is None:
        return "not sent"
    return f"{describe(ev.result)} in {ev.elapsed_ms or 0:.0f} ms ({ev.prompt_words} words)"


def judge_capacity(
    b: CapacityEvidence, c: CapacityEvidence, policy: Policy
) -> tuple[list[Check], list[Finding]]:
    """A hang on the over-capacity prompt fails the candidate (critical), a slow rejection is
    major; served or rejected fast passes. Unknown or ample capacity: not measured, and why."""
    title = "a prompt over the KV capacity (within the context) is answered or rejected, not hung"
    if c.result is None:
        # No KV capacity below the context to probe (unknown on servers without vLLM's cache
        # info, or ample): the situation cannot arise there, so nothing is missing.
        return [not_applicable("over_capacity", title, f"the candidate: {c.note}")], []
    findings: list[Finding] = []
    err = c.result.error
    slow = (
        err is not None
        and err.category in ("rejected", "error_body")
        and (c.elapsed_ms or 0) > policy.impossible_reject_s * 1e3
    )
    if c.hung or slow:
        findings.append(
            Finding(
                probe=PROBE,
                category="timeout" if c.hung else "impossible_request",
                severity=Severity.CRITICAL if c.hung else Severity.MAJOR,
                side=c.side,
                message=(
                    f"a {c.prompt_words}-word prompt needs more KV blocks than the server has "
                    f"({c.kv_capacity_tokens} tokens, context {c.max_context}): "
                    + (
                        "no answer in time, the scheduler waits for blocks that never free up "
                        "(the vLLM #35541 class)"
                        if c.hung
                        else "rejected only slowly"
                    )
                ),
                baseline_excerpt=_shown(b),
                candidate_excerpt=_shown(c),
            )
        )
    verdict = "hung" if c.hung else "served" if err is None else f"rejected ({err.category})"
    return [
        check(
            "over_capacity",
            title,
            failed=bool(findings),
            baseline=_shown(b),
            candidate=f"{verdict}: {_shown(c)}",
            limit=f"answered, or rejected within {policy.impossible_reject_s:g} s",
            policy_key="impossible_reject_s",
            reason="; ".join(f.message for f in findings)[:300],
        )
    ], findings
