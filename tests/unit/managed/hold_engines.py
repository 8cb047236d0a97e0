"""`python hold_engines.py CONFIG_JSON RUN_DIR`: launch the endpoints of CONFIG_JSON like
`servegate gate` does, print each launched pid, then wait until interrupted or killed."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from servegate.config.models import EndpointConfig
from servegate.managed.sides import launched


async def main() -> None:
    sides = [(name, EndpointConfig.model_validate(cfg))
             for name, cfg in json.loads(sys.argv[1]).items()]  # fmt: skip
    async with launched(sides, Path(sys.argv[2])) as managed:
        for name, side in managed.items():
            print(name, side.pid, side.evidence.outcome.value, flush=True)
        await asyncio.sleep(600)


if __name__ == "__main__":
    # Ctrl-C as a terminal delivers it: a test run started in the background by a shell without
    # job control inherits SIGINT ignored, and this holder then never saw the test's SIGINT
    # (measured 2026-12-02: a clean-clone CI run started with `cmd &` failed here).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    asyncio.run(main())
