"""Gate 2, numerics: the math did not move beyond the noise — and where it moved, why.

Greedy tokens with top-k logprobs from both sides on a fixed prompt set, judged on two axes:

- *magnitude*: at each first divergence the baseline's own distribution says whether the flip
  was a near-tie (benign: a kernel change can do that) or a confident disagreement (a bug), and
  the mean |Δlogprob| on the common prefix must stay within `noise_k × floor + tolerance`, the
  floor being the baseline's drift against itself along its own paths (noise.py);
- *direction*: the perplexity shift on fixed reference texts and cross-scoring of divergent
  answers (perplexity.py): a systematic shift fails even when greedy text is unchanged.

Every divergence is explained in the result; anything unmeasured is listed, and a missing core
measurement (token comparison, |Δlogprob|, perplexity) makes the gate inconclusive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from servegate.config.models import GateConfig
from servegate.endpoints.recording import part
from servegate.endpoints.types import Completion
from servegate.gates.numerics.echo_route import EchoCheck
from servegate.gates.numerics.judgement import evaluate, floor_not_needed
from servegate.gates.numerics.noise import (
    NAME,
    PATHS,
    NoiseFloor,
    ProbeRequest,
    along_paths,
    first_answer,
)
from servegate.gates.numerics.noise import collect as collect_noise
from servegate.gates.numerics.perplexity import (
    TextScore,
    alignment,
    cross_score,
    score_texts,
    scoring_deadline_s,
)
from servegate.gates.numerics.plan import (
    PROMPTS,
    NumericsConfig,
    NumericsEvidence,
    PromptObservation,
    probe_request,
)
from servegate.gates.pair import Api, EndpointPair

__all__ = [
    "PROMPTS",
    "NumericsConfig",
    "NumericsEvidence",
    "PromptObservation",
    "collect",
    "evaluate",
    "plan",
    "probe_request",
]


# No single scoring request waits longer than this, however slowly a server scores: a hung
# server is still found out, and the run deadline bounds the whole.
SCORING_CAP_S = 1800.0


async def plan(
    pair: EndpointPair, opts: NumericsConfig, deadline_s: float
) -> tuple[ProbeRequest, ...]:
    """The probe requests: chat with top_logprobs when the baseline returns them, else legacy."""
    if not opts.prompts:
        return ()
    first = probe_request("chat", opts.prompts[0][1], opts)
    with part("pilot"):
        pilot = await pair.send(
            pair.baseline, "chat", first, gate=NAME, probe="pilot", deadline_s=deadline_s
        )
    api: Api = "chat" if pilot.ok and pilot.logprobs else "completions"
    return tuple(ProbeRequest(p, api, probe_request(api, t, opts)) for p, t in opts.prompts)


def _prompt_of(req: ProbeRequest) -> str:
    body = req.body
    return str(body["messages"][-1]["content"] if "messages" in body else body["prompt"])


async def collect(
    pair: EndpointPair,
    cfg: GateConfig,
    opts: NumericsConfig | None = None,
    *,
    noise: NoiseFloor | None = None,
) -> NumericsEvidence:
    """The noise floor (unless given), each prompt to the candidate, then perplexity and
    cross-scoring of divergent answers (embeddings have their own gate, embeddings.py)."""
    opts = opts or NumericsConfig()
    dl = cfg.request_deadline_s
    requests = await plan(pair, opts, dl)
    if noise is None:  # the baseline's first answers come with its noise floor
        noise, observations = await _noise_and_candidate(pair, requests, cfg, opts)
    else:
        observations = []
        for req in requests:  # both sides, at once when the pair allows it
            b, c = await pair.both(req.api, req.body, gate=NAME, probe=req.probe, deadline_s=dl)
            observations.append(PromptObservation(req, b, c))
    checks: dict[str, EchoCheck] = {}
    texts: tuple[TextScore, ...] = ()
    if (opts.perplexity or opts.cross_scoring) and requests:
        with part("echo alignment"):
            by_side = await pair.sides(
                lambda: alignment(pair, pair.baseline, dl),
                lambda: alignment(pair, pair.candidate, dl),
            )
        checks = dict(zip(("baseline", "candidate"), by_side, strict=True))
    # Echo is read only through the route `evaluate` chooses from these checks; echoing costs
    # minutes on a slow server, so nothing is sent to a side whose check measured nothing.
    scored = {
        side: any(v is not None for v in c.errors_nats.values()) for side, c in checks.items()
    }
    both = bool(scored) and all(scored.values())
    policy = cfg.policy

    def deadline(chars: int) -> float:
        return scoring_deadline_s(
            tuple(checks.values()), chars, dl, policy.timeout_latency_factor, SCORING_CAP_S
        )

    scoring_note = ""
    if opts.perplexity and both:
        with part("prompt scoring (perplexity)"):
            scored_texts = await score_texts(
                pair, deadline, checks, budget_s=cfg.perplexity_budget_s
            )
        texts, scoring_note = scored_texts.texts, scored_texts.note
    # The candidate's divergent text scored by the baseline needs only the baseline's echo: a
    # candidate that returns no logprobs (transformers serve) is still judged on what it said.
    if opts.cross_scoring and scored.get("baseline"):
        candidate_scores = scored.get("candidate", False)
        with part("cross-scoring"):
            observations = [
                await _cross(pair, o, deadline, checks, candidate_scores=candidate_scores)
                for o in observations
            ]
    return NumericsEvidence(
        tuple(observations),
        noise,
        pair.baseline.base_url,
        pair.candidate.base_url,
        pair.model,
        checks,
        texts,
        scoring_note,
    )


async def _noise_and_candidate(
    pair: EndpointPair, requests: Sequence[ProbeRequest], cfg: GateConfig, opts: NumericsConfig
) -> tuple[NoiseFloor, list[PromptObservation]]:
    """The baseline's noise floor (its first answer to each probe among it) and the candidate's
    answer to each probe: at the same time when the pair allows it, each candidate request's
    deadline scaled to the baseline's first answer as it comes in. With `baseline_paths:
    when-needed` the paths come after every first answer, and only when the candidate's answers
    leave a check the floor feeds undecided without it (`floor_not_needed`)."""
    dl = cfg.request_deadline_s
    paths = PATHS if opts.measure_noise else ()
    lazy = bool(paths) and cfg.baseline_paths == "when-needed"
    loop = asyncio.get_running_loop()
    refs: dict[str, asyncio.Future[Completion]] = {r.probe: loop.create_future() for r in requests}

    def first(probe: str, answer: Completion) -> None:
        refs[probe].set_result(answer)

    async def baseline() -> NoiseFloor | None:
        if not lazy:
            return await collect_noise(pair, requests, deadline_s=dl, paths=paths, on_first=first)
        for r in requests:
            first(r.probe, await first_answer(pair, r, dl))
        return None

    async def candidate() -> list[Completion]:
        return [
            await pair.send_against(
                pair.candidate, r.api, r.body, gate=NAME, probe=r.probe, deadline_s=dl,
                reference=refs[r.probe],
            )
            for r in requests
        ]  # fmt: skip

    noise, answers = await pair.sides(baseline, candidate)
    observations = [
        PromptObservation(r, refs[r.probe].result(), c)
        for r, c in zip(requests, answers, strict=True)
    ]
    if noise is None:
        why = floor_not_needed(observations, cfg.policy, pair.model)
        if why is not None:
            noise = NoiseFloor.skipped(why)
        else:
            firsts = {o.request.probe: o.baseline for o in observations}
            noise = await along_paths(pair, requests, firsts, deadline_s=dl, paths=paths)
    return noise, observations


async def _cross(
    pair: EndpointPair,
    obs: PromptObservation,
    deadline: Callable[[int], float],
    checks: Mapping[str, EchoCheck],
    *,
    candidate_scores: bool,
) -> PromptObservation:
    b, c = obs.baseline, obs.candidate
    if not (b.ok and c.ok and b.text and c.text) or b.text == c.text:
        return obs
    prompt = _prompt_of(obs.request)
    dl = deadline(len(prompt) + max(len(b.text), len(c.text)) + 1)
    score = await cross_score(
        pair,
        obs.request.probe,
        prompt,
        b.text,
        c.text,
        dl,
        checks,
        candidate_scores=candidate_scores,
    )
    return PromptObservation(obs.request, b, c, score)
