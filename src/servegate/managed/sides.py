"""Launch every configured side that has a `launch` block, one after another (so one engine's
load does not slow the other's), and stop them all when the run ends, however it ends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from servegate.config.models import EndpointConfig
from servegate.managed.launcher import Managed, launch
from servegate.managed.logscan import load_catalogue


@contextlib.asynccontextmanager
async def launched(
    sides: Sequence[tuple[str, EndpointConfig | None]],
    run_dir: Path,
    *,
    log_patterns: Path | None = None,
    probe_deadline_s: float = 15.0,
) -> AsyncIterator[dict[str, Managed]]:
    """Yield the launched sides by name. A side that does not start stops the launching: the
    sides after it are not started. Every started process group is stopped on exit."""
    managed: dict[str, Managed] = {}
    wanted = [(name, cfg) for name, cfg in sides if cfg is not None and cfg.launch is not None]
    patterns = load_catalogue(log_patterns) if wanted else ()
    try:
        for name, cfg in wanted:
            side = await launch(name, cfg, run_dir, patterns, probe_deadline_s=probe_deadline_s)
            managed[name] = side
            if not side.evidence.ready:
                break
        yield managed
    finally:
        await _stop_all(list(managed.values()))


async def _stop_all(sides: list[Managed]) -> None:
    """Stop every side, newest first; a side whose stop fails does not spare the others."""
    first: BaseException | None = None
    for side in reversed(sides):
        try:
            await side.stop()
        except BaseException as exc:  # a second Ctrl-C during the first stop included
            first = first or exc
    if first is not None:
        raise first
