"""`servegate proxy` refuses what cannot work with one line and exit 2, before it listens."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.proxy_cmd import proxy_command

P, C = "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"


def test_help_explains_the_mirror_and_its_endpoints() -> None:
    result = CliRunner().invoke(proxy_command, ["--help"])
    assert result.exit_code == 0
    for words in ("/servegate/metrics", "/servegate/healthz", "/servegate/sampled", "--sample",
                  "bounded queue",
                  "never reaches the candidate", "redacted"):  # fmt: skip
        assert words in " ".join(result.output.split()), words


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--candidate-key-env", "SERVEGATE_TEST_UNSET_VAR"],
            "SERVEGATE_TEST_UNSET_VAR is not set",
        ),
        (["--mode", "canary", "--steps", "1,abc"], "--steps '1,abc': not a comma-separated"),
        (["--mode", "canary", "--steps", "10,50"], "--steps 10,50: the last step must be 100"),
        (["--mode", "canary", "--interval", "soon"], "--interval 'soon': not a duration"),
        (["--steps", "1,100"], "--steps applies to --mode canary only"),
        (["--interval", "5s"], "--interval applies to --mode canary only"),
        (["--candidate", "http://u:secretpw@h/v1"], "must not carry credentials"),
        (["--candidate", P], "the same upstream"),
        (["--listen", "nowhere"], "expected HOST:PORT"),
    ],
    ids=[
        "key-env-unset",
        "canary-steps-not-numbers",
        "canary-steps-short-of-100",
        "canary-interval",
        "steps-in-shadow",
        "interval-in-shadow",
        "credentials",
        "same-upstream",
        "listen",
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVEGATE_TEST_UNSET_VAR", raising=False)
    base = {"--primary": P, "--candidate": C, "--db": str(tmp_path / "p.db")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = [a for pair in base.items() for a in pair]
    result = CliRunner().invoke(proxy_command, argv)
    assert result.exit_code == 2
    assert message in result.output
    assert "secretpw" not in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("first", "second"), [("shadow", "canary"), ("canary", "shadow")])
def test_a_session_started_in_another_mode_is_refused_in_one_line(
    tmp_path: Path, first: str, second: str
) -> None:
    from servegate.store.proxy_records import ProxyRecorder
    from servegate.store.writer import open_engine

    db = tmp_path / "p.db"
    engine = open_engine(db)
    try:
        ProxyRecorder.open(engine, "s1", mode=first, primary_url=P, candidate_url=C, config={})
    finally:
        engine.dispose()
    argv = ["--primary", P, "--candidate", C, "--db", str(db), "--session", "s1"]
    result = CliRunner().invoke(proxy_command, [*argv, "--mode", second])
    assert result.exit_code == 2, result.output
    assert f"proxy session 's1' was started in {first} mode, not {second}" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_bad_policy_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("canary:\n  min_requests: -3\n")
    argv = ["--primary", P, "--candidate", C, "--db", str(tmp_path / "p.db")]
    result = CliRunner().invoke(proxy_command, [*argv, "--mode", "canary", "--policy", str(policy)])
    assert result.exit_code == 2, result.output
    assert "--policy:" in result.output
    assert "canary.min_requests" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_resumed_canary_with_other_steps_is_refused(tmp_path: Path) -> None:
    from servegate.canary.controller import Controller
    from servegate.canary.plan import parse_plan
    from servegate.canary.record import open_canary_session
    from servegate.config.models import Policy
    from servegate.store.canary import CanaryDecision, record_decision
    from servegate.store.writer import open_engine

    db = tmp_path / "p.db"
    engine = open_engine(db)
    try:
        plan = parse_plan("1,10,100", "60s")
        recorder, _ = open_canary_session(engine, "s1", plan, primary_url=P, candidate_url=C)
        controller = Controller(plan, Policy(), recorder=recorder)
        decision = CanaryDecision("2026-12-01T00:00:00", 0, 1.0, "promote", 100.0, {})
        record_decision(engine, "s1", decision, controller.state())
    finally:
        engine.dispose()
    argv = ["--primary", P, "--candidate", C, "--db", str(db), "--session", "s1", "--mode"]
    result = CliRunner().invoke(proxy_command, [*argv, "canary", "--steps", "5,100"])
    assert result.exit_code == 2, result.output
    assert "the saved canary ran with steps 1,10,100" in result.output
    assert len(result.output.strip().splitlines()) == 1


NEWLINE_KEY = "sk-proxy-newline-canary-5e1d"


@pytest.mark.parametrize(
    ("option", "value"),
    [("--candidate-key-env", f"{NEWLINE_KEY}\n"), ("--candidate-key-env", f"{NEWLINE_KEY}\r\n"),
     ("--admin-token-env", f"{NEWLINE_KEY}\n")],
    ids=["candidate-key-lf", "candidate-key-crlf", "admin-token-lf"],
)  # fmt: skip
def test_a_key_with_a_line_break_is_refused_at_start_naming_the_variable(
    tmp_path: Path, option: str, value: str
) -> None:
    """FAULTS 61: a key read from a secret file keeps its trailing newline. Taken as it is, every
    request routed to the candidate raised in aiohttp (a 500 for the user, never counted against
    the candidate). The proxy, started as a user starts it, refuses at start: exit 2, one line,
    the variable's name and never its value."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "SERVEGATE_TEST_PROXY_KEY": value}
    done = subprocess.run(
        [sys.executable, "-m", "servegate", "proxy", "--primary", P, "--candidate", C,
         "--mode", "canary", "--db", str(tmp_path / "p.db"), "--listen", "127.0.0.1:0",
         "--admin-listen", "127.0.0.1:0", option, "SERVEGATE_TEST_PROXY_KEY"],
        capture_output=True, text=True, env=env, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""  # it never listened
    [line] = done.stderr.strip().splitlines()
    assert "SERVEGATE_TEST_PROXY_KEY" in line
    assert "line break" in line
    assert NEWLINE_KEY not in done.stderr


def test_a_shadow_proxys_policy_is_read_and_a_bad_one_named_before_it_listens(
    tmp_path: Path,
) -> None:
    # --policy applies in shadow mode too: its sampling.* keys judge /servegate/sampled
    policy = tmp_path / "policy.yaml"
    policy.write_text("sampling:\n  alpha: 2\n")
    argv = ["--primary", P, "--candidate", C, "--db", str(tmp_path / "p.db"),
            "--policy", str(policy)]  # fmt: skip
    result = CliRunner().invoke(proxy_command, argv)
    assert result.exit_code == 2
    assert result.output.startswith("servegate: error: --policy: ")
    assert "sampling.alpha" in result.output
    assert result.output.count("\n") == 1
