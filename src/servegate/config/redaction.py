"""Secrets taken out of what servegate stores or prints: key-like flags in a command line,
every value of a launch block's environment (the names stay), URL passwords, bearer tokens.

Redaction is one-way and idempotent, so a stored (redacted) configuration is compared with a
new one by redacting the new one the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

HIDDEN = "***"
# Words that make a flag or a variable name secret-bearing. Whole words only: `--max-tokens`,
# `--tokenizer` and `--kv-cache-dtype` name no secret.
_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pass", "pwd", "auth",
     "credential", "credentials", "bearer"}
)  # fmt: skip
_FLAG_IN_TEXT = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)(=|\s+)(\S+)")
_ASSIGN_IN_TEXT = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
_URL_PASSWORD = re.compile(r"(?<=://)([^/@:\s]*):[^/@\s]*@")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}")


def secret_name(name: str) -> bool:
    """Whether a flag (`--api-key`) or a variable name (`HF_TOKEN`) names a secret."""
    words = re.split(r"[-_.\s]+", name.strip("-").lower())
    return any(w in _SECRET_WORDS for w in words)


def redact_text(text: str) -> str:
    """`text` with key-like `--flag value`, `--flag=value`, `NAME=value`, URL passwords and
    bearer tokens hidden."""

    def flag(m: re.Match[str]) -> str:
        return f"{m[1]}{m[2]}{HIDDEN}" if secret_name(m[1]) else m[0]

    def assign(m: re.Match[str]) -> str:
        return f"{m[1]}={HIDDEN}" if secret_name(m[1]) else m[0]

    text = _URL_PASSWORD.sub(rf"\1:{HIDDEN}@", text)
    text = _BEARER.sub(lambda m: f"{m[1]} {HIDDEN}", text)
    text = _FLAG_IN_TEXT.sub(flag, text)
    return _ASSIGN_IN_TEXT.sub(assign, text)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the value of every key-like flag hidden (`--api-key X`,
    `--api-key=X`), also inside an argument that is itself a shell line (`sh -c '…'`)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(HIDDEN)
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        if arg.startswith("-") and " " not in name and secret_name(name):
            out.append(f"{name}={HIDDEN}" if eq else arg)
            hide_next = not eq
            continue
        out.append(redact_text(arg))
    return out


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
    found = {v for n, v in env.items() if secret_name(n) and len(v.strip()) >= 4}
    return sorted(found, key=len, reverse=True)


def hide(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` and every key-like pattern replaced by `***`."""
    for secret in secrets:
        for form in {secret, secret.strip()}:
            if form:
                text = text.replace(form, HIDDEN)
    return redact_text(text)
