"""The report says when the two sides were read by different HTTP clients (plain http by
servegate's own wire client, https by aiohttp): their timings then differ by the clients' own
overhead, which is no change of the server."""

from __future__ import annotations

from servegate.config.models import EndpointConfig
from servegate.environment.fingerprint import side_fingerprint
from servegate.verdict.changes import what_changed


async def _fingerprint(url: str):  # type: ignore[no-untyped-def]
    return await side_fingerprint(None, EndpointConfig(url=url), url=url, model="m")


async def test_sides_read_by_different_http_stacks_show_as_a_change() -> None:
    plain = await _fingerprint("http://127.0.0.1:8000/v1")
    tls = await _fingerprint("https://candidate.example/v1")
    changes, _ = what_changed(plain, tls)
    [stack] = [c for c in changes if c.field == "client.http"]
    assert stack.baseline.startswith("servegate wire")
    assert stack.candidate.startswith("aiohttp ")


async def test_sides_read_by_the_same_stack_show_no_change() -> None:
    changes, _ = what_changed(
        await _fingerprint("http://127.0.0.1:8000/v1"), await _fingerprint("http://10.0.0.2:80/v1")
    )
    assert [c.field for c in changes if c.field == "client.http"] == []
