"""A server's own tokenizer, asked over HTTP: the one list of the routes engines offer.

vLLM and SGLang serve `POST /tokenize` (`{"model", "prompt"}`), llama.cpp's server `POST
/tokenize` (`{"content"}`), llama-cpp-python `POST /extras/tokenize` (`{"input"}`); each answers
`{"tokens": [...]}` (vLLM adds `count`). The paths are relative to the /v1 base URL.
"""

from __future__ import annotations

from typing import Any

from servegate.endpoints.protocol import Endpoint


def answer_json(resp: Any) -> Any:
    """A raw answer's JSON body, or None when it failed or is not JSON."""
    try:
        return resp.json() if resp.ok else None
    except ValueError:
        return None


def routes(model: str | None, text: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    return (
        ("../tokenize", {"model": model, "prompt": text}),  # vLLM, SGLang
        ("../tokenize", {"content": text}),  # llama.cpp server
        ("../extras/tokenize", {"input": text}),  # llama-cpp-python
    )


def _ids(body: Any) -> list[int] | None:
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
        return [int(t) for t in tokens]
    return None


async def server_tokens(
    probe: Endpoint, model: str | None, text: str, deadline_s: float
) -> tuple[list[int] | None, str]:
    """`text`'s token ids by the server's own tokenizer and the route that gave them, trying
    each engine's route in turn; (None, why) when no route answers with a token list."""
    for path, body in routes(model, text):
        ids = _ids(answer_json(await probe.raw("POST", path, body, deadline_s=deadline_s)))
        if ids is not None:
            return ids, f"tokenized by {path.removeprefix('..')}"
    return None, "no tokenizer endpoint (/tokenize, /extras/tokenize)"


async def single_token(
    probe: Endpoint, model: str | None, token: str, deadline_s: float
) -> tuple[int | None, str]:
    """The id of `token` when the server's tokenizer makes it exactly one token. A tokenizer
    that adds special tokens (a BOS) adds them to the empty text too: that prefix is dropped."""
    ids, how = await server_tokens(probe, model, token, deadline_s)
    if ids is None:
        return None, how
    empty, _ = await server_tokens(probe, model, "", deadline_s)
    if empty and ids[: len(empty)] == empty:
        ids = ids[len(empty) :]
    if len(ids) != 1:
        return None, f"{token!r} is {len(ids)} tokens, not one ({how})"
    return ids[0], how
