"""Finding fields from raw observations: what came back (`describe`) and curl reproducers.
Excerpts follow the one rule in servegate.endpoints.text."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from servegate.endpoints.text import FINDING_CHARS
from servegate.endpoints.text import excerpt as text_excerpt
from servegate.endpoints.types import Completion


def excerpt(text: str | None, limit: int = FINDING_CHARS) -> str:
    """An answer as a finding shows it (servegate.endpoints.text.excerpt, FINDING_CHARS, saying
    how much was cut)."""
    return text_excerpt(text, limit, count_cut=True)


def describe(result: Completion) -> str:
    """What came back, for an excerpt: the text, or the error when the request failed."""
    if result.error is not None:
        return f"[{result.error.category}] {result.error.message}"
    if result.tool_calls:
        calls = "; ".join(f"{c.name}({c.arguments})" for c in result.tool_calls)
        return excerpt(f"{result.content or ''} tool_calls: {calls}".strip())
    return excerpt(result.content)


# Where each api of `curl` is sent, relative to the base URL; anything else goes to /completions.
API_PATHS = {"chat": "/chat/completions", "embeddings": "/embeddings", "score": "/score",
             "rerank": "/rerank"}  # fmt: skip
HEREDOC_CHARS = 2000  # a body longer than this goes in a here-document, not a quoted argument
HEREDOC_END = "SERVEGATE_BODY"


def curl(
    base_url: str, api: str, body: Mapping[str, Any], *, python_body: str | None = None
) -> str:
    """A shell command that replays the request as printed (curl, and for `python_body` the
    Python standard library); the key comes from the environment, never the report. A long body
    (a needle prompt) is given whole in a quoted here-document; `python_body` is a Python
    expression for a body too large even for that (the 12,000-word over-long prompt)."""
    path = API_PATHS.get(api, "/completions")
    url = shlex.quote(base_url.rstrip("/") + path)
    head = f"curl -sS {url} -H 'Content-Type: application/json' "
    auth = '-H "Authorization: Bearer $OPENAI_API_KEY"'
    if python_body is not None:
        make = f"import json; print(json.dumps({python_body}))"
        return f"python3 -c {shlex.quote(make)} | {head}{auth} --data-binary @-"
    data = json.dumps(body, ensure_ascii=False)  # one line: \n inside strings stays escaped
    if len(data) > HEREDOC_CHARS:
        return f"{head}{auth} --data-binary @- <<'{HEREDOC_END}'\n{data}\n{HEREDOC_END}"
    return f"{head}{auth} -d {shlex.quote(data)}"
