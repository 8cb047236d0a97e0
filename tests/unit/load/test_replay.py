import json
from pathlib import Path

import pytest

from servegate.load import ReplayError, read_replay

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _write(tmp_path: Path, lines: list[str], name: str = "traffic.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_bodies_keep_file_order_and_lose_their_timestamp(tmp_path: Path) -> None:
    lines = [
        json.dumps({**CHAT, "timestamp": 100.0}),
        "",
        json.dumps({"prompt": "x", "timestamp": 100.25}),
        json.dumps({**CHAT, "timestamp": 101}),
    ]
    traffic = read_replay(_write(tmp_path, lines))
    assert traffic.bodies == (CHAT, {"prompt": "x"}, CHAT)
    assert traffic.line_numbers == (1, 3, 4)
    assert traffic.offsets_s == (0.0, 0.25, 1.0)
    assert len(traffic.sha256) == 64


def test_iso_timestamps_become_offsets(tmp_path: Path) -> None:
    lines = [
        json.dumps({**CHAT, "timestamp": "2026-11-30T10:00:00+00:00"}),
        json.dumps({**CHAT, "timestamp": "2026-11-30T10:00:02.5+00:00"}),
    ]
    assert read_replay(_write(tmp_path, lines)).offsets_s == (0.0, 2.5)


def test_a_file_without_timestamps_has_no_offsets(tmp_path: Path) -> None:
    traffic = read_replay(_write(tmp_path, [json.dumps(CHAT), json.dumps(CHAT)]))
    assert traffic.offsets_s is None


@pytest.mark.parametrize(
    ("lines", "where", "message"),
    [
        ([json.dumps(CHAT), '{"messages": ['], ":2:", "not JSON"),
        ([json.dumps(CHAT), "", "[1, 2]"], ":3:", "not a JSON object"),
        ([json.dumps({"model": "m"})], ":1:", "neither 'messages'"),
        ([json.dumps({**CHAT, "timestamp": 1}), json.dumps(CHAT)], ":2:", "some lines only"),
        ([json.dumps(CHAT), json.dumps({**CHAT, "timestamp": 1})], ":2:", "some lines only"),
        (
            [json.dumps({**CHAT, "timestamp": 5}), json.dumps({**CHAT, "timestamp": 4})],
            ":2:",
            "back in time",
        ),
        ([json.dumps({**CHAT, "timestamp": "yesterday"})], ":1:", "not ISO-8601"),
        ([json.dumps({**CHAT, "timestamp": True})], ":1:", "seconds"),
    ],
    ids=[
        "broken-json",
        "array",
        "no-messages",
        "stamp-then-none",
        "none-then-stamp",
        "backwards",
        "bad-iso",
        "bool-stamp",
    ],
)
def test_a_broken_line_is_one_line_naming_the_file_and_line(
    tmp_path: Path, lines: list[str], where: str, message: str
) -> None:
    path = _write(tmp_path, lines)
    with pytest.raises(ReplayError, match=message) as info:
        read_replay(path)
    text = str(info.value)
    assert text.startswith(f"{path}{where}")
    assert "\n" not in text
    assert info.value.exit_code == 2


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="no requests"):
        read_replay(_write(tmp_path, ["", "  "]))


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="cannot read"):
        read_replay(tmp_path / "absent.jsonl")


def test_a_binary_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ReplayError, match="not UTF-8"):
        read_replay(path)
