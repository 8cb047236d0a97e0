"""Bad input is one line and exit code 2, never a traceback or exit 4: a configuration, policy
or log-pattern file that is not UTF-8, a --run-dir servegate cannot write (checked before any
engine is launched), nan or inf in a numeric option or a policy key."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.main import _register, cli

NOT_UTF8 = b"gates: [startup]\n# caf\xe9 \xff\xfe\n"


def _invoke(*args: str) -> tuple[int, list[str]]:
    _register()
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result.exit_code, result.output.strip().splitlines()


def _launch_config(tmp_path: Path, **extra: object) -> Path:
    marker = tmp_path / "launched"
    config = {
        "baseline": {"launch": {"command": ["touch", str(marker)], "ready_timeout_s": 5}},
        "candidate": {"url": "http://127.0.0.1:9/v1"},
        "gates": ["startup"],
        **extra,
    }
    path = tmp_path / "gate.yaml"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("option", ["--config", "--policy", "--log-patterns"])
def test_a_file_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path, option: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(NOT_UTF8)
    args = ["gate", option, str(bad), "--no-store", "--quiet"]
    if option != "--config":
        args += ["--config", str(_launch_config(tmp_path, run_dir=str(tmp_path / "runs")))]
    code, lines = _invoke(*args)
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith(f"servegate: error: {bad}: not UTF-8 text"), lines
    assert not (tmp_path / "launched").exists()


def test_a_run_dir_that_cannot_be_written_is_refused_before_launching(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    config = _launch_config(tmp_path, run_dir=str(a_file / "runs"))
    code, lines = _invoke("gate", "--config", str(config), "--no-store", "--quiet")
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith(f"servegate: error: --run-dir {a_file / 'runs'}: cannot write"), (
        lines
    )
    assert not (tmp_path / "launched").exists()  # nothing was started


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize(
    "args",
    [
        ["gate", "--baseline", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:8/v1",
         "--no-store", "--deadline-s"],
        ["probe", "http://127.0.0.1:9/v1", "--deadline-s"],
        ["bench", "--endpoint", "http://127.0.0.1:9/v1", "--duration-s"],
        ["bench", "--endpoint", "http://127.0.0.1:9/v1", "--rate"],
        ["gate", "--baseline", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:8/v1",
         "--no-store", "--run-deadline-s"],
    ],
    ids=["gate", "probe", "bench", "bench-rate", "gate-run-deadline"],
)  # fmt: skip
def test_nan_or_inf_in_a_numeric_option_is_one_line(args: list[str], value: str) -> None:
    code, lines = _invoke(*args, value)
    assert code == 2, lines
    assert any("finite number" in line for line in lines), lines


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_or_inf_in_a_policy_key_is_one_line_naming_it(tmp_path: Path, value: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"perplexity_z_max: {value}\n")
    code, lines = _invoke("gate", "--baseline", "http://127.0.0.1:9/v1", "--candidate",
                          "http://127.0.0.1:8/v1", "--policy", str(policy),
                          "--no-store")  # fmt: skip
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith(f"servegate: error: {policy}: perplexity_z_max: "), lines
    assert "finite" in lines[0]


def test_a_capture_file_that_cannot_be_written_is_refused_before_serving(tmp_path: Path) -> None:
    # Issue 20 item 18: an unwritable --capture was found on the first request. /proc refuses
    # new files even to root.
    code, lines = _invoke(
        "proxy", "--primary", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:8/v1",
        "--store-bodies", "full", "--capture", "/proc/servegate-capture.jsonl",
        "--db", str(tmp_path / "proxy.db"),
    )  # fmt: skip
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith("servegate: error: --capture /proc: cannot write"), lines


# Issue 28 item 9: bad input that misled. Each case is one line and exit 2, found before any
# server is contacted and before any file or folder is created.


@pytest.fixture
def servers() -> Iterator[tuple[str, str, Callable[[], int]]]:
    """Two loopback ports that listen and never accept: base URLs for two sides, and a count
    of the connections anyone made to them."""
    sockets = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    for s in sockets:
        s.setblocking(False)

    def connections() -> int:
        made = 0
        for s in sockets:
            with contextlib.suppress(BlockingIOError):
                while True:
                    conn, _ = s.accept()
                    conn.close()
                    made += 1
        return made

    urls = [f"http://127.0.0.1:{s.getsockname()[1]}/v1" for s in sockets]
    try:
        yield urls[0], urls[1], connections
    finally:
        for s in sockets:
            s.close()


@pytest.mark.parametrize("deadline", ["-1", "0"])
def test_probe_refuses_a_deadline_that_is_not_positive_before_asking_the_server(
    servers: tuple[str, str, Callable[[], int]], deadline: str
) -> None:
    url, _, connections = servers
    code, lines = _invoke("probe", url, "--deadline-s", deadline)
    assert (code, lines) == (
        2,
        [f"servegate: error: --deadline-s: {float(deadline):g} must be > 0 (seconds per probe "
         "request)"],
    )  # fmt: skip
    assert connections() == 0


BAD_YAML = "probes: [\n"


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--suite", "bad.yaml", "servegate: error: {tmp}/bad.yaml:2: invalid YAML: "),
        ("--category", "canaries", "servegate: error: category 'canaries': no probe of the "
         "suite default has it (its categories: canary, arithmetic, "),
        ("--log-patterns", "bad.yaml", "servegate: error: {tmp}/bad.yaml: line 2: invalid YAML: "),
    ],
    ids=["suite", "category", "log-patterns"],
)  # fmt: skip
def test_gate_finds_a_bad_suite_category_or_log_pattern_file_before_anything_is_contacted(
    servers: tuple[str, str, Callable[[], int]],
    tmp_path: Path,
    option: str,
    value: str,
    expected: str,
) -> None:
    baseline, candidate, connections = servers
    (tmp_path / "bad.yaml").write_text(BAD_YAML)
    arg = str(tmp_path / value) if value.endswith(".yaml") else value
    db = tmp_path / "store" / "runs.db"
    code, lines = _invoke("gate", "--baseline", baseline, "--candidate", candidate,
                          option, arg, "--db", str(db), "--quiet")  # fmt: skip
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith(expected.format(tmp=tmp_path)), lines
    assert connections() == 0
    assert not db.parent.exists()  # no database and no folder for it


def test_baseline_record_finds_a_bad_suite_before_the_endpoint_or_the_database(
    servers: tuple[str, str, Callable[[], int]], tmp_path: Path
) -> None:
    url, _, connections = servers
    (tmp_path / "bad.yaml").write_text(BAD_YAML)
    db = tmp_path / "store" / "runs.db"
    code, lines = _invoke("baseline", "record", "--endpoint", url, "--name", "b",
                          "--suite", str(tmp_path / "bad.yaml"), "--db", str(db))  # fmt: skip
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith(f"servegate: error: {tmp_path}/bad.yaml:2: invalid YAML"), lines
    assert connections() == 0
    assert not db.parent.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["runs"],
        ["baseline", "list"],
        ["baseline", "show", "nightly"],
        ["baseline", "delete", "nightly"],
        ["report", "abcd1234"],
        ["diff", "abcd1234", "bcde2345"],
    ],
    ids=["runs", "baseline-list", "baseline-show", "baseline-delete", "report", "diff"],
)
@pytest.mark.parametrize("form", ["path", "sqlite-url"])
def test_a_read_given_a_mistyped_database_creates_nothing(
    tmp_path: Path, args: list[str], form: str
) -> None:
    typo = tmp_path / "servgate" / "servegate.db"
    db = str(typo) if form == "path" else f"sqlite:///{typo}"
    code, lines = _invoke(*args, "--db", db)
    assert (code, lines) == (
        2,
        [f"servegate: error: no run database at {typo} (nothing was created): --db names an "
         "existing one"],
    )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_baseline_record_names_the_option_once_for_a_bad_endpoint(tmp_path: Path) -> None:
    code, lines = _invoke("baseline", "record", "--endpoint", "notaurl", "--name", "b",
                          "--db", str(tmp_path / "runs.db"))  # fmt: skip
    assert (code, lines) == (
        2,
        ["servegate: error: --endpoint: Value error, must start with http:// or https://, got "
         "'notaurl'"],
    )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--deadline-s", "-1"], "--deadline-s: Input should be greater than 0"),
        (["--probe-deadline-s", "0"], "--probe-deadline-s: Input should be greater than 0"),
        (["--impossible-words", "3"],
         "--impossible-words: Input should be greater than or equal to 16"),
    ],
    ids=["deadline", "probe-deadline", "impossible-words"],
)  # fmt: skip
def test_gate_names_the_option_the_user_typed_not_the_config_key(
    args: list[str], expected: str
) -> None:
    code, lines = _invoke("gate", "--baseline", "http://127.0.0.1:9/v1", "--candidate",
                          "http://127.0.0.1:8/v1", "--no-store", *args)  # fmt: skip
    assert (code, lines) == (2, [f"servegate: error: {expected}"])


def test_gate_names_the_config_file_key_for_a_value_from_the_file(tmp_path: Path) -> None:
    config = tmp_path / "gate.yaml"
    config.write_text(
        "baseline: {url: http://127.0.0.1:9/v1}\ncandidate: {url: http://127.0.0.1:8/v1}\n"
        "request_deadline_s: -1\n"
    )
    code, lines = _invoke("gate", "--config", str(config), "--no-store")
    assert (code, lines) == (
        2,
        [f"servegate: error: {config}: request_deadline_s: Input should be greater than 0"],
    )


def test_replays_bad_policy_is_one_line_before_anything_is_sent(tmp_path: Path) -> None:
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text('{"messages": [{"role": "user", "content": "hi"}], "temperature": 1}\n')
    policy = tmp_path / "policy.yaml"
    policy.write_text("sampling:\n  min_expected: 0\n")
    # unreachable upstreams: had anything been sent, the error would be another one
    code, lines = _invoke(
        "replay", str(traffic), "--baseline", "http://127.0.0.1:9/v1",
        "--candidate", "http://127.0.0.1:9/x/v1", "--policy", str(policy),
    )  # fmt: skip
    assert code == 2
    assert len(lines) == 1
    assert lines[0].startswith("servegate: error: --policy: ")
    assert "sampling.min_expected" in lines[0]
