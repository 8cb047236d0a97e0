"""Did both sides see the same prompt? The numerics gate's chat probes are the same messages on
both sides; `usage.prompt_tokens` says how long the prompt each server rendered from them was.

A different count means the candidate's model reads another prompt — a chat template or default
system prompt that changed, or another tokenizer — and every answer that parts from the baseline's
at token 0 follows from that, not only from the arithmetic. Measured 2026-12-02 on the migration
llama.cpp → vLLM: "What is the capital of France?" was 16 prompt tokens on llama-cpp-python and 37
on vLLM (SmolLM2's Hugging Face template adds a default system prompt), and the numerics gate
reported 3 of 12 confident flips at token 0 while the teacher-forced perplexity of the same
weights was equal (ΔNLL −0.0004 ± 0.0019 nats/token).
"""

from __future__ import annotations

from servegate.gates.evidence import curl
from servegate.gates.numerics.plan import NumericsEvidence
from servegate.verdict.judgement import check, not_measured
from servegate.verdict.model import Check, Finding, Severity

__all__ = ["prompt_check"]

TITLE = "the same chat messages render to a prompt of the same length on both sides"


def prompt_check(ev: NumericsEvidence) -> tuple[Check, list[Finding]]:
    """Fails when any chat probe's `usage.prompt_tokens` differs between the sides."""
    counts = [
        (o.request.probe, b, c, o)
        for o in ev.observations
        if o.request.api == "chat"
        and o.baseline.usage is not None
        and o.candidate.usage is not None
        and (b := o.baseline.usage.prompt_tokens) is not None
        and (c := o.candidate.usage.prompt_tokens) is not None
    ]
    if not counts:
        why = "no chat probe carried usage.prompt_tokens on both sides"
        return not_measured("chat_prompt", TITLE, why), []
    differ = [(p, b, c, o) for p, b, c, o in counts if b != c]
    low = min(b for _, b, _, _ in counts)
    high = max(b for _, b, _, _ in counts)
    baseline = f"{len(counts)} chat probes, {low}–{high} prompt tokens"
    if not differ:
        return check(
            "chat_prompt",
            TITLE,
            failed=False,
            baseline=baseline,
            candidate="the same counts",
            limit="equal usage.prompt_tokens",
        ), []
    probe, b, c, o = differ[0]
    offsets = sorted({c - b for _, b, c, _ in differ})
    shift = f"{offsets[0]:+d} tokens"
    if len(offsets) > 1:
        shift = f"{offsets[0]:+d} to {offsets[-1]:+d} tokens"
    reason = (
        f"the same chat messages are another prompt on the candidate on {len(differ)} of "
        f"{len(counts)} probes ({shift}; e.g. {probe}: {b} → {c} prompt tokens): a changed chat "
        "template, default system prompt or tokenizer; answers that part at token 0 follow from "
        "the prompt, not only from the arithmetic"
    )
    finding = Finding(
        probe=probe,
        category="chat_prompt",
        severity=Severity.MAJOR,
        side="candidate",
        message=reason,
        baseline_excerpt=f"{b} prompt tokens",
        candidate_excerpt=f"{c} prompt tokens",
        curl=curl(ev.candidate_url, "chat", o.request.body),
    )
    return check(
        "chat_prompt",
        TITLE,
        failed=True,
        baseline=baseline,
        candidate=f"{len(differ)} differ ({shift})",
        limit="equal usage.prompt_tokens",
        reason=reason,
    ), [finding]
