"""No secret of a `launch` block reaches the run database: key-like flags in its command and
every value of its environment are hidden before a run or a baseline is stored (names kept),
so `baseline show --json` and a resume refusal cannot print them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servegate.cli.baseline_cmd import baseline
from servegate.cli.gate_resume import resumed_config
from servegate.config.loader import ConfigError
from servegate.config.models import GateConfig
from servegate.store.baselines import StoredBaseline, save_baseline
from servegate.store.resume import load_resume_point
from servegate.store.writer import RunWriter, open_engine

SECRETS = ("sk-flag-7c1d", "tok-eq-93ab", "pw-shell-55e0", "hf-env-a1b2", "plain-env-c3d4")


def _config(env_value: str = "hf-env-a1b2") -> GateConfig:
    launch = {
        "command": ["vllm", "serve", "m", "--api-key", "sk-flag-7c1d", "--hf-token=tok-eq-93ab",
                    "--max-tokens", "64", "--port", "{port}"],
        "env": {"HF_TOKEN": env_value, "CUDA_VISIBLE_DEVICES": "plain-env-c3d4"},
    }  # fmt: skip
    shell = {"command": ["sh", "-c", "exec engine --password pw-shell-55e0 --port {port}"]}
    return GateConfig.model_validate(
        {"baseline": {"launch": launch}, "candidate": {"launch": shell}, "gates": ["startup"]}
    )


def _dump(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return "\n".join(conn.iterdump())


def _start(db: Path, cfg: GateConfig) -> str:
    return RunWriter.start(open_engine(db), baseline_url="http://b/v1", candidate_url="http://c/v1",
                           model="m", config=cfg.model_dump(mode="json")).run_id  # fmt: skip


def test_a_stored_run_and_baseline_keep_names_but_no_secret_of_a_launch_block(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    cfg = _config()
    run_id = _start(db, cfg)
    save_baseline(open_engine(db), StoredBaseline(
        name="v1", run_id=run_id, created_at="2026-12-01T10:00:00+00:00",
        endpoint_url="http://b/v1", model="m", fingerprints={},
        config=cfg.model_dump(mode="json"),
    ))  # fmt: skip
    shown = CliRunner().invoke(baseline, ["show", "v1", "--db", str(db), "--json"])
    assert shown.exit_code == 0, shown.output
    texts = {"database": _dump(db), "baseline show": shown.output}
    for secret in SECRETS:
        assert [n for n, t in texts.items() if secret in t] == [], secret
    launch: dict[str, Any] = json.loads(shown.output)["config"]["baseline"]["launch"]
    assert launch["command"] == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***",
                                 "--max-tokens", "64", "--port", "{port}"]  # fmt: skip
    assert launch["env"] == {"HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "***"}
    assert "--password *** --port {port}" in texts["database"]


def test_resume_of_a_launch_run_needs_its_configuration_and_never_prints_a_secret(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    run_id = _start(db, _config())
    with sqlite3.connect(db) as conn:
        conn.execute("update runs set state = 'crashed' where id = ?", (run_id,))
    point = load_resume_point(open_engine(db), run_id)
    # Alone, the stored configuration cannot start the engines again: its secrets are gone.
    with pytest.raises(ConfigError, match="give the configuration that started it") as alone:
        resumed_config(point, None, run_deadline_s=None)
    # With the same configuration the run continues with the real values.
    again = resumed_config(point, _config(), run_deadline_s=None)
    assert again.baseline.launch is not None
    assert again.baseline.launch.env["HF_TOKEN"] == "hf-env-a1b2"
    # A different command is refused, and the refusal shows no secret.
    other = _config().model_copy(update={"gates": ("startup", "golden")})
    with pytest.raises(ConfigError) as refused:
        resumed_config(point, other, run_deadline_s=None)
    for secret in SECRETS:
        assert secret not in str(refused.value) + str(alone.value)
