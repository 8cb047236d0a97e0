"""The golden gate's Responses API part: `/v1/responses` is a surface of its own, with its own
request shape, stream events and usage names, and an upgrade can break it while chat completions
stay right. Per side, a few greedy prompts go to chat completions and to the Responses API
(plain and streamed); `evaluate_responses` judges

- the surface: the baseline serves it and the candidate does not (a lost surface, major);
- parity on each side: the same text and input-token count as chat completions, the streamed
  text equal to the final object, the stream ended by a terminal event. A parity break only the
  candidate shows is major; one the baseline shows too is reported, not blocking;
- baseline vs candidate: a Responses answer that changed where the chat answers did not (major),
  and the set of stream event types (minor).

Where the baseline does not serve `/v1/responses` the check is listed as not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from servegate.config.models import GateConfig
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.responses import ResponsesAnswer, respond
from servegate.endpoints.types import Completion
from servegate.gates.pair import EndpointPair
from servegate.verdict.judgement import check, gate_result, not_applicable, not_measured
from servegate.verdict.model import Check, Finding, GateResult, Severity

PROMPTS = (
    "Reply with exactly: OK",
    "What is the capital of France?",
    "Count from 1 to 5.",
)
MAX_TOKENS = 24


@dataclass(frozen=True)
class ResponsesObservation:
    """One prompt on one side: chat completions, the Responses API, and its stream."""

    prompt: str
    chat: Completion
    response: ResponsesAnswer
    stream: ResponsesAnswer

    @property
    def served(self) -> bool:
        return self.response.completion.ok

    def parity_breaks(self) -> list[str]:
        """What differs between this side's surfaces for this prompt (empty: parity holds)."""
        if not (self.served and self.chat.ok):
            return []
        out: list[str] = []
        r, s = self.response.completion, self.stream.completion
        if r.text != self.chat.text:
            out.append(f"text differs from chat completions ({r.text!r} vs {self.chat.text!r})")
        r_in = r.usage.prompt_tokens if r.usage else None
        c_in = self.chat.usage.prompt_tokens if self.chat.usage else None
        if r_in is not None and c_in is not None and r_in != c_in:
            out.append(f"input_tokens {r_in} vs chat prompt_tokens {c_in}")
        if not s.ok:
            category = s.error.category if s.error else "error"
            out.append(f"the stream failed: {category}")
        elif s.text != r.text:
            out.append(f"streamed text {s.text!r} differs from the final object's {r.text!r}")
        return out


@dataclass(frozen=True)
class ResponsesEvidence:
    baseline: tuple[ResponsesObservation, ...]
    candidate: tuple[ResponsesObservation, ...]


async def _side(pair: EndpointPair, ep: Endpoint, cfg: GateConfig) -> list[ResponsesObservation]:
    out: list[ResponsesObservation] = []
    dl = cfg.request_deadline_s
    for i, prompt in enumerate(PROMPTS):
        chat = await pair.send(
            ep, "chat",
            {"messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS,
             "temperature": 0},
            gate="golden", probe=f"responses-{i}:chat", deadline_s=dl,
        )  # fmt: skip
        body = pair.body({"input": prompt, "max_output_tokens": MAX_TOKENS, "temperature": 0})
        plain = await respond(pair.recording(ep, gate="golden", probe=f"responses-{i}"), body,
                              deadline_s=dl)  # fmt: skip
        if not plain.completion.ok and i == 0:  # not served: one refusal says it
            return [ResponsesObservation(prompt, chat, plain, plain)]
        streamed = await respond(
            pair.recording(ep, gate="golden", probe=f"responses-{i}:stream"),
            {**body, "stream": True}, deadline_s=dl,
        )  # fmt: skip
        out.append(ResponsesObservation(prompt, chat, plain, streamed))
    return out


async def collect_responses(pair: EndpointPair, cfg: GateConfig) -> ResponsesEvidence:
    """The Responses prompts on the baseline, then the candidate."""
    baseline = await _side(pair, pair.baseline, cfg)
    candidate = await _side(pair, pair.candidate, cfg)
    return ResponsesEvidence(tuple(baseline), tuple(candidate))


def _finding(category: str, severity: Severity, message: str, b: str, c: str) -> Finding:
    return Finding(
        probe="responses",
        category=category,
        severity=severity,
        side="candidate",
        message=message,
        baseline_excerpt=b[:300],
        candidate_excerpt=c[:300],
    )


def evaluate_responses(ev: ResponsesEvidence) -> tuple[list[Check], list[Finding]]:
    """The `responses` check and its findings."""
    title = "the Responses API (/v1/responses): served, equal to chat completions, unchanged"
    served_b = any(o.served for o in ev.baseline)
    served_c = any(o.served for o in ev.candidate)
    if not served_b:
        why = ev.baseline[0].response.completion.error if ev.baseline else None
        detail = f"{why.category}: {why.message[:80]}" if why else "no answer"
        # Not offered by the baseline at all: not applicable (a gap only when a timeout or an
        # error says it failed rather than it is not there).
        failed = why is not None and why.category in (
            "timeout",
            "stalled",
            "server",
            "infra",
            "reset",
        )
        reason = f"the baseline does not serve it ({detail})"
        if failed:
            return [not_measured("responses", title, reason)], []
        return [not_applicable("responses", title, reason)], []
    findings: list[Finding] = []
    if not served_c:
        why = ev.candidate[0].response.completion.error if ev.candidate else None
        lost = f"{why.category}: {why.message}" if why else "-"
        findings.append(_finding("responses_lost", Severity.MAJOR,
                                 "the baseline serves /v1/responses and the candidate does not",
                                 "served", lost))  # fmt: skip
    pairs = list(zip(ev.baseline, ev.candidate, strict=False)) if served_c else []
    for b, c in pairs:
        b_breaks, c_breaks = b.parity_breaks(), c.parity_breaks()
        if c_breaks and not b_breaks:
            findings.append(_finding("responses_parity", Severity.MAJOR,
                                     f"{c.prompt!r}: only the candidate's Responses answer "
                                     f"breaks parity: {'; '.join(c_breaks)}",
                                     "parity holds", "; ".join(c_breaks)))  # fmt: skip
        elif c_breaks:
            findings.append(_finding("responses_parity", Severity.INFO,
                                     f"{c.prompt!r}: both sides break parity",
                                     "; ".join(b_breaks), "; ".join(c_breaks)))  # fmt: skip
        b_text, c_text = b.response.completion.text, c.response.completion.text
        chats_equal = b.chat.ok and c.chat.ok and b.chat.text == c.chat.text
        if b.served and c.served and b_text != c_text and chats_equal:
            findings.append(_finding("responses_regression", Severity.MAJOR,
                                     f"{c.prompt!r}: the Responses answer changed while the chat "
                                     "answer did not", b_text, c_text))  # fmt: skip
        b_events, c_events = set(b.stream.events), set(c.stream.events)
        if b.stream.completion.ok and c.stream.completion.ok and b_events != c_events:
            findings.append(_finding("responses_events", Severity.MINOR,
                                     f"{c.prompt!r}: the stream's event types changed",
                                     ", ".join(sorted(b_events - c_events)) or "-",
                                     ", ".join(sorted(c_events - b_events)) or "-"))  # fmt: skip
    blocking = [f for f in findings if f.blocking]
    parity_b = sum(1 for o in ev.baseline if o.served and not o.parity_breaks())
    parity_c = sum(1 for o in ev.candidate if o.served and not o.parity_breaks())
    return [
        check(
            "responses",
            title,
            failed=bool(blocking),
            baseline=f"served; parity on {parity_b}/{len(ev.baseline)} prompts",
            candidate=f"served; parity on {parity_c}/{len(ev.candidate)} prompts"
            if served_c
            else "not served",
            limit="served if the baseline serves it; no break the baseline lacks",
            reason="; ".join(f.message for f in blocking)[:300],
        )
    ], findings


def with_responses(
    result: GateResult, ev: ResponsesEvidence | None, *, strict: bool = False
) -> GateResult:
    """`result` (the golden gate's) with the Responses check and findings added, re-judged."""
    if ev is None:
        return result
    checks, findings = evaluate_responses(ev)
    served = [o for o in (*ev.baseline, *ev.candidate) if o.served]
    return gate_result(
        result.name,
        [*result.checks, *checks],
        strict=strict,
        findings=[*result.findings, *findings],
        divergences=result.divergences,
        metrics={**result.metrics, "responses_prompts_served": len(served)},
        details={**result.details, "responses": [
            {"prompt": o.prompt, "side": side, "text": o.response.completion.text,
             "status": o.response.response_status, "events": list(o.stream.events),
             "parity_breaks": o.parity_breaks()}
            for side, obs in (("baseline", ev.baseline), ("candidate", ev.candidate))
            for o in obs
        ]},
    )  # fmt: skip
