"""Traffic files: the proxy's capture lines and plain request bodies; a bad line is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servegate.proxy.replay import TrafficFileError, parse_traffic


def test_capture_lines_and_plain_bodies_are_both_read(tmp_path: Path) -> None:
    traffic = tmp_path / "t.jsonl"
    lines = [
        {"path": "/v1/chat/completions", "headers": {}, "request": {"messages": []}},
        {"prompt": "Once", "max_tokens": 4},
        {"input": ["a", "b"]},
        {"messages": [{"role": "user", "content": "hi"}]},
    ]
    traffic.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    found = [(c.line, c.path) for c in parse_traffic(traffic)]
    assert found == [
        (1, "/v1/chat/completions"),
        (2, "/v1/completions"),
        (3, "/v1/embeddings"),
        (4, "/v1/chat/completions"),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "a"}\n{"prompt": \n', "t.jsonl:2: not JSON"),
        ('{"prompt": "a"}\n[1, 2]\n', "t.jsonl:2: not a JSON object"),
        ('{"model": "m"}\n', "t.jsonl:1: not a chat, completions or embeddings request"),
        ('{"path": "/v1/chat/completions", "request": "x"}\n', "t.jsonl:1: the captured request"),
        ("\n\n", "t.jsonl: no requests in the file"),
    ],
    ids=["broken-json", "not-object", "unknown-shape", "capture-not-object", "empty"],
)
def test_a_bad_file_names_the_line(tmp_path: Path, content: str, message: str) -> None:
    traffic = tmp_path / "t.jsonl"
    traffic.write_text(content)
    with pytest.raises(TrafficFileError) as caught:
        parse_traffic(traffic)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
