"""What a proxy is told at start: its upstreams (the only place they come from), its mode, the
mirror's sample and bounds, and limits on what it accepts and keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from yarl import URL

from servegate.canary.deadline_rule import DeadlineRule

Mode = Literal["shadow", "canary"]
StoreBodies = Literal["none", "redacted", "full"]


class ProxySettingsError(ValueError):
    """A setting that cannot work; the CLI reports it as a usage error (exit 2)."""


@dataclass(frozen=True)
class Upstream:
    """One configured upstream: requests go to `origin` + `prefix` + the request's own path."""

    origin: str  # scheme://host:port, no trailing slash
    prefix: str  # a path before /v1 (usually empty)
    display: str  # the URL as given, credentials refused

    @classmethod
    def parse(cls, name: str, url: str) -> Upstream:
        """The base URL as servegate takes it elsewhere (…/v1, or an origin); no credentials."""
        try:
            parsed = URL(url)
        except ValueError as exc:
            raise ProxySettingsError(f"--{name} does not parse as a URL: {exc}") from None
        if parsed.user or parsed.password:
            raise ProxySettingsError(f"--{name} must not carry credentials; use an env variable")
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ProxySettingsError(f"--{name} must be http(s)://host[:port][/v1], got {url!r}")
        if parsed.query_string or parsed.fragment:
            raise ProxySettingsError(f"--{name} must not carry a query or fragment")
        path = parsed.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[: -len("/v1")]
        return cls(origin=str(parsed.origin()), prefix=path, display=url)

    def url(self, raw_path: bytes, query: bytes) -> str:
        """The upstream URL of a request path, already percent-encoded as the client sent it."""
        target = self.origin + self.prefix + raw_path.decode("latin-1")
        return target + "?" + query.decode("latin-1") if query else target


@dataclass(frozen=True)
class ProxySettings:
    """Frozen settings of one proxy."""

    primary: Upstream
    candidate: Upstream
    mode: Mode = "shadow"
    sample: float = 0.05  # share of mirrorable requests sent to the candidate too (shadow)
    secondary: Upstream | None = None
    candidate_key: str | None = None  # the candidate's own API key (from an env variable)
    max_body_bytes: int = 16 * 1024 * 1024  # larger request bodies are refused with 413
    queue_size: int = 256  # mirror jobs waiting; beyond it a sampled request is dropped
    mirror_workers: int = 8  # candidate requests in flight at once
    candidate_timeout_s: float = 60.0  # a mirrored request gives up after this, in all
    primary_connect_timeout_s: float = 10.0
    # A primary's answer, first byte to last, gives up after this (504 before the headers, a
    # broken stream after): a hung engine cannot hold a request, and its memory, for ever.
    primary_timeout_s: float | None = 600.0
    record_bytes: int = 4 * 1024 * 1024  # an answer larger than this is served but not measured
    record_queue_size: int = 256  # records waiting for the store writer; beyond it, dropped
    max_body_reads: int = 16  # request bodies buffered at once; beyond it 503 (Retry-After)
    body_read_timeout_s: float = 30.0  # a body not in full by then: 408 (slow uploads)
    max_queued_bytes: int = 256 * 1024 * 1024  # mirror + record queues together; beyond, drop
    max_in_flight: int = 1024  # user requests admitted at once; beyond it 503 (Retry-After)
    # Request bodies and kept answer bytes of the requests in flight; a body that would pass it
    # is answered 503 (Retry-After), an answer past it is served but not measured.
    max_buffered_bytes: int = 256 * 1024 * 1024
    # What of prompts and answers reaches disk: none (the comparison only), redacted, full.
    store_bodies: StoreBodies = "none"
    retention_days: float = 30.0  # stored pairs older than this are deleted
    seed: int | None = None  # for the sampling draw (tests, replays of a session)
    # canary mode: the candidate's own total and idle deadlines (policy canary.candidate_*)
    candidate_deadlines: DeadlineRule = field(default_factory=DeadlineRule)

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample <= 1.0:
            raise ProxySettingsError(f"--sample must be in [0, 1], got {self.sample}")
        if not self.retention_days > 0:
            raise ProxySettingsError("--retention-days must be > 0")
        if not self.body_read_timeout_s > 0:
            raise ProxySettingsError("the body-read timeout must be > 0 s")
        for name in ("max_body_bytes", "queue_size", "mirror_workers", "record_bytes",
                     "max_body_reads", "max_queued_bytes", "max_in_flight",
                     "max_buffered_bytes"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ProxySettingsError(f"{name} must be at least 1")
        if self.candidate_timeout_s <= 0:
            raise ProxySettingsError("the candidate timeout must be > 0 s")
        if self.primary_timeout_s is not None and self.primary_timeout_s <= 0:
            raise ProxySettingsError("the primary timeout must be > 0 s")
        if (self.primary.origin, self.primary.prefix) == (
            self.candidate.origin,
            self.candidate.prefix,
        ):
            raise ProxySettingsError("--primary and --candidate are the same upstream")

    def public(self) -> dict[str, object]:
        """JSON-able settings without the key, for the session row."""
        return {
            "mode": self.mode,
            "sample": self.sample,
            "primary": self.primary.display,
            "candidate": self.candidate.display,
            "secondary": None if self.secondary is None else self.secondary.display,
            "candidate_key": "set" if self.candidate_key else "not set",
            "max_body_bytes": self.max_body_bytes,
            "queue_size": self.queue_size,
            "mirror_workers": self.mirror_workers,
            "candidate_timeout_s": self.candidate_timeout_s,
            "max_body_reads": self.max_body_reads,
            "body_read_timeout_s": self.body_read_timeout_s,
            "max_queued_bytes": self.max_queued_bytes,
            "max_in_flight": self.max_in_flight,
            "max_buffered_bytes": self.max_buffered_bytes,
            "primary_timeout_s": self.primary_timeout_s,
            "store_bodies": self.store_bodies,
            "retention_days": self.retention_days,
        }
