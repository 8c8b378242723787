"""Newline-delimited framing with a hard bound on how much of one line is ever held in memory.

The wire format is NDJSON: one JSON value per line, UTF-8, `\\n` terminated (a `\\r` before it is
tolerated), blank lines ignored, and an unterminated last line still counts at EOF.

A client (buggy or hostile) can send a line of any size. Buffering it whole before noticing would let one
request exhaust memory, so `LineReader` stops accumulating as soon as a partial line passes the limit,
drops bytes up to the next newline, and reports an `Oversized` marker in that line's place. The caller
answers the marker with an error and carries on with the following line: the connection stays usable.

Decoding and JSON parsing are left to the caller; this module only deals in bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

ByteSource = Callable[[], Awaitable[bytes]]
"""Returns the next chunk of bytes, of any size; `b""` means end of input."""


@dataclass(frozen=True, slots=True)
class Oversized:
    """Stands for a line that exceeded the limit and was discarded.

    `size` is roughly how many bytes of the line were seen (for logs; it may count a `\\r` or stop at
    EOF), so it takes no part in equality.
    """

    limit: int
    size: int = field(default=0, compare=False)


Line = bytes | Oversized


class LineReader:
    """Turns an async byte source into lines, never holding more than `limit + 1` bytes of one line.

    `limit` bounds the line content, excluding the `\\n` terminator and a `\\r` right before it. Returned
    lines are stripped of those terminators and are never blank (whitespace-only lines are skipped here,
    so callers never parse them). Chunk boundaries are irrelevant: any split of the same stream yields
    the same sequence.
    """

    def __init__(self, source: ByteSource, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be positive")
        self._source = source
        self._limit = limit
        self._ready: deque[Line] = deque()
        self._partial = bytearray()
        # While > -1 we are skipping the rest of an oversized line; the value counts the bytes seen.
        self._discarded = -1
        self._eof = False

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete line held right now (never more than `limit + 1`)."""
        return len(self._partial)

    async def next_line(self) -> Line | None:
        """The next non-blank line or `Oversized` marker, or None once the input is exhausted."""
        while not self._ready:
            if self._eof:
                return None
            chunk = await self._source()
            if chunk:
                self.feed(chunk)
            else:
                self.feed_eof()
        return self._ready.popleft()

    def feed(self, chunk: bytes) -> None:
        """Consume one chunk; complete lines become available to `next_line` (sync, for tests too)."""
        view = memoryview(chunk)
        start = 0
        if self._discarded >= 0:
            newline = chunk.find(b"\n")
            if newline < 0:
                self._discarded += len(chunk)
                return
            self._ready.append(Oversized(self._limit, self._discarded + _content_len(chunk, 0, newline)))
            self._discarded = -1
            start = newline + 1
        newline = chunk.find(b"\n", start)
        if newline < 0:
            self._extend_partial(view[start:])
            return
        # The first newline completes whatever was carried over from earlier chunks.
        if self._partial:
            self._partial += view[start:newline]
            self._emit(bytes(self._partial))
            self._partial.clear()
        else:
            self._emit(chunk[start:newline])
        # bytes.split runs in C: far cheaper than a Python-level find loop when a chunk holds many lines.
        pieces = chunk[newline + 1 :].split(b"\n")
        for piece in pieces[:-1]:
            self._emit(piece)
        self._extend_partial(memoryview(pieces[-1]))

    def feed_eof(self) -> None:
        """Mark the end of input: a trailing unterminated line is still delivered."""
        if self._eof:
            return
        self._eof = True
        if self._discarded >= 0:
            self._ready.append(Oversized(self._limit, self._discarded))
            self._discarded = -1
        elif self._partial:
            self._emit(bytes(self._partial))
        self._partial.clear()

    def _extend_partial(self, data: memoryview) -> None:
        if not data:
            return
        # `limit + 1` leaves room for a `\r` that may turn out to precede the newline.
        if len(self._partial) + len(data) > self._limit + 1:
            self._discarded = len(self._partial) + len(data)
            self._partial = bytearray()  # release the memory rather than keep a large buffer around
            return
        self._partial += data

    def _emit(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self._limit:
            self._ready.append(Oversized(self._limit, len(line)))
        elif line.strip():
            self._ready.append(line)


def _content_len(chunk: bytes, start: int, newline: int) -> int:
    """Length of `chunk[start:newline]` without a trailing `\\r`."""
    end = newline - 1 if newline > start and chunk[newline - 1] == 0x0D else newline
    return end - start
