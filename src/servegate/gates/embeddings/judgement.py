"""How the embeddings gate judges: well-formed vectors, cosine parity and score deviation, each
against the baseline's own noise (A/A: asked again, and the replica when there is one)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from servegate.config.models import Policy
from servegate.endpoints.errors import ErrorCategory
from servegate.endpoints.types import Embeddings
from servegate.gates.embeddings.plan import (
    NAME,
    EmbeddingInput,
    EmbeddingsEvidence,
    ScoreAnswer,
    ScoreEvidence,
    baseline_failed,
)
from servegate.gates.evidence import curl, excerpt
from servegate.stats.divergence import noise_limit
from servegate.verdict.judgement import check, gate_result, not_applicable, not_measured
from servegate.verdict.model import (
    Check,
    Finding,
    GateResult,
    MetricValue,
    Outcome,
    Severity,
    Status,
)

Vectors = tuple[tuple[float, ...], ...]


def cosine_distance(u: Sequence[float], v: Sequence[float]) -> float:
    """1 − cosine similarity, in [0, 2]; 1 when either vector has zero norm or the sizes differ."""
    if tuple(u) == tuple(v) and any(u):
        return 0.0  # exactly: the sums below can round identical vectors to ±1e-16
    nu, nv = math.sqrt(sum(x * x for x in u)), math.sqrt(sum(x * x for x in v))
    if len(u) != len(v) or not nu or not nv:
        return 1.0
    similarity = sum(x * y for x, y in zip(u, v, strict=True)) / (nu * nv)
    return min(2.0, max(0.0, 1.0 - similarity))  # rounding can put identical vectors at -1e-16


def problems(vectors: Vectors, count: int, dimension: int | None) -> dict[str, list[int]]:
    """Which inputs break which rule: `count` (missing or extra vectors: all indexes past the
    shorter), `dimension` (not `dimension` long), `finite` (NaN or ±inf), `zero_norm`."""
    found: dict[str, list[int]] = {"count": [], "dimension": [], "finite": [], "zero_norm": []}
    if len(vectors) != count:
        found["count"] = list(range(min(len(vectors), count), max(len(vectors), count)))
    for i, vector in enumerate(vectors):
        if dimension is not None and len(vector) != dimension:
            found["dimension"].append(i)
        if not all(math.isfinite(x) for x in vector):
            found["finite"].append(i)
        elif not any(vector):
            found["zero_norm"].append(i)
    return found


def _ids(inputs: Sequence[EmbeddingInput], indexes: Sequence[int]) -> str:
    named = [inputs[i].id if i < len(inputs) else f"#{i}" for i in indexes]
    return ", ".join(named[:8]) + (f" (+{len(named) - 8})" if len(named) > 8 else "")


# A request that got no HTTP answer (or not in time) says nothing about what a server offers.
_NO_ANSWER = frozenset(
    {
        ErrorCategory.INFRA,
        ErrorCategory.TIMEOUT,
        ErrorCategory.STALLED,
        ErrorCategory.RESET,
        ErrorCategory.RATE_LIMITED,
        ErrorCategory.TLS,
        ErrorCategory.CANCELLED,
        ErrorCategory.NOT_SENT,
    }
)


def _serves_none(ev: EmbeddingsEvidence) -> bool:
    """A failed batch, and one input alone answered without a usable vector: an error answer
    (stock llama-cpp-python without `--embedding`: HTTP 500 "Llama model must be created with
    embedding=True") or per-token vectors (the generative reference engine). The server does not
    serve sentence embeddings. No answer at all to the single input says nothing: not measured."""
    one = ev.baseline_single
    if one is None:
        return False
    if one.error is not None:
        return one.error.category not in _NO_ANSWER
    return bool(problems(one.vectors, 1, len(one.vectors[0]) if one.vectors else None).get("count"))


def score_failed(answer: ScoreAnswer) -> bool:
    """The same for a score answer: no HTTP answer, or a 5xx/429."""
    return answer.status is None or answer.status >= 500 or answer.status == 429


def _why(result: Embeddings) -> str:
    if result.error is not None:
        return f"{result.error.category}: {result.error.message}"[:300]
    return "no vectors"


RULES = {
    "count": "one vector per input",
    "dimension": "the baseline's dimension",
    "finite": "no NaN or infinite values",
    "zero_norm": "no zero-norm vectors",
}


def _vector_checks(ev: EmbeddingsEvidence, dim: int) -> tuple[list[Check], list[Finding]]:
    """The candidate's answer, then each rule a well-formed answer keeps."""
    c = ev.candidate
    title = "the candidate's embeddings answer"
    if c is None:
        return [not_measured("answer", title, "not asked: the candidate hung", core=True)], []
    repro = curl(ev.candidate_url, "embeddings", ev.request)
    if c.error is not None:
        nan = "NaN" in c.error.message or "Infinity" in c.error.message
        f = Finding(
            probe=NAME,
            category="non_finite" if nan else "embedding_invalid",
            severity=Severity.CRITICAL if nan else Severity.MAJOR,
            side="candidate",
            message=f"candidate embeddings failed: {_why(c)}",
            curl=repro,
        )
        return [check("answer", title, failed=True, core=True, reason=f.message)], [f]
    checks = [check("answer", title, failed=False, candidate=f"{len(c.vectors)} vectors")]
    findings = []
    broken = problems(c.vectors, len(ev.inputs), dim)
    for rule, indexes in broken.items():
        failed = bool(indexes)
        reason = f"{RULES[rule]} broken for {_ids(ev.inputs, indexes)}" if failed else ""
        shown = f"{len(c.vectors)} vectors" if rule == "count" else f"{len(indexes)} broken"
        checks.append(check(rule, RULES[rule], failed=failed, candidate=shown,
                            baseline=f"{len(ev.inputs)} × {dim}", reason=reason))  # fmt: skip
        if failed:
            findings.append(Finding(
                probe=NAME, category="embedding_invalid",
                severity=Severity.CRITICAL if rule == "finite" else Severity.MAJOR,
                side="candidate", message=f"candidate embeddings: {reason}", curl=repro,
            ))  # fmt: skip
    return checks, findings


def _floor_distances(ev: EmbeddingsEvidence) -> tuple[list[float] | None, list[str]]:
    """Per input, the largest distance of the baseline to itself over the A/A paths that gave
    well-formed vectors (None when none did), and the paths used."""
    b = ev.baseline.vectors
    used = [
        (path, r.vectors)
        for path, r in ev.floor
        if r.ok and not any(problems(r.vectors, len(b), len(b[0])).values())
    ]
    if not used:
        return None, []
    floor = [max(cosine_distance(b[i], v[i]) for _, v in used) for i in range(len(b))]
    return floor, [path for path, _ in used]


def _cosine_check(
    ev: EmbeddingsEvidence, policy: Policy
) -> tuple[Check, list[Finding], dict[str, MetricValue]]:
    c = ev.candidate
    title = "cosine distance to the baseline, per input"
    assert c is not None  # only called once the candidate answered with vectors
    b = ev.baseline.vectors
    floor, paths = _floor_distances(ev)
    k, tol = policy.noise_k, policy.tolerance_for(ev.model).embedding_cosine_distance
    per_floor = floor or [0.0] * len(b)
    distances = [cosine_distance(u, v) for u, v in zip(b, c.vectors, strict=False)]
    limits = [noise_limit(f, k, tol) for f in per_floor]
    over = [i for i, (d, lim) in enumerate(zip(distances, limits, strict=False)) if d > lim]
    worst = max(range(len(distances)), key=distances.__getitem__)
    metrics: dict[str, MetricValue] = {
        "embedding_inputs": len(b),
        "embedding_dimension": len(b[0]),
        "embedding_max_cosine_distance": distances[worst],
        "embedding_min_cosine": 1.0 - distances[worst],
        "embedding_floor_max_cosine_distance": max(floor) if floor else None,
        "embedding_floor_paths": "+".join(paths) or "none",
        "embedding_inputs_beyond_noise": len(over),
    }
    floor_text = f"A/A max {max(floor):.3g}" if floor else "A/A not measured"
    result = check(
        "cosine",
        title,
        failed=bool(over),
        candidate=f"max {distances[worst]:.3g} ({ev.inputs[worst].id})",
        baseline=floor_text,
        limit=f"≤ {k:g} × floor + {tol:g} per input",
        policy_key="noise_k, tolerance.embedding_cosine_distance",
        core=True,
        reason=f"{len(over)} of {len(b)} inputs beyond the noise: {_ids(ev.inputs, over)}"
        if over
        else "",
    )
    findings = []
    for i in over:
        one = {**ev.request, "input": [ev.inputs[i].text]}
        findings.append(Finding(
            probe=f"{NAME}:{ev.inputs[i].id}",
            category="embedding_drift",
            severity=Severity.MAJOR,
            side="candidate",
            message=f"input {ev.inputs[i].id!r}: cosine {1.0 - distances[i]:.6f} to the "
            f"baseline (1 − cos {distances[i]:.3g}) beyond {limits[i]:.3g} = {k:g} × A/A "
            f"{per_floor[i]:.3g} + tolerance {tol:g}",
            baseline_excerpt=excerpt(str(list(b[i][:4]))),
            candidate_excerpt=excerpt(str(list(c.vectors[i][:4]))),
            curl=curl(ev.candidate_url, "embeddings", one),
        ))  # fmt: skip
    return result, findings, metrics


def _score_check(
    ev: EmbeddingsEvidence, s: ScoreEvidence, policy: Policy
) -> tuple[Check, list[Finding], dict[str, MetricValue]]:
    title = f"/{s.api} score deviation, per pair"
    if not s.baseline.ok:
        if not score_failed(s.baseline):
            why = f"the baseline has no /{s.api}: {s.baseline.error}"
            return not_applicable(s.api, title, why), [], {}
        why = f"the baseline failed /{s.api}: {s.baseline.error}"
        return not_measured(s.api, title, why, core=True), [], {}
    c = s.candidate
    repro = curl(ev.candidate_url, s.api, s.request)
    if c is None:
        return not_measured(s.api, title, "not asked of the candidate"), [], {}
    if not c.ok:
        f = Finding(
            probe=f"{NAME}:{s.api}",
            category="score_invalid",
            severity=Severity.MAJOR,
            side="candidate",
            message=f"candidate /{s.api} failed: {c.error}",
            curl=repro,
        )
        return check(s.api, title, failed=True, reason=f.message), [f], {}
    b = s.baseline.scores
    k, tol = policy.noise_k, policy.tolerance_for(ev.model).score_deviation
    usable = [a for _, a in s.floor if a.ok and len(a.scores) == len(b)]
    floor = (
        [max(abs(a.scores[j] - b[j]) for a in usable) for j in range(len(b))] if usable else None
    )
    per_floor = floor or [0.0] * len(b)
    deviations = [_deviation(x, y) for x, y in zip(b, c.scores, strict=True)]
    limits = [noise_limit(f, k, tol) for f in per_floor]
    over = [j for j, (d, lim) in enumerate(zip(deviations, limits, strict=True)) if d > lim]
    worst = max(deviations)
    result = check(
        s.api,
        title,
        failed=bool(over),
        candidate=f"max |Δ| {worst:.3g}",
        baseline=f"A/A max {max(floor):.3g}" if floor else "A/A not measured",
        limit=f"≤ {k:g} × floor + {tol:g} per pair",
        policy_key="noise_k, tolerance.score_deviation",
        reason=f"{len(over)} of {len(b)} pairs beyond the noise: documents {over}" if over else "",
    )
    findings = [
        Finding(
            probe=f"{NAME}:{s.api}",
            category="score_drift",
            severity=Severity.MAJOR,
            side="candidate",
            message=f"/{s.api} document {j}: score {c.scores[j]:.6g} vs baseline {b[j]:.6g} "
            f"(|Δ| {deviations[j]:.3g} beyond {limits[j]:.3g} = {k:g} × A/A {per_floor[j]:.3g} "
            f"+ tolerance {tol:g})",
            curl=repro,
        )
        for j in over
    ]
    metrics: dict[str, MetricValue] = {
        f"{s.api}_pairs": len(b),
        f"{s.api}_max_deviation": worst,
        f"{s.api}_floor_max_deviation": max(floor) if floor else None,
    }
    return result, findings, metrics


def _deviation(baseline: float, candidate: float) -> float:
    if not (math.isfinite(baseline) and math.isfinite(candidate)):
        return math.inf  # a NaN score is as far off as a score can be
    return abs(candidate - baseline)


def _skipped(reason: str, checks: Sequence[Check]) -> GateResult:
    # Nothing to compare against: the gate judges nothing, and says why (never a pass).
    judged = gate_result(NAME, checks)
    return judged.model_copy(update={"status": Status.SKIP, "summary": f"skipped: {reason}"})


def evaluate(ev: EmbeddingsEvidence, policy: Policy, *, strict: bool = False) -> GateResult:
    """Judge the candidate's vectors and scores against the baseline's and its own noise; skip
    (never pass) when the baseline serves neither embeddings nor scores."""
    b = ev.baseline
    base_problems = problems(b.vectors, len(ev.inputs), len(b.vectors[0]) if b.vectors else None)
    base_bad = [
        f"{RULES[r]} broken for {_ids(ev.inputs, i)}" for r, i in base_problems.items() if i
    ]
    served = b.ok and not base_bad and bool(b.vectors)
    checks: list[Check] = []
    findings: list[Finding] = []
    metrics: dict[str, MetricValue] = {}
    if served:
        vector_checks, vector_findings = _vector_checks(ev, len(b.vectors[0]))
        checks += vector_checks
        findings += vector_findings
        if ev.candidate is not None and all(c.outcome is not Outcome.FAIL for c in vector_checks):
            cos, cos_findings, metrics = _cosine_check(ev, policy)
            checks.append(cos)
            findings += cos_findings
            if metrics["embedding_floor_max_cosine_distance"] is None:
                why = "the baseline's repeat gave no usable vectors: limits use the tolerance alone"
                checks.append(not_measured("noise_floor", "the baseline's noise floor", why))
    elif baseline_failed(b.error) and not _serves_none(ev):
        # The baseline serves embeddings but failed here (timeout, 5xx, reset): a failed
        # baseline is not measured, never a skip.
        checks.append(
            not_measured("embeddings", "embeddings", f"the baseline failed ({_why(b)})", core=True)
        )
    else:
        why = _why(b) if not b.ok else "; ".join(base_bad) or "no vectors"
        checks.append(
            not_applicable("embeddings", "embeddings", f"the baseline serves none ({why})")
        )
    for s in ev.scores:
        score, score_findings, score_metrics = _score_check(ev, s, policy)
        checks.append(score)
        findings += score_findings
        metrics.update(score_metrics)
    if all(c.outcome is Outcome.NOT_APPLICABLE for c in checks):
        return _skipped("not applicable: " + "; ".join(c.reason for c in checks), checks)
    return gate_result(NAME, checks, strict=strict, findings=findings, metrics=metrics)
