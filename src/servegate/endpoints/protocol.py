"""The one seam between gates and servers: gates see this protocol, never the HTTP client class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from servegate.endpoints.types import Completion, Embeddings, RawResponse


class Endpoint(Protocol):
    """An OpenAI-compatible serving endpoint. Methods never raise for server faults: they return
    results whose `error` names the failure category. `deadline_s` bounds the whole request."""

    @property
    def name(self) -> str:
        """Which side this is ("baseline", "candidate"), used in findings."""
        ...

    @property
    def base_url(self) -> str:
        """Base URL without secrets, e.g. http://127.0.0.1:8000/v1 ."""
        ...

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        """POST /chat/completions; streams when body["stream"] is true."""
        ...

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        """POST /completions; streams when body["stream"] is true."""
        ...

    async def embeddings(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Embeddings:
        """POST /embeddings."""
        ...

    async def raw(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline_s: float | None = None,
    ) -> RawResponse:
        """Any request relative to base_url (e.g. GET /models, GET ../version); no retries."""
        ...

    async def aclose(self) -> None: ...
