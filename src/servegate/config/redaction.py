"""Secrets taken out of what servegate stores or prints: key-like flags, assignments and
mapping entries in a command line, a shell string or a log line; every value of a launch block's
environment (the names stay); URL passwords; bearer tokens; and any secret value known by name
(an API key read from a variable, a launch block's values) wherever it appears in a text.

This is the one redactor: the launcher's shown command, engine log excerpts, the launch record of
a fingerprint, findings and the stored configuration all go through it. Redaction is one-way and
idempotent, so a stored (redacted) configuration is compared with a new one by redacting the new
one the same way.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

HIDDEN = "***"
# Words that make a flag or a variable name secret-bearing. Whole words only: `--max-tokens`,
# `--tokenizer` and `--kv-cache-dtype` name no secret.
_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pass", "pwd", "auth",
     "credential", "credentials", "bearer"}
)  # fmt: skip
# A shell word: quoted parts and bare characters up to the next blank or shell operator
# (`'a b'`, `x"y z"`, `k`); an unbalanced quote (a line cut short) is taken as a character.
_WORD = r"""(?:'[^']*'|"[^"]*"|[^\s'";&|()<>`]|['"])+"""
_FLAG_IN_TEXT = re.compile(rf"(?<![\w-])(--?[A-Za-z][\w-]*)(=|[ \t]+)({_WORD})")
_ASSIGN_IN_TEXT = re.compile(rf"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=({_WORD})")
# A Python or JSON mapping entry, as engines print their arguments (vLLM's "non-default args:
# {'api_key': ['K'], ...}"): the value, or the first item of a list value.
_MAPPING_IN_TEXT = re.compile(
    r"""(['"])([A-Za-z_][\w-]*)\1(\s*:\s*\[?\s*)('[^']*'|"[^"]*"|[^\s,\]}]+)"""
)
_URL_PASSWORD = re.compile(r"(?<=://)([^/@:\s]*):[^/@\s]*@")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}")
# Shorter values are not masked by value: "1" or "on" would hide half a log.
MIN_SECRET_CHARS = 4


def secret_name(name: str) -> bool:
    """Whether a flag (`--api-key`), a variable (`HF_TOKEN`) or a field (`api_key`) names a
    secret."""
    words = re.split(r"[-_.\s]+", name.strip("-").lower())
    return any(w in _SECRET_WORDS for w in words)


def _unquoted(word: str) -> str:
    try:
        parts = shlex.split(word)
    except ValueError:
        return word
    return " ".join(parts) if parts else word


def redact_text(text: str) -> str:
    """`text` with key-like `--flag value`, `--flag=value`, `NAME=value`, `'name': value`, URL
    passwords and bearer tokens hidden (a quoted value is hidden whole)."""

    def flag(m: re.Match[str]) -> str:
        return f"{m[1]}{m[2]}{HIDDEN}" if secret_name(m[1]) else m[0]

    def assign(m: re.Match[str]) -> str:
        return f"{m[1]}={HIDDEN}" if secret_name(m[1]) else m[0]

    def entry(m: re.Match[str]) -> str:
        return f"{m[1]}{m[2]}{m[1]}{m[3]}{HIDDEN}" if secret_name(m[2]) else m[0]

    text = _URL_PASSWORD.sub(rf"\1:{HIDDEN}@", text)
    text = _BEARER.sub(lambda m: f"{m[1]} {HIDDEN}", text)
    text = _MAPPING_IN_TEXT.sub(entry, text)
    text = _FLAG_IN_TEXT.sub(flag, text)
    return _ASSIGN_IN_TEXT.sub(assign, text)


def text_secrets(text: str) -> list[str]:
    """The values `redact_text` hides in `text` (unquoted), to be masked wherever else they
    appear (an engine's log that repeats them in its own words)."""
    found = [_unquoted(m[3]) for m in _FLAG_IN_TEXT.finditer(text) if secret_name(m[1])]
    found += [_unquoted(m[2]) for m in _ASSIGN_IN_TEXT.finditer(text) if secret_name(m[1])]
    found += [_unquoted(m[4]) for m in _MAPPING_IN_TEXT.finditer(text) if secret_name(m[2])]
    found += [m[0].split("@")[0].split(":", 1)[1] for m in _URL_PASSWORD.finditer(text)]
    return [v for v in found if v != HIDDEN]


def _argv_parts(argv: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """Each argument as it may be shown, with the secret values it holds: the value of a
    key-like flag (`--api-key X`, `--api-key=X`), or what `redact_text` hides inside an argument
    that is itself a shell line (`sh -c '…'`)."""
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            yield HIDDEN, [arg]
            continue
        name, eq, value = arg.partition("=")
        if arg.startswith("-") and " " not in name and secret_name(name):
            hide_next = not eq
            yield (f"{name}={HIDDEN}", [value]) if eq else (arg, [])
            continue
        yield redact_text(arg), text_secrets(arg)


def command_secrets(argv: Sequence[str]) -> list[str]:
    """The values `redact_argv` hides in a command line."""
    found = [v for _, values in _argv_parts(argv) for v in values]
    return [v for v in found if len(v.strip()) >= MIN_SECRET_CHARS]


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the value of every key-like flag hidden (`--api-key X`,
    `--api-key=X`), also inside an argument that is itself a shell line (`sh -c '…'`), and each
    hidden value masked wherever else the command repeats it."""
    secrets = command_secrets(argv)
    return [mask(shown, secrets) for shown, _ in _argv_parts(argv)]


def shown_command(argv: Sequence[str]) -> str:
    """The command as one shell line, redacted (`redact_argv`), fit to print or store."""
    return shlex.join(redact_argv(argv))


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration (a model_dump) fit to store or print: every `launch` block's command
    redacted and its environment values replaced by `***`; every string redacted as text."""
    return {k: _redact_value(k, v) for k, v in config.items()}


def _redact_value(key: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        if key == "launch":
            return _redact_launch(value)
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(key, v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _redact_launch(launch: Mapping[str, Any]) -> dict[str, Any]:
    out = {str(k): _redact_value(str(k), v) for k, v in launch.items()}
    command = launch.get("command")
    if isinstance(command, list | tuple):
        out["command"] = redact_argv([str(a) for a in command])
    elif isinstance(command, str):
        out["command"] = redact_text(command)
    env = launch.get("env")
    if isinstance(env, Mapping):
        out["env"] = {str(name): HIDDEN for name in env}
    return out


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of this process's secret-named variables (`*_KEY`, `*TOKEN*`, …), longest first."""
    env = os.environ if environ is None else environ
    found = {v for n, v in env.items() if secret_name(n) and len(v.strip()) >= MIN_SECRET_CHARS}
    return sorted(found, key=len, reverse=True)


def mask(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` (longest first) replaced by `***` wherever it appears; a
    secret shorter than MIN_SECRET_CHARS is not masked by value."""
    forms = {f for s in secrets for f in (s, s.strip()) if len(f.strip()) >= MIN_SECRET_CHARS}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, HIDDEN)
    return text


def hide(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` masked (`mask`) and every key-like pattern hidden."""
    return redact_text(mask(text, secrets))
