from pathlib import Path

import pytest

from servegate.config.loader import ConfigError
from servegate.probes import SuiteError, load_suite

GOOD = """\
name: mini
version: 1
probes:
  - id: canary-ok
    category: canary
    request:
      messages: [{role: user, content: "Reply with exactly: OK"}]
      max_tokens: 8
    assert:
      - {type: equals, value: OK}
  - id: sum
    category: arithmetic
    request:
      messages: [{role: user, content: "2+2?"}]
    assert:
      - type: regex
        pattern: "4"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_suite_loads_with_greedy_defaults(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, GOOD))
    assert [p.id for p in suite.probes] == ["canary-ok", "sum"]
    assert suite.probes[0].request["temperature"] == 0
    assert suite.probes[0].api == "chat"
    assert suite.probes[0].severity == "major"


def test_an_explicit_temperature_is_kept(tmp_path: Path) -> None:
    text = GOOD.replace("max_tokens: 8", "max_tokens: 8\n      temperature: 0.7")
    assert load_suite(write(tmp_path, text)).probes[0].request["temperature"] == 0.7


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "category: canary",
            "category: canary\n    severty: critical",
            ":6: probes[0].severty: unknown key",
        ),
        (
            "{type: equals, value: OK}",
            "{type: equals, valu: OK}",
            ":10: probes[0].assert[0].valu: unknown key",
        ),
        (
            "{type: equals, value: OK}",
            "{type: equal, value: OK}",
            ":10: probes[0].assert[0].type: Input tag 'equal'",
        ),
        (
            "{type: equals, value: OK}",
            "{value: OK}",
            ":10: probes[0].assert[0].type: Unable to extract tag",
        ),
        (
            "max_tokens: 8",
            "max_tokens: 8\n      model: gpt",
            ":6: probes[0].request: leave out 'model'",
        ),
        ("version: 1", "version: one", ":2: version: Input should be a valid integer"),
        (
            '        pattern: "4"',
            '        pattern: "("',
            ":17: probes[1].assert[0].pattern: invalid regular expression",
        ),
        ("id: sum", "id: canary-ok", ":11: probes[1].id: duplicate probe id 'canary-ok'"),
        ("id: sum", "id: Sum Probe", ":11: probes[1].id: String should match pattern"),
        ("    category: arithmetic\n", "", ":11: probes[1].category: required key is missing"),
        ("name: mini", "name: mini\nname: other", ":2: name: duplicate key"),
    ],
    ids=[
        "misspelt-probe-key",
        "misspelt-assertion-key",
        "unknown-assertion-type",
        "assertion-without-type",
        "model-in-request",
        "wrong-type",
        "bad-regex",
        "duplicate-probe-id",
        "bad-probe-id",
        "missing-key",
        "duplicate-yaml-key",
    ],
)
def test_errors_name_the_file_line_and_config_path(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert f"{path}{expected}" in str(info.value)


def test_a_python_tag_is_an_error_and_never_constructed(tmp_path: Path) -> None:
    text = GOOD.replace("name: mini", "name: !!python/object/apply:os.system ['touch pwned']")
    with pytest.raises(
        SuiteError, match=r"suite\.yaml:1: invalid YAML: python tags are not allowed"
    ):
        load_suite(write(tmp_path, text))
    assert not (Path.cwd() / "pwned").exists()


def test_broken_yaml_names_its_line(tmp_path: Path) -> None:
    text = GOOD.replace("max_tokens: 8", "max_tokens: [8")
    with pytest.raises(SuiteError, match=r"suite\.yaml:\d+: invalid YAML"):
        load_suite(write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "a suite is a mapping"), ("- 1\n- 2\n", "a suite is a mapping")],
    ids=["empty-file", "a-list"],
)
def test_a_document_that_is_not_a_mapping_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(SuiteError, match=message):
        load_suite(write(tmp_path, text))


def test_a_suite_with_no_probes_loads_and_judges_nothing(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, "name: empty\nversion: 1\nprobes: []\n"))
    assert suite.probes == ()


def test_a_missing_file_is_a_config_error_with_exit_code_2(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_suite(tmp_path / "nope.yaml")
    assert info.value.exit_code == 2


def test_a_chat_probe_without_messages_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace('messages: [{role: user, content: "2+2?"}]', 'prompt: "2+2="')
    with pytest.raises(SuiteError, match=r"probes\[1\]: a chat probe needs request.messages"):
        load_suite(write(tmp_path, text))


def test_every_problem_is_reported_on_its_own_line(tmp_path: Path) -> None:
    text = GOOD.replace("category: canary", "category: canary\n    colour: red").replace(
        "id: sum", "id: canary-ok"
    )
    with pytest.raises(SuiteError) as info:
        load_suite(write(tmp_path, text))
    assert len(str(info.value).splitlines()) == 2


def test_a_recursive_alias_does_not_hang_the_loader(tmp_path: Path) -> None:
    text = GOOD.replace("max_tokens: 8", "max_tokens: 8\n      extra: &loop [*loop]")
    suite = load_suite(write(tmp_path, text))
    assert suite.probes[0].id == "canary-ok"
