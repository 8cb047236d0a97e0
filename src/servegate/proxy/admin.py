"""Who may call the proxy's state-changing endpoints (Flagger's post-rollout, which ends a
canary): a caller on the admin address (`--admin-listen`, loopback by default), or one that sends
`Authorization: Bearer <token>` with the token from `--admin-token-env`. Anyone who reaches the
user port gets only what the read-only endpoints expose (docs/proxy.md)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request


@dataclass(frozen=True)
class AdminAccess:
    """The admin listener's ports and the bearer token (None: no token accepted)."""

    token: str | None = None
    ports: frozenset[int] = field(default_factory=frozenset)

    def refusal(self, request: Request) -> str | None:
        """Why `request` may not change state, or None when it may."""
        return self.refusal_of(request.scope)

    def refusal_of(self, scope: Mapping[str, Any]) -> str | None:
        server = scope.get("server")
        if server is not None and server[1] in self.ports:
            return None
        sent = _bearer(scope)
        if self.token is not None and sent is not None:
            if hmac.compare_digest(sent.encode(), self.token.encode()):
                return None
            return "state-changing endpoint: the bearer token does not match"
        how = "the admin address (--admin-listen)"
        if self.token is not None:
            how += " or with Authorization: Bearer <token> (--admin-token-env)"
        return f"state-changing endpoint: call it on {how}"


def _bearer(scope: Mapping[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None
