"""Both sides at once: N identical requests a side at C in flight; wall seconds per setting.

usage: conc.py PORT_B PORT_C (two OpenAI-compatible servers on 127.0.0.1)."""

import asyncio
import sys
import time
from typing import Any

import aiohttp

NEUTRAL = {"top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0,
           "repetition_penalty": 1.0}  # fmt: skip
DRAW = {"messages": [{"role": "user", "content": "Name a musical instrument."}],
        "max_tokens": 1, "temperature": 1.0, "logprobs": True, "top_logprobs": 20,
        **NEUTRAL}  # fmt: skip
PENALTY = {**DRAW, "messages": [{"role": "user", "content": "List the days of the week, twice."}],
           "max_tokens": 32, "presence_penalty": 1.5}  # fmt: skip
PRODUCTION = {"messages": [{"role": "user", "content": "Tell me a very short story about a cat."}],
              "max_tokens": 32, "temperature": 0.7, "top_p": 0.9}  # fmt: skip
SETTINGS = (("draw", DRAW, 96, (4, 8, 16, 32, 4)), ("penalty", PENALTY, 40, (4, 16, 4, 16)),
            ("production", PRODUCTION, 40, (4, 16)))  # fmt: skip


async def side(client: aiohttp.ClientSession, port: str, body: dict[str, Any], n: int,
               c: int) -> None:  # fmt: skip
    slots = asyncio.Semaphore(c)

    async def one() -> None:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        async with slots, client.post(url, json=body) as r:
            r.raise_for_status()
            await r.read()

    await asyncio.gather(*(one() for _ in range(n)))


async def main(pb: str, pc: str) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as client:
        async with client.get(f"http://127.0.0.1:{pb}/v1/models") as r:
            model = (await r.json())["data"][0]["id"]
        for name, body, n, widths in SETTINGS:
            for c in widths:
                t = time.perf_counter()
                asked = {**body, "model": model}
                await asyncio.gather(side(client, pb, asked, n, c), side(client, pc, asked, n, c))
                took = time.perf_counter() - t
                print(f"{name:10s} n={n} per side, concurrency {c:2d}: {took:6.1f} s", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
