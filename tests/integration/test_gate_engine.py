"""`servegate gate`, `probe` and `runs` against the real reference engine on loopback."""

from __future__ import annotations

import asyncio
import json
import posixpath
import socket
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servegate.endpoints.http import OpenAIEndpoint
from servegate.engine import RunningEngine
from servegate.gates import batching
from servegate.gates.pair import EndpointPair

pytestmark = pytest.mark.engine


def servegate(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servegate", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def gate(
    baseline: RunningEngine, candidate: RunningEngine, tmp_path: Path, *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "report.json"
    proc = servegate(
        "gate",
        "--baseline",
        baseline.base_url,
        "--candidate",
        candidate.base_url,
        "--gates",
        "startup,golden",
        "--category",
        "canary",
        "--json",
        str(out),
        "--db",
        str(tmp_path / "runs.db"),
        "--quiet",
        *extra,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(out.read_text())


def findings(report: dict[str, Any], gate_name: str) -> list[dict[str, Any]]:
    [g] = [g for g in report["gates"] if g["name"] == gate_name]
    return list(g["findings"])


def test_benign_config_change_passes(
    clean_engine: RunningEngine, benign_engine: RunningEngine, tmp_path: Path
) -> None:
    auto = tmp_path / "auto.yaml"
    auto.write_text("golden_concurrency: auto\n")
    proc, report = gate(clean_engine, benign_engine, tmp_path, "--config", str(auto))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["verdict"] == "pass"
    assert report["schema_version"] == 4
    golden = next(g for g in report["gates"] if g["name"] == "golden")
    assert golden["metrics"]["exact_match_rate"] == 1.0
    # Asked to send as many probes at once as both sides batch, golden measured each side and
    # sent what the measurements allow. (What the measurement reads on this engine is a wall-clock
    # matter, so it is asserted alone: test_the_reference_engine_serves_one_request_at_a_time.
    # On two busy pytest workers the baseline's one request alone once took 1.5 s, not 0.3 s.)
    batching = golden["details"]["batching"]
    assert [b["side"] for b in batching] == ["baseline", "candidate"]
    at_once = 4 if all(b["batches"] for b in batching) else 1
    assert golden["details"]["probes_at_once"] == at_once, batching
    # The candidate answered every probe as the baseline, so nothing needed the baseline's noise:
    # its cache-hit path was not sent, and the regressions check says so.
    assert golden["metrics"]["cache_hits_not_sent"] == golden["metrics"]["probes"]
    regressions = next(c for c in golden["checks"] if c["name"] == "regressions")
    assert "cache-hit path not sent" in regressions["baseline"]


@pytest.mark.timed  # the engine's own latency decides: run alone (scripts/test.sh)
def test_the_reference_engine_serves_one_request_at_a_time(clean_engine: RunningEngine) -> None:
    # llama-cpp-python's server takes one request at a time: four at once take several times
    # as long as one alone (6.3-8.0x, three runs alone on an idle host; stock 0.3.36: 5.1-7.9x)
    # so golden's `golden_concurrency: auto` sends it one probe at a time.
    async def measure() -> batching.Batching:
        endpoint = OpenAIEndpoint("baseline", clean_engine.base_url)
        try:
            pair = EndpointPair(endpoint, endpoint)
            return await batching.measure(pair, endpoint, gate="golden", deadline_s=60)
        finally:
            await endpoint.aclose()

    measured = asyncio.run(measure())
    assert not measured.batches, measured.why


def test_rollback_when_candidate_answers_commas_instead_of_ok(
    clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine, tmp_path: Path
) -> None:
    # Gate 1 sends the suite's first canaries: the commas fail it, and the run fails fast.
    proc, report = gate(clean_engine, mixed_dtype_engine, tmp_path)
    assert proc.returncode == 1
    assert report["verdict"] == "fail"
    startup = findings(report, "startup")
    ok = [f for f in startup if f["probe"] == "canary-ok"]
    assert ok, startup
    assert (ok[0]["category"], ok[0]["severity"]) == ("degeneration", "critical")
    assert ",,,," in ok[0]["candidate_excerpt"]
    assert ok[0]["curl"].startswith("curl -sS ")
    statuses = {g["name"]: (g["status"], g["summary"]) for g in report["gates"]}
    assert statuses["startup"][0] == "fail"
    assert statuses["golden"] == (
        "skip",
        "not run: the run failed fast on startup (degeneration, critical: canary-ok); "
        "--complete runs every gate",
    )


def test_complete_runs_golden_after_the_fast_failure_and_it_finds_the_commas_too(
    clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine, tmp_path: Path
) -> None:
    proc, report = gate(clean_engine, mixed_dtype_engine, tmp_path, "--complete")
    assert proc.returncode == 1
    golden = findings(report, "golden")
    ok = [f for f in golden if f["probe"] == "canary-ok"]
    assert ok, golden
    assert ok[0]["category"] == "degeneration"
    assert ",,,," in ok[0]["candidate_excerpt"]


def test_hung_candidate_becomes_a_timeout_finding_not_a_hung_gate(
    clean_engine: RunningEngine, hang_long_engine: RunningEngine, tmp_path: Path
) -> None:
    proc, report = gate(clean_engine, hang_long_engine, tmp_path, "--probe-deadline-s", "5")
    assert proc.returncode == 1  # a hang fails the run: never a pass, never merely inconclusive
    timeouts = [f for f in findings(report, "startup") if f["category"] == "timeout"]
    assert len(timeouts) == 1
    assert timeouts[0]["probe"] == "impossible-request"
    assert timeouts[0]["severity"] == "critical"


def test_a_candidate_that_hangs_on_every_generation_fails_fast_and_is_not_sent_the_rest(
    clean_engine: RunningEngine, engine_factory: Callable[..., RunningEngine], tmp_path: Path
) -> None:
    # Every prompt longer than one character hangs: only the 1-token isolation request answers.
    with engine_factory("clean", "hang-long", threshold_chars=1) as candidate:
        out, db = tmp_path / "hung.json", tmp_path / "runs.db"
        proc = servegate(
            *("gate", "--baseline", clean_engine.base_url, "--candidate", candidate.base_url),
            *("--gates", "numerics,golden", "--category", "canary", "--numerics-prompts", "3"),
            *("--deadline-s", "4", "--run-deadline-s", "600", "--json", str(out)),
            # --complete: numerics' hang would end the run (fail fast); this test is about
            # golden not sending the rest to a side that hung.
            *("--db", str(db), "--complete", "--quiet"),
        )  # fmt: skip
    report = json.loads(out.read_text())
    assert proc.returncode == 1, proc.stderr
    assert "run deadline" not in report["reason"]  # judged, not cut off
    gates = {g["name"]: g for g in report["gates"]}
    assert gates["numerics"]["status"] == "fail"
    assert {c["name"]: c["outcome"] for c in gates["numerics"]["checks"]}["hangs"] == "fail"
    # Still hung when golden starts: nothing is sent, nothing is passed.
    assert gates["golden"]["status"] == "inconclusive"
    assert any("not_sent" in n for n in gates["golden"]["not_measured"])
    with sqlite3.connect(db) as conn:
        counts = dict(
            conn.execute(
                "select coalesce(error_category, 'ok'), count(*) from requests "
                "where side = 'candidate' group by 1"
            ).fetchall()
        )
    # Two timeouts in a row (each after one retry) and the rest of each gate is not sent.
    assert counts["not_sent"] > counts["timeout"]


def test_unreachable_candidate_is_inconclusive_naming_the_side(
    clean_engine: RunningEngine,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = servegate(
        "gate",
        "--baseline",
        clean_engine.base_url,
        "--candidate",
        f"http://127.0.0.1:{port}/v1",
        "--no-store",
        "--probe-deadline-s",
        "5",
    )
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert "candidate" in proc.stderr
    assert "unreachable" in proc.stderr


def _exchanges_sent(log: Path) -> Counter[tuple[str, str, str]]:
    """What the engine behind the passthrough proxy was sent: (method, path, JSON body)."""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return Counter((x["method"], x["path"], json.dumps(x["body"], sort_keys=True)) for x in lines)


def _exchanges_recorded(db: Path, side: str) -> Counter[tuple[str, str, str]]:
    """What servegate stored for `side`, mapped to the same (method, path, body) shape."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "select api, request_json from requests where side = ?", (side,)
        ).fetchall()
    out: Counter[tuple[str, str, str]] = Counter()
    for api, request_json in rows:
        body = json.loads(request_json)
        if api.startswith(("GET ", "POST ")):
            method, rel = api.split(" ", 1)
            path = posixpath.normpath("/v1/" + rel.lstrip("/"))
        else:
            method, path = "POST", {"chat": "/v1/chat/completions"}.get(api, f"/v1/{api}")
        out[(method, path, json.dumps(body or None, sort_keys=True))] += 1
    return out


def test_every_request_the_candidate_was_sent_is_recorded_and_the_run_is_listed(
    clean_engine: RunningEngine, engine_factory: Callable[..., RunningEngine], tmp_path: Path
) -> None:
    log = tmp_path / "sent.jsonl"
    with engine_factory("clean", "passthrough", request_log=str(log)) as candidate:
        log.write_text("")  # forget start_engine's own readiness polls
        proc, _ = gate(clean_engine, candidate, tmp_path, "--name", "recorded")
    assert proc.returncode == 0, proc.stderr
    sent = _exchanges_sent(log)
    recorded = _exchanges_recorded(tmp_path / "runs.db", "candidate")
    # The one request sent before the run exists (README): the preflight GET /models.
    assert sent - recorded == Counter({("GET", "/v1/models", "null"): 1})
    assert recorded - sent == Counter()
    # The log saw the gate's own traffic: each of the five canaries streamed once to the candidate
    # (the capability probe's stream is the one that asks for usage).
    streamed_canaries = sum(
        n for (_, path, body), n in sent.items()
        if path == "/v1/chat/completions" and '"stream": true' in body
        and "stream_options" not in body
    )  # fmt: skip
    assert streamed_canaries == 5
    proc = servegate("runs", "--db", str(tmp_path / "runs.db"), "--json")
    assert proc.returncode == 0
    [run] = json.loads(proc.stdout)
    assert (run["name"], run["verdict"]) == ("recorded", "pass")


def test_probe_prints_the_real_capability_table(clean_engine: RunningEngine) -> None:
    proc = servegate("probe", clean_engine.base_url, "--json")
    assert proc.returncode == 0, proc.stderr
    caps = json.loads(proc.stdout)["capabilities"]
    assert caps["logprobs"]["supported"] is True
    assert caps["logprobs"]["detail"] == "top_logprobs asked 5, got 5"
    assert caps["prompt_logprobs"]["supported"] is True
    assert caps["tools"]["supported"] is True
    assert caps["version"]["supported"] is False


def test_a_baseline_replica_joins_the_noise_floor(
    clean_engine: RunningEngine,
    benign_engine: RunningEngine,
    mixed_dtype_engine: RunningEngine,
    tmp_path: Path,
) -> None:
    out = tmp_path / "replica.json"
    proc = servegate(
        *("gate", "--baseline", clean_engine.base_url, "--candidate", mixed_dtype_engine.base_url),
        *("--baseline-replica", benign_engine.base_url, "--gates", "numerics"),
        *("--numerics-prompts", "2", "--json", str(out), "--no-store", "--quiet"),
    )
    assert proc.returncode == 1, proc.stderr
    [numerics] = json.loads(out.read_text())["gates"]
    assert numerics["metrics"]["aa_source"] == "repeat+cache-hit+stream+alongside+replica"
    assert numerics["metrics"]["aa_pairs"] == 2 * 5  # two prompts, each along five paths
    # mmap-off serves the same weights the same way: the replica agrees with the baseline exactly
    assert numerics["metrics"]["aa_replica_flip_rate"] == 0.0
    assert numerics["metrics"]["aa_repeat_flip_rate"] == 0.0
    assert numerics["status"] == "fail"
    # Where the time went: the five paths of two prompts on the baseline (the alongside path's
    # filler too) and the replica's two answers are the noise floor; each part's requests add
    # up to the gate's, side by side.
    parts = {p["part"]: p for p in numerics["time"]["parts"]}
    assert parts["noise floor (the baseline's own paths)"]["requests"] == {
        "baseline": 2 * 5, "baseline-replica": 2
    }  # fmt: skip
    assert parts["probes"]["requests"] == {"baseline": 2, "candidate": 2}
    assert {"pilot", "isolation (prefix-cache reset)", "echo alignment"} <= set(parts)
    assert all(p["seconds"] > 0 for p in parts.values())
    for side, n in numerics["time"]["requests"].items():
        assert sum(p["requests"].get(side, 0) for p in parts.values()) == n
    # Each side's busy seconds are the union of its own requests' intervals: every side that was
    # sent something worked, and none longer than the gate took. (Which side is busier is a
    # measurement, not a property: this garbage candidate's long answers made it the busier one,
    # 9.4 s against the baseline's 6.1 s, on two pytest workers.)
    busy = numerics["time"]["busy"]
    assert set(busy) == set(numerics["time"]["requests"])
    assert all(0 < s <= numerics["time"]["seconds"] for s in busy.values())


def test_the_matrix_gives_each_execution_path_its_own_verdict(
    clean_engine: RunningEngine,
    benign_engine: RunningEngine,
    mixed_dtype_engine: RunningEngine,
    tmp_path: Path,
) -> None:
    # The same two candidates and gates as the two tests above, as entries of one matrix.
    spec = {
        "baseline": {"url": clean_engine.base_url},
        "settings": {"gates": ["startup", "golden"], "categories": ["canary"]},
        "entries": [
            {"name": "mmap-off", "url": benign_engine.base_url, "engine_version": "0.3.16",
             "hardware": "cpu", "quantization": "Q4_1"},
            {"name": "fused-norm", "url": mixed_dtype_engine.base_url, "quantization": "Q4_1",
             "norm_dtype": "bf16", "fusion": ["attn_norm"]},
        ],
    }  # fmt: skip
    path = tmp_path / "matrix.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    out = tmp_path / "matrix.json"
    proc = servegate("matrix", str(path), "--db", str(tmp_path / "runs.db"), "--json", str(out))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1  # one entry failed
    rows = {r["entry"]: r for r in json.loads(out.read_text())}
    assert rows["mmap-off"]["gates"] == {"startup": "pass", "golden": "pass"}
    # Gate 1's canaries catch the commas; the run fails fast (golden is not run).
    assert rows["fused-norm"]["gates"] == {"startup": "fail", "golden": "skip"}
    assert rows["fused-norm"]["matrix"]["norm_dtype"] == "bf16"
    assert "Execution-path matrix" in proc.stdout  # the table people read


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_green_health_with_every_completion_hung_fails_the_whole_gate_in_bounded_time(
    clean_engine: RunningEngine, engine_factory: Callable[..., RunningEngine], tmp_path: Path
) -> None:
    """FAULTS 23 through a whole `servegate gate` (every gate, default suite): the candidate's
    health check is green — GET /v1/models answers 200 with the model (llama-cpp-python's
    server has no /health; a load balancer probes this) — but no completion ever gets headers
    (the scheduler loop of vLLM #35541). Startup's real 1-token completion times out, the run
    fails (exit 1, never a pass, never merely inconclusive) and ends within its deadlines."""
    import time
    import urllib.request

    # Every prompt longer than one character hangs (the engine's own start-up check is shorter).
    with engine_factory("clean", "hang-long", threshold_chars=1) as candidate:
        with urllib.request.urlopen(candidate.base_url + "/models", timeout=10) as answer:
            assert answer.status == 200
            assert json.loads(answer.read())["data"]
        out = tmp_path / "report.json"
        began = time.monotonic()
        proc = servegate(
            *("gate", "--baseline", clean_engine.base_url, "--candidate", candidate.base_url),
            *("--probe-deadline-s", "5", "--deadline-s", "5", "--run-deadline-s", "400"),
            *("--json", str(out), "--db", str(tmp_path / "runs.db"), "--quiet"),
            timeout_s=500,
        )  # fmt: skip
        took = time.monotonic() - began
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(out.read_text())
    gates = {g["name"]: g for g in report["gates"]}
    print(f"{took:.0f} s", {n: g["status"] for n, g in gates.items()}, report["reason"][:200])
    assert (proc.returncode, report["verdict"]) == (1, "fail")
    assert gates["startup"]["status"] == "fail"
    hung = [f for f in gates["startup"]["findings"] if f["category"] == "timeout"]
    assert hung, gates["startup"]["findings"]
    assert all(g["status"] != "pass" for n, g in gates.items() if n != "startup")
    assert "run deadline" not in report["reason"]  # judged, not cut off
    assert took < 400
