"""`baseline: {launch: …, shared: node}`: the matrix file's word for one launched baseline per node,
checked before anything runs; what an entry asks a Ray node for when it shares one; the GPUs its
candidate keeps; and the baseline as another process of its node receives it. The launches
themselves are real in tests/integration/test_matrix_shared_baseline.py and
tests/integration/test_matrix_ray.py (-m ray)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from servegate.cli.matrix_cmd import matrix
from servegate.config.loader import ConfigError
from servegate.config.matrix import MatrixFile, load_matrix
from servegate.config.models import EndpointConfig, LaunchConfig
from servegate.managed.launch_evidence import LaunchEvidence, LaunchOutcome, LogHit
from servegate.managed.launcher import Managed
from servegate.orchestration.ray_baseline import candidate_devices, shared_of, with_baseline
from servegate.orchestration.ray_matrix import _needs
from servegate.orchestration.shared_baseline import SharedBaseline, with_devices
from servegate.verdict.model import Severity

LAUNCH = {"command": ["engine", "--port", "{port}"]}
BAD_WORD = "baseline.shared: Input should be 'entry' or 'node'"
ENTRY = {"name": "e", "url": "http://127.0.0.1:8/v1", "resources": {"gpus": 2}}


def _load(tmp_path: Path, baseline: dict[str, object]) -> MatrixFile:
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump({"baseline": baseline, "entries": [ENTRY]}))
    return load_matrix(path)


@pytest.mark.parametrize(
    ("baseline", "message"),
    [
        ({"launch": LAUNCH, "shared": "nodes"}, BAD_WORD),
        ({"launch": LAUNCH, "shared": True}, BAD_WORD),
        ({"url": "http://127.0.0.1:9/v1", "shared": "node"},
         "shared: node shares a launched baseline: give a launch block (a url is already shared "
         "by every entry)"),
        ({"launch": LAUNCH, "resources": {"gpus": 1}},
         "resources: only a baseline with shared: node asks for its own"),
        ({"launch": LAUNCH, "shared": "node", "resources": {"gpu": 1}},
         "baseline.resources.gpu: Extra inputs are not permitted"),
    ],
    ids=["unknown-word", "not-a-word", "shared-url", "resources-per-entry", "bad-resources"],
)  # fmt: skip
def test_a_bad_shared_baseline_is_one_line_naming_it_before_anything_runs(
    tmp_path: Path, baseline: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, baseline)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    result = CliRunner().invoke(matrix, [str(tmp_path / "matrix.yaml"),
                                         "--db", str(tmp_path / "runs.db")])  # fmt: skip
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs.db").exists()


def test_a_launched_baseline_is_still_one_per_entry_unless_the_file_says_shared_node(
    tmp_path: Path,
) -> None:
    default = _load(tmp_path, {"launch": LAUNCH})
    assert default.baseline is not None
    assert (default.baseline.shared, default.shared_per_node) == ("entry", False)
    assert _needs(default, default.entries[0]) == {"CPU": 1, "GPU": 2}
    shared = _load(tmp_path, {"launch": LAUNCH, "shared": "node"})
    assert shared.shared_per_node
    # Each entry's run gets the plain endpoint: the matrix's own words are not run settings.
    cfg = shared.config(shared.entries[0], "matrix.yaml")
    assert type(cfg.baseline) is EndpointConfig
    assert cfg.baseline.launch is not None
    assert cfg.baseline.launch.command == ("engine", "--port", "{port}")


def test_an_entry_sharing_its_nodes_baseline_asks_for_both_so_both_always_fit(
    tmp_path: Path,
) -> None:
    none_given = _load(tmp_path, {"launch": LAUNCH, "shared": "node"})
    assert _needs(none_given, none_given.entries[0]) == {"CPU": 1, "GPU": 2}  # nothing reserved
    resources = {"gpus": 1, "cpus": 0, "custom": {"nvlink": 1}}
    given = _load(tmp_path, {"launch": LAUNCH, "shared": "node", "resources": resources})
    assert _needs(given, given.entries[0]) == {"CPU": 1, "GPU": 3, "nvlink": 1}
    assert with_baseline({"GPU": 1}, {}) == {"GPU": 1}


@pytest.mark.parametrize(
    ("assigned", "baseline", "count", "own"),
    [
        (["0", "1"], ["1"], 1, ["0"]),  # the first entry: it spared its last GPU
        (["1", "0"], ["1"], 1, ["0"]),  # a later entry given the baseline's GPU among its own
        (["2", "3"], ["1"], 1, ["2"]),  # a later entry beside it: one of its two stays idle
        (["4", "5", "6", "7"], ["6", "7"], 2, ["4", "5"]),
        (["0", "1"], [""], 2, ["0", "1"]),  # a baseline on no GPU
    ],
)  # fmt: skip
def test_a_candidate_never_gets_a_gpu_its_nodes_baseline_uses(
    assigned: list[str], baseline: list[str], count: int, own: list[str]
) -> None:
    assert candidate_devices(assigned, baseline, count) == own


def test_the_baseline_launch_gets_the_spared_gpus_unless_its_env_names_them() -> None:
    endpoint = EndpointConfig.model_validate({"launch": LAUNCH})
    placed = with_devices(endpoint, ["3"])
    assert placed.launch is not None
    assert placed.launch.env == {"CUDA_VISIBLE_DEVICES": "3"}
    assert with_devices(endpoint, []) == endpoint
    own = EndpointConfig.model_validate(
        {"launch": {**LAUNCH, "env": {"CUDA_VISIBLE_DEVICES": "0"}}}
    )
    assert with_devices(own, ["3"]) == own


def test_an_entry_in_another_process_gets_the_same_baseline_with_its_evidence() -> None:
    hit = LogHit(pattern="p", kind="fallback", severity=Severity.MINOR, line_no=3, line="x")
    evidence = LaunchEvidence(side="baseline", command="engine --port '{port}'",
                              log_path="/runs/b/baseline.log", outcome=LaunchOutcome.READY,
                              message="ready in 2.00 s", timeout_s=300.0, pid=4242, ready_s=2.0,
                              hits=(hit,), engine={"dtype": "bf16"})  # fmt: skip
    managed = Managed(side="baseline", url="http://127.0.0.1:4000/v1",
                      argv=["engine", "--port", "4000"],
                      env={"A": "1", "SECRET_ELSEWHERE": "no"},
                      launch=LaunchConfig(command=("engine",), env={"A": "1"}),
                      evidence=evidence)  # fmt: skip
    got = shared_of(SharedBaseline(managed, "host (node 1234abcd)").to_json())
    assert isinstance(got, SharedBaseline)
    assert got.managed.evidence == evidence
    assert (got.managed.url, got.managed.argv, got.managed.env["A"]) == (
        managed.url, managed.argv, "1",
    )  # fmt: skip
    assert got.managed.process is None  # nothing for the entry to stop: its own process does
    assert got.info() == {"node": "host (node 1234abcd)", "url": "http://127.0.0.1:4000/v1",
                          "pid": 4242, "ready_s": 2.0, "outcome": "ready",
                          "log": "/runs/b/baseline.log"}  # fmt: skip
    assert shared_of("") == "the node's baseline process ended at start-up"
    assert shared_of("error: lost") == "lost"
