"""The docs name only commands and options the CLI has (issue 20, item 19): every `servegate …`
in README.md and docs/*.md — inline code and fenced shell blocks, continuation lines joined — is
resolved against the real click command tree, and each of its `--options` must exist there."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from servegate.cli.main import _register, cli

_register()

ROOT = Path(__file__).parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INLINE = re.compile(r"`([^`\n]*servegate [^`\n]*)`")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
CALL = re.compile(r"(?:^|[\s/;&|(])servegate((?: [a-z][a-z-]*)+)(.*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _calls(text: str) -> list[str]:
    found = [m.group(1) for m in INLINE.finditer(text)]
    for block in FENCE.finditer(text):
        joined = re.sub(r"\\\n\s*", " ", block.group(1))
        lines = (re.sub(r"\s#.*$", "", line) for line in joined.splitlines())  # shell comments
        found += [line for line in lines if "servegate " in line]
    return found


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    command: click.Command = cli
    used: list[str] = []
    for word in words:
        if isinstance(command, click.Group) and word in command.commands:
            command = command.commands[word]
            used.append(word)
        else:
            break
    return command, used


def _unknown(path: Path) -> list[str]:
    bad = []
    for call in _calls(path.read_text(encoding="utf-8")):
        for m in CALL.finditer(call):
            command, used = _resolve(m.group(1).split())
            if not used:
                continue  # `servegate` as a word, not a command line
            rest = " ".join(m.group(1).split()[len(used) :]) + m.group(2)
            rest = rest.split("|")[0].split("&&")[0].split(";")[0]
            names = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
            bad += [f"servegate {' '.join(used)} {o}" for o in OPTION.findall(rest)
                    if o not in names and o != "--help"]  # fmt: skip
    return bad


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_every_command_and_option_the_docs_name_exists(path: Path) -> None:
    assert _unknown(path) == []


def test_the_check_finds_a_made_up_option(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    fenced = "```bash\nservegate bench \\\n  --endpoint u --warp-speed 9\n```\n"
    doc.write_text(f"Run `servegate gate --baseline a --frobnicate`.\n\n{fenced}", encoding="utf-8")
    assert _unknown(doc) == ["servegate gate --frobnicate", "servegate bench --warp-speed"]
