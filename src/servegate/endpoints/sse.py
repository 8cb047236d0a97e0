"""An incremental text/event-stream parser over bytes, following the WHATWG rules.

Lines end at CR, LF or CRLF (also CR at the end of one chunk and LF at the start of the next);
nothing else is a line break (U+2028, U+0085 are content, so never `str.splitlines()`). Lines are
split as bytes, which never cuts a UTF-8 character (0x0A and 0x0D occur in no multibyte
sequence), so any chunking yields the same events. One leading BOM is stripped. A field value loses
exactly one leading space. Several `data` lines join with LF. Comments are counted and dropped as
they arrive without being stored. Unknown fields, an `id` containing NUL and a non-digit `retry`
are ignored. Lines and events over `max_event_bytes` raise TOO_LARGE before they are buffered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from servegate.endpoints.errors import ErrorCategory, FaultError

BOM = b"\xef\xbb\xbf"
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
_EOL = re.compile(rb"[\r\n]")


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event; `arrival_ns` is when the chunk that completed it was read.

    Not frozen: one is built per streamed event, and a frozen dataclass's __init__ costs twice
    as much (object.__setattr__ per field). Treat it as read-only.
    """

    data: str
    event: str = "message"
    id: str = ""
    index: int = 0
    arrival_ns: int = 0
    complete: bool = True  # False: the stream ended before the blank line that ends the event


class SSEFaultError(FaultError):
    """A fault part-way through a chunk; `events` are the ones completed before it, in order."""

    def __init__(self, fault: FaultError, events: list[SSEEvent]) -> None:
        super().__init__(fault.category, fault.message)
        self.events = events


class EventSink(Protocol):
    """Where `SSEParser.feed_into` hands events, in stream order."""

    def add(self, event: SSEEvent) -> None:
        """One event as `feed` would return it."""
        ...

    def add_data(self, payloads: list[bytes | str], first_index: int, arrival_ns: int) -> None:
        """Consecutive events that were each one `data:` line and nothing else, given as that line's
        value: bytes when ASCII (what the line held, one leading space removed), else the decoded
        str. Each stands for `SSEEvent(value, index=first_index + i, arrival_ns=arrival_ns)` with
        the parser's `last_event_id` as `id` (the str of the bytes: `value.decode("ascii")`)."""
        ...


class SSEParser:
    """Feed byte chunks with their arrival stamps; get back the events they complete."""

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.last_event_id = ""
        self.retry_ms: int | None = None
        self.comments = 0
        self.lines = 0
        self._head: bytes | None = b""  # bytes held while checking for a BOM; None once decided
        self._line = bytearray()
        self._line_len = 0
        self._in_comment = False
        self._after_cr = False
        self._data: list[str] = []
        self._data_len = 0
        self._has_data = False
        self._event_type = ""
        self._count = 0

    def feed(self, chunk: bytes, arrival_ns: int = 0) -> list[SSEEvent]:
        """Parse `chunk`; returns the events whose terminating blank line it contained.

        Raises SSEFaultError (DECODE, TOO_LARGE) carrying the events completed before the fault.
        """
        events: list[SSEEvent] = []
        try:
            self._feed(chunk, arrival_ns, events)
        except FaultError as exc:
            raise SSEFaultError(exc, events) from exc
        return events

    def feed_into(self, chunk: bytes, arrival_ns: int, sink: EventSink) -> None:
        """`feed`, with the completed events handed to `sink` as they come instead of returned.

        The same events in the same order, and the same faults (SSEFaultError, raised after the
        sink took the events before the fault). A run of events that are one `data:` line each
        (every event of an OpenAI stream) goes to `sink.add_data` as a list of line values, with
        no SSEEvent built for them; anything else takes `feed`'s path.
        """
        if self._head is not None:
            got = self._past_bom(chunk)
            if got is None:
                return
            chunk = got
        if b"\r" in chunk:
            self._feed_general(chunk, arrival_ns, sink)
            return
        if self._line_len or self._after_cr or self._has_data or self._event_type:
            # An event is open from the last chunk: the general way up to the first blank line,
            # after which the parser is on an event boundary again (CR aside, ruled out above).
            end = chunk.find(b"\n\n") + 2
            if end == 1:
                self._feed_general(chunk, arrival_ns, sink)
                return
            self._feed_general(chunk[:end], arrival_ns, sink)
            chunk = chunk[end:]
        # Every block before a blank line that is a single `data:` line (no LF inside, UTF-8,
        # under the cap) is one event.
        blocks = chunk.split(b"\n\n")
        rest = blocks.pop()
        limit = self.max_event_bytes
        payloads: list[bytes | str]
        end = len(chunk) - len(rest)  # the blocks and their blank lines
        if (
            blocks
            and end <= limit
            and chunk.isascii()
            and blocks[0].startswith(b"data: ")
            # only the block ends are LFs, so each "\n\n" up to `end` is one; then every block
            # after the first starts with "data: " when all but the last end are followed by it
            and chunk.count(b"\n", 0, end) == 2 * len(blocks)
            and chunk.count(b"\n\ndata: ", 0, end) == len(blocks) - 1
        ):
            # the usual read: whole `data: ` events, checked above with a few C loops
            payloads = [block[6:] for block in blocks]
            blocks = []
        else:
            payloads = []
        for block in blocks:
            # a `data:` line of `size` bytes makes an event of size + 1 (its LF) bytes
            if len(block) >= limit or block[:5] != b"data:" or b"\n" in block:
                break
            value = block[6:] if block[5:6] == b" " else block[5:]
            if not value.isascii():
                try:
                    payloads.append(value.decode("utf-8"))
                except UnicodeDecodeError:
                    break  # the general way raises DECODE with its message
                continue
            payloads.append(value)
        taken = len(payloads)
        if taken:
            first = self._count
            self._count += taken
            self.lines += 2 * taken
            sink.add_data(payloads, first, arrival_ns)
            if taken == len(blocks) or not blocks:
                chunk = rest
            else:
                chunk = chunk[sum(map(len, blocks[:taken])) + 2 * taken :]
        if chunk:
            self._feed_general(chunk, arrival_ns, sink)

    def _feed_general(self, chunk: bytes, arrival_ns: int, sink: EventSink) -> None:
        events: list[SSEEvent] = []
        try:
            self._feed(chunk, arrival_ns, events)
        except FaultError as exc:
            for event in events:
                sink.add(event)
            raise SSEFaultError(exc, events) from exc
        for event in events:
            sink.add(event)

    def _past_bom(self, chunk: bytes) -> bytes | None:
        """The stream's first bytes without a leading BOM; None while too few have come in to
        tell (they are held)."""
        assert self._head is not None
        head = self._head + chunk
        if len(head) < len(BOM) and BOM.startswith(head):
            self._head = head
            return None
        self._head = None
        return head[len(BOM) :] if head.startswith(BOM) else head

    def _feed(self, chunk: bytes, arrival_ns: int, events: list[SSEEvent]) -> None:
        if self._head is not None:
            got = self._past_bom(chunk)
            if got is None:
                return
            chunk = got
        if not self._line_len and not self._after_cr and b"\r" not in chunk:
            self._feed_lf(chunk, arrival_ns, events)
            return
        pos, size = 0, len(chunk)
        if self._after_cr and size:
            self._after_cr = False
            if chunk[0] == 0x0A:
                pos = 1
        while pos < size:
            match = _EOL.search(chunk, pos)
            if match is None:
                self._hold(chunk, pos, size)
                break
            end = match.start()
            self._hold(chunk, pos, end)
            self._end_line(arrival_ns, events)
            if chunk[end] == 0x0D:
                if end + 1 == size:
                    self._after_cr = True
                elif chunk[end + 1] == 0x0A:
                    end += 1
            pos = end + 1

    def _feed_lf(self, chunk: bytes, arrival_ns: int, events: list[SSEEvent]) -> None:
        """The common case, same results as the loop in _feed: LF line ends only, no partial line
        or CR held from the last chunk. Blank, `data:` and comment lines are handled inline;
        any other line, one over the cap or one that does not decode goes the general way."""
        lines = chunk.split(b"\n")
        rest = lines.pop()  # after the last LF: the start of a line, or b""
        limit = self.max_event_bytes
        data = self._data
        for line in lines:
            size = len(line)
            if not size:
                self.lines += 1
                if data:
                    events.append(self._dispatch(arrival_ns, complete=True))
                self._event_type = ""
                continue
            if size <= limit:
                if line.startswith(b"data:"):
                    try:
                        value = line[6 if size > 5 and line[5] == 0x20 else 5 :].decode("utf-8")
                    except UnicodeDecodeError:
                        pass  # the general way raises DECODE with its message
                    else:
                        self.lines += 1
                        self._data_len += size + 1
                        if self._data_len > limit:
                            raise self._event_too_large()
                        data.append(value)
                        self._has_data = True
                        continue
                elif line[0] == 0x3A:  # ":" a comment
                    self.lines += 1
                    self.comments += 1
                    continue
            self._hold(line, 0, size)
            self._end_line(arrival_ns, events)
        if rest:
            self._hold(rest, 0, len(rest))

    def close_into(self, arrival_ns: int, sink: EventSink) -> None:
        """`close`, with the events handed to `sink`; on a fault the sink takes the events
        completed before it, then SSEFaultError is raised."""
        try:
            events = self.close(arrival_ns)
        except SSEFaultError as exc:
            for event in exc.events:
                sink.add(event)
            raise
        for event in events:
            sink.add(event)

    def close(self, arrival_ns: int = 0) -> list[SSEEvent]:
        """End of stream: an unterminated last line and event come back with complete=False."""
        events: list[SSEEvent] = []
        try:
            if self._head:
                held, self._head = self._head, None
                self._feed(held, arrival_ns, events)
            if self._line_len and not self._in_comment:
                self._end_line(arrival_ns, events)
        except FaultError as exc:
            raise SSEFaultError(exc, events) from exc
        if self._has_data:
            events.append(self._dispatch(arrival_ns, complete=False))
        return events

    def _hold(self, chunk: bytes, start: int, end: int) -> None:
        if start == end:
            return
        if self._line_len == 0 and chunk[start] == 0x3A:  # ":" starts a comment: count, drop
            self._in_comment = True
        self._line_len += end - start
        if self._line_len > self.max_event_bytes:
            raise FaultError(
                ErrorCategory.TOO_LARGE,
                f"SSE line longer than {self.max_event_bytes} bytes without a line break",
            )
        if not self._in_comment:
            self._line += chunk[start:end]

    def _end_line(self, arrival_ns: int, events: list[SSEEvent]) -> None:
        self.lines += 1
        if self._in_comment:
            self.comments += 1
        elif self._line_len == 0:
            if self._has_data:
                events.append(self._dispatch(arrival_ns, complete=True))
            self._event_type = ""
        else:
            raw = bytes(self._line)
            self._line.clear()
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FaultError(
                    ErrorCategory.DECODE,
                    f"invalid UTF-8 in SSE line {self.lines} at byte {exc.start}"
                    f" (event {self._count})",
                ) from exc
            self._field(line, len(raw))
        self._in_comment = False
        self._line_len = 0

    def _field(self, line: str, size: int) -> None:
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_len += size + 1
            if self._data_len > self.max_event_bytes:
                raise self._event_too_large()
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)

    def _event_too_large(self) -> FaultError:
        return FaultError(
            ErrorCategory.TOO_LARGE, f"SSE event {self._count} over {self.max_event_bytes} bytes"
        )

    def _dispatch(self, arrival_ns: int, *, complete: bool) -> SSEEvent:
        data = self._data
        event = SSEEvent(
            data[0] if len(data) == 1 else "\n".join(data),
            self._event_type or "message",
            self.last_event_id,
            self._count,
            arrival_ns,
            complete,
        )
        self._count += 1
        self._data.clear()
        self._data_len = 0
        self._has_data = False
        self._event_type = ""
        return event
