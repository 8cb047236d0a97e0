"""Endpoint URLs: the one normal form of an OpenAI base URL, and the one form a URL is shown in
(no user info, no query: either can carry secrets)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["display_url", "normalise_url"]


def normalise_url(url: str) -> str:
    """`http://host:port` and `http://host:port/v1/` both mean the OpenAI base `…/v1`."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path == "":
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc.lower(), path, "", ""))


def display_url(url: str) -> str:
    """The URL without user info or query (which can carry secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
