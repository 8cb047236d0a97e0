"""The documents agree with the code (issue 28, items 6 and 7): the generated references are
current, every link and every document a page cites exists, the README's command table lists
every command with what its exit 1 means, and each claim a contradiction was found in is read
back from the code (outcomes, the same-URL refusal, the canary's tests)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from servegate.cli.gate_cmd import config_flags, gate
from servegate.cli.main import _register, cli
from servegate.config.loader import validate
from servegate.config.models import CanaryPolicy, GateConfig, NumericsPolicy, Policy, Tolerance
from servegate.config.reference import config_reference, policy_reference
from servegate.verdict.model import Outcome

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES = [*DOCS, *sorted((ROOT / "benchmarks").glob("RESULTS*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A project document cited by name (DESIGN.md, FAULTS.md, RESULTS-vllm.md), not a file a command
# writes (summary.md) or an upstream project's page.
CITED_MD = re.compile(r"(?<![\w/.-])([A-Z][A-Z]+(?:-[a-z]+)?\.md)\b")
MEASURED = ROOT / "tests/unit/canary/data/measured_intervals.json"


def test_docs_config_md_is_the_generated_reference() -> None:
    assert (ROOT / "docs/config.md").read_text(encoding="utf-8") == config_reference(
        config_flags()
    ), "docs/config.md is stale: run `servegate policy --config-keys > docs/config.md`"


def test_the_config_references_example_is_a_valid_gate_file() -> None:
    [example] = re.findall(r"```yaml\n(.*?)```", config_reference(config_flags()), re.DOTALL)
    cfg = validate(GateConfig, yaml.safe_load(example), "docs/config.md")
    assert cfg.candidate.launch is not None
    assert cfg.request_deadline_s == 120


# Options of `servegate gate` that are not settings of the run (outputs, the store, resuming):
# every other option must set a configuration key, so the reference can name it.
NOT_SETTINGS = {
    "config_path", "json_path", "html_path", "markdown_path", "junit_path", "db", "no_store",
    "resume_ref", "run_name", "quiet", "show_info",
}  # fmt: skip


def test_every_gate_option_sets_a_configuration_key_the_reference_names() -> None:
    named = {flag for flags in config_flags().values() for flag in flags}
    for param in gate.params:
        if param.name not in NOT_SETTINGS:
            assert param.opts[0] in named, f"{param.opts[0]} sets no key of docs/config.md"
    keys = set(config_flags())
    assert {"request_deadline_s", "performance.concurrency", "baseline.url"} <= keys
    assert "perplexity_budget_s" in config_reference(config_flags())


@pytest.mark.parametrize(
    ("model", "prefix"),
    [(Policy, ""), (Tolerance, "tolerance."), (CanaryPolicy, "canary."),
     (NumericsPolicy, "numerics.")],
    ids=["policy", "tolerance", "canary", "numerics"],
)  # fmt: skip
def test_every_default_in_policy_md_is_yaml_a_policy_file_accepts(
    model: type[Any], prefix: str
) -> None:
    """The page prints defaults as they are written in a policy file (a list, not a Python
    tuple; null, not None), and each reads back as the model's default."""
    page = policy_reference()
    for name, field in model.model_fields.items():
        if field.default_factory is not None:
            continue
        [shown] = re.findall(rf"^\| `{re.escape(prefix + name)}` \| `([^`]*)` \|", page, re.M)
        value = yaml.safe_load(shown)
        assert value == (list(field.default) if isinstance(field.default, tuple)
                         else field.default), (name, shown)  # fmt: skip


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert broken == []


def _cited(text: str) -> set[str]:
    return set(CITED_MD.findall(text))


def _exists(name: str, near: Path) -> bool:
    return any((base / name).exists() for base in (near, ROOT, ROOT / "docs", ROOT / "benchmarks"))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_markdown_file_a_page_cites_is_in_the_repository(path: Path) -> None:
    # DESIGN.md and "the seed" are the project's working notes, not in the repository: a user
    # cannot follow a citation of them.
    missing = sorted(
        c for c in _cited(path.read_text(encoding="utf-8")) if not _exists(c, path.parent)
    )
    assert missing == []


def test_no_policy_reason_cites_a_document_outside_the_repository() -> None:
    reasons = " ".join(
        f.description or ""
        for m in (Policy, Tolerance, CanaryPolicy, NumericsPolicy)
        for f in m.model_fields.values()
    )
    assert [c for c in _cited(reasons) if not _exists(c, ROOT)] == []
    assert "seed's" not in reasons


def _readme_table() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^\| `servegate ([a-z]+)[^`]*` \|(.*)\|$", line):
            rows[m.group(1)] = [cell.strip() for cell in m.group(2).split(" | ")]
    return rows


def test_the_readme_command_table_lists_every_command() -> None:
    _register()
    assert set(_readme_table()) == set(cli.commands)


def _help(path: list[str]) -> str:
    return " ".join(CliRunner().invoke(cli, [*path, "--help"]).output.split())


@pytest.mark.parametrize(
    ("command", "path"),
    [("gate", ["gate"]), ("demo", ["demo"]), ("baseline", ["baseline", "record"]),
     ("matrix", ["matrix"]), ("diff", ["diff"]), ("bench", ["bench"]),
     ("replay", ["replay"]), ("probe", ["probe"]), ("runs", ["runs"]),
     ("report", ["report"]), ("policy", ["policy"])],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_the_readme_says_what_exit_1_means_exactly_where_the_command_uses_it(
    command: str, path: list[str]
) -> None:
    _register()
    exit_one = _readme_table()[command][1]
    text = _help(path)
    uses_one = bool(re.search(r"\bExit[^.]*?\b1\b", text))
    assert (exit_one != "—") == uses_one, (command, exit_one)


def test_concepts_md_names_as_many_outcomes_as_a_check_has() -> None:
    text = (ROOT / "docs/concepts.md").read_text(encoding="utf-8")
    words = {2: "two", 3: "three", 4: "four", 5: "five"}
    counted = re.findall(r"^## .*?\b(two|three|four|five) outcomes", text, re.M | re.I)
    assert counted, "concepts.md has no outcomes heading"
    assert {c.lower() for c in counted} == {words[len(Outcome)]}
    for outcome in Outcome:
        assert outcome.value.replace("-", " ") in text


def test_concepts_md_quotes_the_refusal_of_one_url_as_both_sides() -> None:
    _register()
    url = "http://127.0.0.1:9/v1"
    done = CliRunner().invoke(cli, ["gate", "--baseline", url, "--candidate", url, "--no-store"])
    assert done.exit_code == 2
    said = done.output.strip().replace(url, "URL")
    text = " ".join((ROOT / "docs/concepts.md").read_text(encoding="utf-8").split())
    assert said in text


def _canary_table() -> dict[str, dict[str, str]]:
    rows = {}
    for line in (ROOT / "docs/canary.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"[a-z0-9_]+", cells[0]) and cells[0] != "check":
            rows[cells[0]] = {"test": cells[3], "key": cells[4].strip("`"), "core": cells[5]}
    return rows


def test_the_canary_docs_name_the_test_and_key_each_check_is_judged_with() -> None:
    from servegate.canary.judge import judge_interval

    measured = json.loads(MEASURED.read_text(encoding="utf-8"))["benign"]
    judged = judge_interval(measured["primary"], measured["candidate"], Policy())
    documented = _canary_table()
    compared = [c for c in judged.checks if "p <" in c.limit]  # a check that ran its test
    assert {"error", "garbage", "ttft_ms", "e2el_ms"} <= {c.name for c in compared}
    assert {c.name for c in judged.checks} <= set(documented)
    for check in compared:
        row = documented[check.name]
        test = "Fisher" if "Fisher" in check.limit else "Mann-Whitney"
        assert row["test"].startswith(test), (check.name, row["test"], check.limit)
        assert row["key"] == check.policy_key
        assert row["core"] == ("yes" if check.core else "no")
    # The policy page says the same of the canary's error rates (it said Mann-Whitney U).
    why = Policy.model_fields["error_rate_increase_max"].description or ""
    assert "Fisher" in why
    assert "Mann-Whitney" not in why


def test_the_deploy_page_does_not_call_the_proxy_future_work() -> None:
    text = " ".join((ROOT / "docs/deploy.md").read_text(encoding="utf-8").split())
    assert "once the proxy is on the branch" not in text
    assert "once it exists here" not in text
    _register()
    assert isinstance(cli.commands["proxy"], click.Command)


RESULTS = sorted((ROOT / "benchmarks").glob("RESULTS*.md"))
DATED = re.compile(r"^## Current state \((\d{4}-\d{2}-\d{2})[^)]*\)", re.M)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_each_results_file_opens_with_one_dated_current_state_then_its_history(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    sections = re.findall(r"^## (.*)$", text, re.M)
    assert sections[0].startswith("Current state ("), sections[:2]
    assert len(DATED.findall(text)) == 1
    assert sum(s.startswith("Current state") for s in sections) == 1
    # earlier measurements, where a file has them, are under History, after the current state
    assert [s for s in sections if s.startswith("History")] in (
        [],
        ["History"],
        ["History, newest first"],
    )
    assert "no performance gate was run" not in text.split("## History")[0]


def test_the_judgement_table_shows_the_corrected_logit_scale_shift() -> None:
    text = (ROOT / "benchmarks/RESULTS-judgement.md").read_text(encoding="utf-8")
    current = text.split("## History")[0]
    [row] = [
        line for line in current.splitlines() if line.startswith("| logit-scale | echo-shifted")
    ]
    shift = row.split(" | ")[5]
    assert shift.startswith("**+0.272**"), shift  # the text's correction, not the −0.33 it read
