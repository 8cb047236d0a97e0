"""Who may call the proxy's state-changing endpoints (Flagger's post-rollout, which ends a
canary): a caller on the admin address (`--admin-listen`, loopback by default), or one that sends
`Authorization: Bearer <token>` with the token from `--admin-token-env`. Anyone who reaches the
user port gets only what the read-only endpoints expose (docs/proxy.md).

The admin address is told apart by the listening socket a request came in on — its address and
its port, never the port alone: users on 10.0.0.5:8081 next to an admin address 127.0.0.1:8081
share a port number, not a socket."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

Address = tuple[str, int]


def _host(text: str) -> str:
    """An address in one spelling: `::ffff:127.0.0.1` as `127.0.0.1`, `[::1]` as `::1`."""
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return text
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


@dataclass(frozen=True)
class AdminAccess:
    """The admin listeners' socket addresses and the bearer token (None: no token accepted)."""

    token: str | None = None
    listeners: frozenset[Address] = field(default_factory=frozenset)

    @classmethod
    def of(cls, token: str | None, listeners: Iterable[Address]) -> AdminAccess:
        """Access for the admin sockets bound at `listeners` (their `getsockname()[:2]`)."""
        return cls(token=token, listeners=frozenset((_host(h), int(p)) for h, p in listeners))

    def admits(self, server: Address | None) -> bool:
        """Whether a connection accepted at local address `server` came in on an admin socket.
        A wildcard admin socket (0.0.0.0:P) owns port P on every address: nothing else can
        listen on P beside it."""
        if server is None:
            return False
        host, port = _host(str(server[0])), int(server[1])
        return any(port == p and (host == h or _wildcard(h)) for h, p in self.listeners)

    def refusal(self, request: Request) -> str | None:
        """Why `request` may not change state, or None when it may."""
        return self.refusal_of(request.scope)

    def refusal_of(self, scope: Mapping[str, Any]) -> str | None:
        server = scope.get("server")
        if self.admits(None if server is None else (str(server[0]), int(server[1]))):
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
