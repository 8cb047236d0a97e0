"""What a matrix entry asks a Ray cluster for (`servegate matrix --ray`), and whether a cluster
can place it. The cluster itself is real in tests/integration/test_matrix_ray.py (-m ray)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servegate.config.loader import ConfigError
from servegate.config.matrix import load_matrix
from servegate.orchestration.ray_matrix import placeable


def _entry(tmp_path: Path, **fields: object) -> dict[str, float]:
    path = tmp_path / "matrix.yaml"
    entry = {"name": "e", "url": "http://127.0.0.1:8/v1", **fields}
    path.write_text(yaml.safe_dump({"baseline": {"url": "http://127.0.0.1:9/v1"},
                                    "entries": [entry]}))  # fmt: skip
    [loaded] = load_matrix(path).entries
    return loaded.needs()


@pytest.mark.parametrize(
    ("fields", "needs"),
    [
        ({}, {"CPU": 1}),
        ({"tp": 2}, {"CPU": 1, "GPU": 2}),
        ({"tp": 2, "pp": 2}, {"CPU": 1, "GPU": 4}),
        ({"pp": 3}, {"CPU": 1, "GPU": 3}),
        ({"tp": 8, "resources": {"gpus": 1, "cpus": 4}}, {"CPU": 4, "GPU": 1}),
        ({"tp": 2, "resources": {"accelerator_type": "H200", "custom": {"nvlink": 1}}},
         {"CPU": 1, "GPU": 2, "accelerator_type:H200": 0.001, "nvlink": 1}),
        ({"resources": {"cpus": 0, "custom": {"fake_gpu": 1}}}, {"fake_gpu": 1}),
    ],
    ids=["nothing", "tp", "tp-x-pp", "pp", "explicit", "accelerator-custom", "custom-only"],
)  # fmt: skip
def test_an_entry_asks_for_tp_times_pp_gpus_unless_its_resources_block_says_otherwise(
    tmp_path: Path, fields: dict[str, object], needs: dict[str, float]
) -> None:
    assert _entry(tmp_path, **fields) == needs


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"gpu": 1}, "entries.0.resources.gpu: Extra inputs are not permitted"),
        ({"custom": {"GPU": 2}}, "custom.GPU: give it as cpus/gpus, not as a custom resource"),
        ({"custom": {"fake_gpu": 0}}, "custom.fake_gpu: a resource amount must be above 0"),
        ({"gpus": -1}, "entries.0.resources.gpus: Input should be greater than or equal to 0"),
    ],
    ids=["unknown-key", "gpu-as-custom", "zero-custom", "negative"],
)
def test_a_bad_resources_block_is_one_line_naming_it(
    tmp_path: Path, resources: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _entry(tmp_path, resources=resources)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_entry_is_placeable_when_one_node_alone_has_everything_it_asks_for() -> None:
    nodes = [{"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0, "GPU": 2.0, "accelerator_type:H200": 1.0}]
    assert placeable({"CPU": 1, "GPU": 2}, nodes)
    assert placeable({"GPU": 2, "accelerator_type:H200": 0.001}, nodes)
    # Four GPUs in all, but never four on one node: Ray cannot place it.
    assert not placeable({"GPU": 4}, nodes)
    assert not placeable({"GPU": 1, "accelerator_type:B200": 0.001}, nodes)
    assert not placeable({"CPU": 1}, [])  # no node alive


# --- `servegate matrix FILE --collect ID`: the table from the store alone ---------------------


def test_collect_shows_a_ray_matrix_from_the_store_while_its_entries_still_run(
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from servegate.cli.matrix_cmd import matrix
    from servegate.orchestration.ray_matrix import entry_run_name
    from servegate.store.writer import RunWriter, open_engine
    from servegate.verdict.model import Fingerprint, GateResult, Report, Status

    path = tmp_path / "matrix.yaml"
    entries = [{"name": n, "url": f"http://127.0.0.1:{p}/v1"}
               for n, p in (("a", 8), ("b", 7), ("c", 6))]  # fmt: skip
    path.write_text(yaml.safe_dump({"baseline": {"url": "http://127.0.0.1:9/v1"},
                                    "entries": entries}))  # fmt: skip
    db = tmp_path / "runs.db"
    engine = open_engine(str(db))

    def started(entry: str, matrix_id: str = "m1") -> RunWriter:
        return RunWriter.start(engine, baseline_url="http://127.0.0.1:9/v1",
                               candidate_url="http://c/v1", model=None, config={},
                               name=entry_run_name(entry, matrix_id))  # fmt: skip

    done = started("a")
    fp = Fingerprint(url="http://127.0.0.1:9/v1")
    golden = GateResult(name="golden", status=Status.PASS, summary="ok")
    done.finish(Report(tool="servegate test", run_id=done.run_id, started_at="t0",
                       finished_at="t1", duration_s=1.0, verdict=Status.PASS, exit_code=0,
                       reason="passed", baseline=fp, candidate=fp, gates=(golden,)))  # fmt: skip
    running = started("b")
    started("c", "another-matrix").stop_heartbeat()  # another matrix's run of the same entry
    try:
        result = CliRunner().invoke(matrix, [str(path), "--collect", "m1", "--db", str(db),
                                             "--json", str(tmp_path / "m.json")])  # fmt: skip
    finally:
        running.stop_heartbeat()
    assert result.exit_code == 3, result.output  # no verdict until every entry finished
    rows = {r["entry"]: r for r in yaml.safe_load((tmp_path / "m.json").read_text())}
    assert (rows["a"]["verdict"], rows["a"]["gates"]) == ("pass", {"golden": "pass"})
    assert rows["b"]["verdict"] is None
    assert rows["b"]["error"].startswith(f"running (run {running.run_id}, attempt 1)")
    assert rows["c"]["error"] == "not started"


def test_collect_runs_nothing_so_it_refuses_ray_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from servegate.cli.matrix_cmd import matrix

    path = tmp_path / "matrix.yaml"
    entry = {"name": "e", "url": "http://127.0.0.1:8/v1"}
    path.write_text(yaml.safe_dump({"baseline": {"url": "http://127.0.0.1:9/v1"},
                                    "entries": [entry]}))  # fmt: skip
    result = CliRunner().invoke(matrix, [str(path), "--collect", "m1", "--ray", "auto",
                                         "--db", str(tmp_path / "r.db")])  # fmt: skip
    assert result.exit_code == 2
    assert "--collect reads a matrix's runs from --db; it runs nothing: drop --ray" in result.output
    assert not (tmp_path / "r.db").exists()
