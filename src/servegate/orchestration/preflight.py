"""Before anything is judged: is each side an OpenAI-compatible server, and which model to ask."""

from __future__ import annotations

from dataclasses import dataclass

from servegate.config.models import GateConfig
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.urls import display_url
from servegate.verdict.rules import EXIT_INCONCLUSIVE, EXIT_USAGE


class PreflightError(Exception):
    """An endpoint cannot be compared at all; carries the exit code (2 usage, 3 inconclusive)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Preflight:
    models: tuple[str, ...]


async def preflight(ep: Endpoint, deadline_s: float) -> Preflight:
    """Is this an OpenAI-compatible server we can reach? Unreachable: 3; not OpenAI: 2."""
    resp = await ep.raw("GET", "/models", deadline_s=deadline_s)
    where = f"{ep.name} {display_url(ep.base_url)}"
    if resp.error is not None and resp.status is None:
        raise PreflightError(
            f"{where} unreachable: {resp.error.category}: {resp.error.message}", EXIT_INCONCLUSIVE
        )
    ctype = resp.headers.get("content-type", resp.headers.get("Content-Type", ""))
    try:
        data = resp.json() if resp.status == 200 else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise PreflightError(
            f"{where} does not look like an OpenAI-compatible server: GET /models answered "
            f"HTTP {resp.status} {ctype or 'without a content type'} (expected JSON with a 'data' "
            "list; is the URL's path right, e.g. http://host:port/v1?)",
            EXIT_USAGE,
        )
    ids = tuple(str(m.get("id")) for m in data["data"] if isinstance(m, dict))
    return Preflight(models=ids)


def choose_model(cfg: GateConfig, b: Preflight, c: Preflight) -> str | None:
    if cfg.model is not None:
        return cfg.model
    common = [m for m in b.models if m in c.models] or list(b.models)
    return common[0] if common else None
