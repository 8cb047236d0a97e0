"""`servegate demo` against the real reference engine on loopback (three engines of its own).

In a file of its own so that, on the test command's two workers (scripts/test.sh distributes
whole files), it can run beside test_gate_engine.py, not after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_servegate

pytestmark = pytest.mark.engine


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_passes_the_benign_change_and_catches_the_mixed_dtype_bug(tmp_path: Path) -> None:
    proc = run_servegate(
        "demo", "--out", str(tmp_path / "demo"), "--db", str(tmp_path / "d.db"), timeout_s=590
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "demo ok" in proc.stdout
    benign = json.loads((tmp_path / "demo" / "mmap-off.json").read_text())
    buggy = json.loads((tmp_path / "demo" / "mixed-dtype.json").read_text())
    assert (benign["verdict"], buggy["verdict"]) == ("pass", "fail")
