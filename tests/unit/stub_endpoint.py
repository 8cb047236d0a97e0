"""The parts of the Endpoint interface a gate's fake server does not serve: a name and URL,
embeddings refused, raw requests refused (or answered with `raw_status` and no body), nothing
to close. A fake adds `chat` and `completion`."""

from collections.abc import Mapping
from typing import Any

from servegate.endpoints.types import Embeddings, RawResponse


class StubEndpoint:
    def __init__(self, name: str, url: str = "", raw_status: int | None = None) -> None:
        self._name = name
        self._url = url or f"http://{name}/v1"
        self._raw_status = raw_status

    @property
    def name(self) -> str:
        return self._name

    @property
    def base_url(self) -> str:
        return self._url

    async def embeddings(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Embeddings:
        raise NotImplementedError

    async def raw(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline_s: float | None = None,
    ) -> RawResponse:
        if self._raw_status is None:
            raise NotImplementedError
        return RawResponse(status=self._raw_status)

    async def aclose(self) -> None:
        return None
