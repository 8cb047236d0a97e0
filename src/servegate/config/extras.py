"""The optional parts of servegate and the extra that installs each (pyproject.toml's
`[project.optional-dependencies]`): a command that needs one it lacks says which, in one line.

The core install (`pip install servegate`) gates, probes, benches and replays against servers
that are already running. `servegate proxy` needs `[proxy]`, a PostgreSQL store `[postgres]`,
`servegate matrix --ray` `[ray]`;
the reference engine (`servegate demo`, `servegate engine`) needs `[engine]` and says so itself
(`servegate.engine` imports nothing from the rest of servegate).
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtraError", "missing_modules", "require"]

# extra -> the modules it provides that servegate imports
EXTRAS: dict[str, tuple[str, ...]] = {
    "proxy": ("starlette", "uvicorn", "prometheus_client"),
    "postgres": ("psycopg",),
    "ray": ("ray",),
}


class MissingExtraError(Exception):
    """An optional part is not installed; exit code 2 (the user installs it and runs again)."""

    exit_code = 2


def missing_modules(extra: str) -> tuple[str, ...]:
    """The modules of `extra` that this interpreter cannot import."""
    return tuple(name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None)


def install_hint(extra: str) -> str:
    """The command that installs `extra`."""
    return f"pip install 'servegate[{extra}]'"


def require(extra: str, what: str) -> None:
    """MissingExtraError naming `what` needs it, the missing modules and the install command,
    unless every module of `extra` is importable."""
    absent = missing_modules(extra)
    if absent:
        raise MissingExtraError(
            f"{what} needs the {extra} extra, which is not installed (no module "
            f"{', '.join(absent)}): {install_hint(extra)}"
        )
