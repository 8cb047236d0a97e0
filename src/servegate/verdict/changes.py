"""What changed between the baseline's and the candidate's fingerprints: the first thing a
reader of an upgrade report needs, before any verdict detail."""

from __future__ import annotations

from dataclasses import dataclass

from servegate.verdict.model import Fingerprint

MISSING = "-"


@dataclass(frozen=True)
class Change:
    field: str
    baseline: str
    candidate: str


def fields(fp: Fingerprint) -> dict[str, str]:
    """The comparable fields of a fingerprint (its URL is not one: ports differ by design)."""
    out: dict[str, str] = {}
    if fp.model is not None:
        out["model"] = fp.model
    if fp.version is not None:
        out["server.version"] = fp.version
    out.update({f"matrix.{k}": v for k, v in fp.matrix.items()})
    out.update(fp.environment)
    if fp.launch is not None:
        out["launch.command"] = fp.launch.command
    return out


def what_changed(baseline: Fingerprint, candidate: Fingerprint) -> tuple[list[Change], int]:
    """Fields whose values differ (a field one side lacks shows "-"), and how many were compared."""
    b, c = fields(baseline), fields(candidate)
    keys = sorted(set(b) | set(c))
    changes = [
        Change(k, b.get(k, MISSING), c.get(k, MISSING)) for k in keys if b.get(k) != c.get(k)
    ]
    return changes, len(keys)
