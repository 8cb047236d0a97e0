"""Repetition-penalty answers on one vLLM server, N a set: alone 4 or 16 at a time (`alone-4`,
`alone-16`), 16 at a time shuffled among as many presence-penalised and unpenalised answers
(`mixed-16`) or among 2N production-settings answers (`prod-16`); each set's repeat deficit
(gates/sampling/penalties.py).

usage: PYTHONPATH=src penmix.py PORT [N] [MODE,MODE,...]"""

import asyncio
import random
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from servegate.endpoints.types import Completion, TokenLogprob
from servegate.gates.sampling.penalties import PENALTIES, deficit, request
from servegate.gates.sampling.plan import EXTENDED_NEUTRAL
from servegate.gates.sampling.production import request as production_request

NEUTRAL = {**EXTENDED_NEUTRAL, "top_k": -1}
MODES = ("alone-4", "alone-16", "mixed-16", "alone-4", "mixed-16", "alone-16")


def completion(r: Mapping[str, Any]) -> Completion:
    c = r["choices"][0]
    entries = (c.get("logprobs") or {}).get("content") or []
    tokens = tuple(
        TokenLogprob(token=e["token"], logprob=e["logprob"],
                     top=tuple((t["token"], t["logprob"]) for t in e.get("top_logprobs") or []))
        for e in entries
    )  # fmt: skip
    return Completion(status=200, content=c["message"]["content"], logprobs=tokens)


async def run(client: aiohttp.ClientSession, url: str, bodies: Sequence[Mapping[str, Any]],
              width: int) -> list[Completion]:  # fmt: skip
    slots = asyncio.Semaphore(width)

    async def one(body: Mapping[str, Any]) -> Completion:
        async with slots, client.post(url, json=body) as r:
            return completion(await r.json())

    return list(await asyncio.gather(*(one(b) for b in bodies)))


async def main(port: str, n: int, modes: Sequence[str]) -> None:
    base = f"http://127.0.0.1:{port}/v1"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as client:
        async with client.get(f"{base}/models") as r:
            model = (await r.json())["data"][0]["id"]
        rep, pres, ctl, story = (
            {**b, "model": model}
            for b in (request(NEUTRAL, PENALTIES["repetition"]),
                      request(NEUTRAL, PENALTIES["presence"]), request(NEUTRAL, {}),
                      production_request("Tell me a very short story about a cat."))
        )  # fmt: skip
        url = f"{base}/chat/completions"
        for mode in modes:
            width = int(mode.split("-")[1])
            if mode.startswith("alone"):
                mine = await run(client, url, [rep] * n, width)
            else:
                others = [story] * (2 * n) if mode.startswith("prod") else [pres] * n + [ctl] * n
                bodies = [rep] * n + others
                order = list(range(len(bodies)))
                random.Random(1).shuffle(order)
                got = await run(client, url, [bodies[i] for i in order], width)
                mine = [got[k] for k, i in enumerate(order) if i < n]
            d = deficit(mine)
            print(f"{mode:9s} repetition: {d.text if d else '-'}", flush=True)


if __name__ == "__main__":
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    chosen = sys.argv[3].split(",") if len(sys.argv) > 3 else MODES
    asyncio.run(main(sys.argv[1], count, chosen))
