from __future__ import annotations

import pytest
from click.testing import CliRunner

from servegate.cli.engine_cmd import engine


def test_variants_lists_every_variant_and_fault_with_a_description() -> None:
    result = CliRunner().invoke(engine, ["variants"])
    assert result.exit_code == 0
    for name in ("clean", "mixed-dtype", "drift", "mmap-off", "hang-long"):
        assert any(
            line.split()[:1] == [name] and len(line.split()) > 2
            for line in result.output.splitlines()
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--variant", "nope"], "unknown variant 'nope'"),
        (["serve", "--fault", "nope"], "unknown fault 'nope'"),
    ],
    ids=["unknown-variant", "unknown-fault"],
)
def test_serve_refuses_unknown_names_with_one_line_and_exit_2(
    args: list[str], message: str
) -> None:
    result = CliRunner().invoke(engine, args)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
