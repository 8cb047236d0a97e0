"""Gate 2, numerics: the math did not move beyond the noise.

Greedy tokens with top-k logprobs from both sides on a fixed prompt set. At the first divergence
the baseline's own distribution says whether the flip was a near-tie (benign) or a confident
disagreement (a bug); drift on the common prefix is judged against the A/A floor (noise.py) plus
an absolute epsilon. Teacher-forced cross-scoring (echo logprobs) shows how unlikely the baseline
finds the candidate's text (`,,,,,,,,` has a huge NLL). Anything unmeasured is reported as
inconclusive, never counted as a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servegate.config.models import GateConfig, Policy
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion, Embeddings, TokenLogprob
from servegate.gates.evidence import curl, describe, excerpt
from servegate.gates.noise import (
    NAME,
    CrossScore,
    NoiseFloor,
    ProbeRequest,
    TokenComparison,
    compare,
    cosine,
    non_finite,
    tail_nll,
    token_pair,
)
from servegate.gates.noise import collect as collect_noise
from servegate.gates.pair import Api, EndpointPair
from servegate.stats.noise import drift_threshold
from servegate.verdict.model import Finding, GateResult, MetricValue, Severity, Status

PROMPTS: tuple[tuple[str, str], ...] = (
    ("capital", "What is the capital of France?"),
    ("arithmetic", "What is 12 plus 7? Answer with a number."),
    ("count", "Count from 1 to 10, separated by commas."),
    ("code", "Write a Python function that returns the square of a number."),
    ("chinese", "用一句话介绍北京。"),
    ("translate", "Translate 'good morning, my friend' to French."),
    ("story", "Begin a short story about a lighthouse keeper."),
    ("science", "Explain in one sentence why the sky is blue."),
    ("colours", "List three primary colours."),
    ("json", 'Give a JSON object with keys "name" and "age" for a fictional person.'),
    ("definition", "Define the word 'entropy' briefly."),
    ("reasoning", "A train travels 60 km in one hour. How far does it go in three hours?"),
)
EMBEDDING_INPUTS = ("The quick brown fox jumps over the lazy dog.", "北京是中国的首都。")
# Echo scoring is checked on this prompt first: the echoed logprobs of a greedy continuation must
# equal its generation logprobs (llama-cpp-python 0.3 reports them one position late for models
# without BOS, which would make cross-scoring meaningless).
ALIGNMENT_PROMPT = "1, 2, 3, 4, 5, 6, 7,"
ALIGNMENT_MAX_NATS = 0.1
NEAR_TIE_NATS = 0.5  # a flip whose baseline gap is below this is a near-tie (benign)
DLOGPROB_EPSILON_NATS = 0.02  # absolute epsilon, mean |Δlogprob| on the common prefix
CROSS_NLL_EXCESS_NATS = 1.0  # candidate text's NLL/token under the baseline minus its own text's
COSINE_MIN = 1.0 - 1e-3


@dataclass(frozen=True)
class NumericsConfig:
    """What the numerics gate sends; thresholds live in the module constants and `Policy`."""

    prompts: tuple[tuple[str, str], ...] = PROMPTS
    max_tokens: int = 24
    top_logprobs: int = 5
    measure_noise: bool = True
    cross_scoring: bool = True
    embeddings: bool = True


@dataclass(frozen=True)
class Observation:
    request: ProbeRequest
    baseline: Completion
    candidate: Completion
    cross: CrossScore | None = None


@dataclass(frozen=True)
class NumericsEvidence:
    observations: tuple[Observation, ...]
    noise: NoiseFloor
    baseline_url: str
    candidate_url: str
    alignment_nats: dict[str, float | None] = field(default_factory=dict)  # per side; None: no echo
    embeddings: tuple[Embeddings, Embeddings | None] | None = None  # candidate None: not asked


def probe_request(api: Api, prompt: str, opts: NumericsConfig) -> dict[str, Any]:
    """A greedy request for tokens with top-k logprobs, in the chat or the legacy shape."""
    body: dict[str, Any] = {"max_tokens": opts.max_tokens, "temperature": 0}
    if api == "chat":
        messages = [{"role": "user", "content": prompt}]
        return {**body, "messages": messages, "logprobs": True, "top_logprobs": opts.top_logprobs}
    return {**body, "prompt": prompt, "logprobs": opts.top_logprobs}


def _echo(text: str) -> dict[str, Any]:
    return {"prompt": text, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}


async def _send(
    pair: EndpointPair, ep: Endpoint, body: dict[str, Any], probe: str, deadline_s: float
) -> Completion:
    return await pair.send(ep, "completions", body, gate=NAME, probe=probe, deadline_s=deadline_s)


async def _alignment(pair: EndpointPair, ep: Endpoint, deadline_s: float) -> float | None:
    """Mean |echo logprob - generation logprob| over a greedy continuation; None without echo."""
    body = {"prompt": ALIGNMENT_PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 1}
    gen = await _send(pair, ep, body, "align", deadline_s)
    if not gen.ok or not gen.logprobs or not gen.text:
        return None
    echoed = await _send(pair, ep, _echo(ALIGNMENT_PROMPT + gen.text), "align", deadline_s)
    tail = (echoed.prompt_logprobs or ())[-len(gen.logprobs) :]
    if not echoed.ok or len(tail) != len(gen.logprobs) or any(t is None for t in tail):
        return None
    pairs = zip(tail, gen.logprobs, strict=True)
    return sum(abs(t.logprob - g.logprob) for t, g in pairs if t is not None) / len(tail)


def _aligned(error_nats: float | None) -> bool:
    return error_nats is not None and error_nats <= ALIGNMENT_MAX_NATS


async def _score(
    pair: EndpointPair, ep: Endpoint, probe: str, prompt: str, text: str, deadline_s: float
) -> float | None:
    r = await _send(pair, ep, _echo(f"{prompt}\n{text}"), f"score:{probe}", deadline_s)
    return tail_nll(r.prompt_logprobs, text) if r.ok else None


async def plan(
    pair: EndpointPair, opts: NumericsConfig, deadline_s: float
) -> tuple[ProbeRequest, ...]:
    """The probe requests: chat with top_logprobs when the baseline returns them, else legacy."""
    if not opts.prompts:
        return ()
    first = probe_request("chat", opts.prompts[0][1], opts)
    pilot = await pair.send(
        pair.baseline, "chat", first, gate=NAME, probe="pilot", deadline_s=deadline_s
    )
    api: Api = "chat" if pilot.ok and pilot.logprobs else "completions"
    return tuple(ProbeRequest(p, api, probe_request(api, t, opts)) for p, t in opts.prompts)


async def collect(
    pair: EndpointPair,
    cfg: GateConfig,
    opts: NumericsConfig | None = None,
    *,
    replica: Endpoint | None = None,
    noise: NoiseFloor | None = None,
) -> NumericsEvidence:
    """A/A floor (unless given), then each prompt to baseline and candidate, then cross-scoring."""
    opts = opts or NumericsConfig()
    dl = cfg.request_deadline_s
    requests = await plan(pair, opts, dl)
    # Every request is isolated, so the A/A pass's first baseline answer is as good a baseline
    # observation as a third request would be: reuse it and spare the baseline a third pass.
    firsts: dict[str, Completion] = {}
    if noise is None:
        noise = NoiseFloor.zero()
        if opts.measure_noise or replica is not None:
            noise = await collect_noise(
                pair,
                requests,
                deadline_s=dl,
                replica=replica,
                same_endpoint=opts.measure_noise,
                firsts=firsts,
            )
    observations = []
    for req in requests:
        b = firsts.get(req.probe)
        if b is None:
            b = await pair.send(
                pair.baseline, req.api, req.body, gate=NAME, probe=req.probe, deadline_s=dl
            )
        c = await pair.send(
            pair.candidate, req.api, req.body, gate=NAME, probe=req.probe, deadline_s=dl
        )
        observations.append(Observation(req, b, c))
    alignment: dict[str, float | None] = {}
    if opts.cross_scoring and requests:
        for ep in (pair.baseline, pair.candidate):
            alignment[ep.name] = await _alignment(pair, ep, dl)
        if _aligned(alignment.get(pair.baseline.name)):
            observations = [await _cross(pair, o, dl, alignment) for o in observations]
    emb = None
    if opts.embeddings:
        body = pair.body({"input": list(EMBEDDING_INPUTS)})
        eb = await pair.baseline.embeddings(body, deadline_s=dl)
        emb = (eb, await pair.candidate.embeddings(body, deadline_s=dl) if eb.ok else None)
    return NumericsEvidence(
        tuple(observations),
        noise,
        pair.baseline.base_url,
        pair.candidate.base_url,
        alignment,
        emb,
    )


async def _cross(
    pair: EndpointPair, obs: Observation, dl: float, alignment: dict[str, float | None]
) -> Observation:
    b, c = obs.baseline, obs.candidate
    if not (b.ok and c.ok and b.text and c.text) or b.text == c.text:
        return obs
    body = obs.request.body
    prompt = str(body["messages"][-1]["content"] if "messages" in body else body["prompt"])
    scores: list[float | None] = []
    for ep in (pair.baseline, pair.candidate):
        aligned = _aligned(alignment.get(ep.name))
        for text in (b.text, c.text):
            p = obs.request.probe
            scores.append(await _score(pair, ep, p, prompt, text, dl) if aligned else None)
    return Observation(obs.request, b, c, CrossScore(*scores))


def _at(tokens: Sequence[TokenLogprob], div: int) -> str:
    """The end of the common prefix, then ⟦what this side said from the divergence on⟧."""
    head = "".join(t.token for t in tokens[:div])[-60:]
    return excerpt(f"…{head}⟦{''.join(t.token for t in tokens[div:])[:80]}⟧")


def _finding(
    o: Observation, ev: NumericsEvidence, category: str, message: str, **kw: Any
) -> Finding:
    side = kw.pop("side", "candidate")
    url = ev.candidate_url if side == "candidate" else ev.baseline_url
    kw.setdefault("baseline_excerpt", describe(o.baseline))
    kw.setdefault("candidate_excerpt", describe(o.candidate))
    return Finding(
        probe=o.request.probe,
        category=category,
        severity=kw.pop("severity", Severity.MAJOR),
        side=side,
        message=message,
        curl=curl(url, o.request.api, o.request.body),
        **kw,
    )


def _note(probe: str, category: str, message: str) -> Finding:
    return Finding(probe=probe, category=category, severity=Severity.INFO, message=message)


def _probe(o: Observation, ev: NumericsEvidence) -> tuple[list[Finding], TokenComparison | None]:
    """Findings of one probe that need no floor, and its token comparison when there is one."""
    out = [
        _finding(
            o,
            ev,
            "non_finite",
            f"the {side} returned NaN or infinite logprobs",
            side=side,
            severity=Severity.CRITICAL,
        )
        for side, c in (("baseline", o.baseline), ("candidate", o.candidate))
        if non_finite(c)
    ]
    if out:
        return out, None
    if not o.baseline.ok:
        return [_note(o.request.probe, "not_judged", f"baseline: {describe(o.baseline)}")], None
    if not o.candidate.ok:
        return [
            _finding(o, ev, "request_error", "the candidate failed; the baseline answered")
        ], None
    tokens = token_pair(o.baseline, o.candidate)
    if tokens is None:
        return [_note(o.request.probe, "inconclusive", "a side returned no token logprobs")], None
    return [], compare(o.request.probe, *tokens)


def _flip(o: Observation, cmp: TokenComparison, tie: float, ev: NumericsEvidence) -> Finding:
    b, c = o.baseline.logprobs or (), o.candidate.logprobs or ()
    i = cmp.first_divergence or 0
    where = "outside" if cmp.b_token_in_top is False else "inside"
    return _finding(
        o,
        ev,
        "numerics",
        f"confident disagreement at token {i}: the candidate chose {c[i].token!r} ({where} the "
        f"baseline's top-k), {cmp.gap_nats:.2f} nats below the baseline's {b[i].token!r} "
        f"(near-tie limit {tie:.2f}; baseline top-1 − top-2 margin {cmp.margin_nats:.2f} nats)",
        baseline_excerpt=_at(b, i),
        candidate_excerpt=_at(c, i),
    )


def _embeddings(ev: NumericsEvidence) -> tuple[list[Finding], float | None]:
    if ev.embeddings is None:
        return [_note("embeddings", "inconclusive", "embeddings not collected")], None
    b, c = ev.embeddings
    if c is None:
        why = f"{b.error.category}: {b.error.message}" if b.error else "no vectors"
        return [_note("embeddings", "inconclusive", f"no baseline embeddings ({why})")], None
    if c.error is not None:
        nan = "NaN" in c.error.message or "Infinity" in c.error.message
        f = Finding(
            probe="embeddings",
            category="non_finite" if nan else "embedding_drift",
            severity=Severity.CRITICAL if nan else Severity.MAJOR,
            side="candidate",
            message=f"candidate embeddings failed: {c.error.category}: {c.error.message}",
        )
        return [f], None
    cosines = [cosine(u, v) for u, v in zip(b.vectors, c.vectors, strict=False)]
    worst = min(cosines) if cosines and len(b.vectors) == len(c.vectors) else 0.0
    if worst >= COSINE_MIN:
        return [], worst
    i = cosines.index(worst) if cosines else 0
    f = Finding(
        probe="embeddings",
        category="embedding_drift",
        severity=Severity.MAJOR,
        side="candidate",
        message=f"embedding cosine {worst:.6f} < {COSINE_MIN} (input {i}) or vectors missing",
        baseline_excerpt=excerpt(str(b.vectors[i][:4])) if b.vectors else None,
        candidate_excerpt=excerpt(str(c.vectors[i][:4])) if len(c.vectors) > i else None,
    )
    return [f], worst


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def evaluate(ev: NumericsEvidence, policy: Policy) -> GateResult:
    """Judge flips, prefix drift, cross-NLL, NaN/Inf and embeddings against k × floor + epsilon."""
    findings: list[Finding] = []
    pairs: list[tuple[Observation, TokenComparison]] = []
    for o in ev.observations:
        found, cmp = _probe(o, ev)
        findings += found
        pairs += [(o, cmp)] if cmp is not None else []
    floor = ev.noise
    tie = max(NEAR_TIE_NATS, floor.tie_gap_nats)
    gaps = [(o, c) for o, c in pairs if c.gap_nats is not None]
    confident = [(o, c) for o, c in gaps if (c.gap_nats or 0.0) > tie]
    flip_limit = drift_threshold(floor.flip_rate, policy.drift_k, policy.drift_epsilon)
    if pairs and len(confident) / len(pairs) > flip_limit:
        findings += [_flip(o, c, tie, ev) for o, c in confident]
    dlp = _mean([c.mean_abs_dlogprob for _, c in pairs])
    dlp_limit = policy.drift_k * floor.mean_abs_dlogprob + DLOGPROB_EPSILON_NATS
    if dlp is not None and dlp > dlp_limit:
        msg = f"mean |Δlogprob| on the common prefix {dlp:.4f} nats > {dlp_limit:.4f} nats"
        findings.append(
            Finding(
                probe="prefix",
                category="numerics",
                severity=Severity.MAJOR,
                side="candidate",
                message=msg,
            )
        )
    crossed = [(o, o.cross) for o in ev.observations if o.cross is not None]
    excess = [(o, x) for o, cs in crossed if (x := cs.excess_nats) is not None]
    findings += [
        _finding(
            o,
            ev,
            "numerics",
            f"the baseline finds the candidate's text {x:.2f} nats/token "
            f"less likely than its own (limit {CROSS_NLL_EXCESS_NATS})",
        )
        for o, x in excess
        if x > CROSS_NLL_EXCESS_NATS
    ]
    align = ev.alignment_nats.get("baseline")
    if not _aligned(align):
        findings.append(
            _note(
                "cross-scoring",
                "inconclusive",
                "not judged: baseline echo "
                f"logprobs missing or off its generation logprobs ({align})",
            )
        )
    found, worst_cosine = _embeddings(ev)
    findings += found
    if not floor.measured:
        findings.append(
            _note(
                "noise-floor",
                "inconclusive",
                "no A/A data: drift judged against the absolute epsilon only",
            )
        )
    tf = [
        cs.candidate_on_baseline - cs.baseline_on_baseline
        for _, cs in crossed
        if cs.candidate_on_baseline is not None and cs.baseline_on_baseline is not None
    ]
    metrics: dict[str, MetricValue] = {
        "probes": len(ev.observations),
        "probes_compared": len(pairs),
        "exact_match_rate": _mean([float(c.exact) for _, c in pairs]),
        "near_tie_flips": len(gaps) - len(confident),
        "confident_flips": len(confident),
        "unclassified_divergences": sum(not c.exact for _, c in pairs) - len(gaps),
        "near_tie_limit_nats": tie,
        "confident_flip_rate_limit": flip_limit,
        "mean_abs_dlogprob_nats": dlp,
        "dlogprob_limit_nats": dlp_limit,
        "mean_topk_jaccard": _mean([c.topk_jaccard for _, c in pairs]),
        "cross_nll_excess_max_nats": max((x for _, x in excess), default=None),
        "teacher_forced_dnll_nats": _mean(tf),
        "baseline_echo_alignment_nats": align,
        "embedding_min_cosine": worst_cosine,
        **floor.metrics(),
    }
    blocking = [f for f in findings if f.blocking]
    if blocking:
        status, summary = Status.FAIL, "; ".join(f.message for f in blocking[:2])
    elif not pairs:
        status, summary = Status.INCONCLUSIVE, "no probe returned comparable token logprobs"
    else:
        status = Status.PASS
        drift = "n/a" if dlp is None else f"{dlp:.4f}"
        summary = f"{len(pairs)} probes within the noise: {len(gaps)} near-tie flips, mean "
        summary += f"|Δlogprob| {drift} nats"
    return GateResult(
        name=NAME, status=status, summary=summary, metrics=metrics, findings=tuple(findings)
    )
