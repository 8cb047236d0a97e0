"""`servegate gate --config` with launch blocks, as a user runs it, against stand-in engines for
the start-up faults no real engine produces on demand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from servegate.orchestration.runner import GATE_ORDER

ROOT = Path(__file__).resolve().parents[3]
FAKE = str(ROOT / "tests" / "unit" / "managed" / "fake_engine.py")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _gate(tmp_path: Path, config: dict[str, Any], *extra: str) -> tuple[int, str, dict[str, Any]]:
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "report.json"
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "servegate", "gate", "--config", str(path), "--no-store",
         "--json", str(out), "--run-dir", str(tmp_path / "runs"), "--quiet", *extra],
        capture_output=True, text=True, timeout=100, env=env,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, proc.stderr, report


def _engine(mode: str, ready_timeout_s: float = 20) -> dict[str, Any]:
    return {"launch": {"command": [sys.executable, FAKE, mode, "{port}"],
                       "ready_timeout_s": ready_timeout_s}}  # fmt: skip


def test_an_unknown_launch_key_is_a_one_line_error(tmp_path: Path) -> None:
    config = {"baseline": _engine("serve"), "candidate": _engine("serve")}
    config["candidate"]["launch"]["restart"] = "always"
    code, err, _report = _gate(tmp_path, config)
    assert code == 2
    assert err.strip().count("\n") == 0
    assert "candidate.launch.restart: Extra inputs are not permitted" in err
    assert not (tmp_path / "runs").exists()  # nothing was started


@pytest.mark.parametrize(
    ("candidate", "category", "message"),
    [
        ({"launch": {"command": ["no-such-engine-xyz", "--port", "{port}"]}},
         "launch-not-found", "cannot execute 'no-such-engine-xyz'"),
        (_engine("silent", ready_timeout_s=1.5), "launch-timeout",
         "never opened port"),
        (_engine("exit"), "optional-dependency", "module 'sg_missing_optional_codec'"),
    ],
    ids=["not-found", "silent", "missing-module"],
)  # fmt: skip
def test_a_candidate_that_does_not_start_fails_gate_1_and_leaves_no_process(
    tmp_path: Path, candidate: dict[str, Any], category: str, message: str
) -> None:
    code, err, report = _gate(tmp_path, {"baseline": _engine("serve"), "candidate": candidate})
    assert (code, report["verdict"]) == (1, "fail"), err
    startup = report["gates"][0]
    assert (startup["name"], startup["status"]) == ("startup", "fail")
    [start] = [f for f in startup["findings"] if f["probe"] == "launch"]
    assert (start["category"], start["severity"], start["side"]) == (category, "critical",
                                                                     "candidate")  # fmt: skip
    assert message in start["message"]
    assert [g["status"] for g in report["gates"][1:]] == ["skip"] * (len(GATE_ORDER) - 1)
    launched = [report[s]["launch"] for s in ("baseline", "candidate")]
    assert launched[0]["outcome"] == "ready"
    assert launched[0]["ready_s"] > 0
    pids = [x["pid"] for x in launched if x["pid"] is not None]
    assert pids
    assert not any(_alive(pid) for pid in pids)


def test_a_baseline_that_does_not_start_is_inconclusive(tmp_path: Path) -> None:
    code, err, report = _gate(
        tmp_path, {"baseline": _engine("exit"), "candidate": _engine("serve")}
    )
    assert (code, report["verdict"]) == (3, "inconclusive"), err
    assert report["candidate"]["launch"] is None  # not started once the baseline failed


def test_a_fallback_only_the_candidate_prints_fails_gate_1_with_the_log_line(
    tmp_path: Path,
) -> None:
    config = {"baseline": _engine("quiet"), "candidate": _engine("serve"), "gates": ["startup"]}
    code, err, report = _gate(tmp_path, config)
    assert (code, report["verdict"]) == (1, "fail"), err
    startup = report["gates"][0]
    [log_check] = [c for c in startup["checks"] if c["name"] == "log_scan"]
    assert log_check["outcome"] == "fail"
    [hit] = [f for f in startup["findings"] if f["probe"] == "log:falling-back"]
    assert (hit["category"], hit["severity"], hit["side"]) == ("fallback", "major", "candidate")
    assert "falling back to the slow path" in hit["candidate_excerpt"]
