"""LineReader: chunking must not matter, limits must hold, nothing may be buffered past the limit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memos_bridge.transport.framing import Line, LineReader, Oversized


def reference_lines(stream: bytes, limit: int) -> list[Line]:
    """The specification, written the obvious (whole-buffer) way."""
    out: list[Line] = []
    for part in stream.split(b"\n"):
        line = part[:-1] if part.endswith(b"\r") else part
        if len(line) > limit:
            out.append(Oversized(limit))
        elif line.strip():
            out.append(line)
    return out


def read_all(chunks: list[bytes], limit: int) -> list[Line]:
    reader = LineReader(_unused_source, limit)
    out: list[Line] = []
    for chunk in chunks:
        reader.feed(chunk)
        assert reader.buffered <= limit + 1
        out.extend(_drain(reader))
    reader.feed_eof()
    out.extend(_drain(reader))
    return out


def _drain(reader: LineReader) -> list[Line]:
    items = []
    while reader._ready:  # the sync half of the API; next_line() is covered by the async tests
        items.append(reader._ready.popleft())
    return items


async def _unused_source() -> bytes:
    raise AssertionError("sync tests feed the reader directly")


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    chunks, start = [], 0
    for point in [*points, len(data)]:
        chunks.append(data[start:point])
        start = point
    return [c for c in chunks if c]


line_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"x"))
lines_and_endings = st.lists(st.tuples(line_bytes, st.sampled_from([b"\n", b"\r\n"])), max_size=12)


@settings(max_examples=400, deadline=None)
@given(
    items=lines_and_endings,
    tail=line_bytes,
    limit=st.integers(min_value=1, max_value=48),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=30),
)
def test_any_chunking_yields_the_reference_lines(
    items: list[tuple[bytes, bytes]], tail: bytes, limit: int, cuts: list[int]
) -> None:
    stream = b"".join(line + end for line, end in items) + tail
    expected = reference_lines(stream, limit)
    assert read_all(split_at(stream, cuts), limit) == expected
    assert read_all([stream], limit) == expected
    assert read_all([bytes([b]) for b in stream], limit) == expected


def test_blank_crlf_and_trailing_line() -> None:
    stream = b'{"a":1}\r\n\n   \t \r\n{"b":2}\n{"c":3}'
    assert read_all([stream], 1024) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def test_exact_limit_passes_and_one_more_byte_does_not() -> None:
    limit = 16
    ok, over = b"x" * limit, b"y" * (limit + 1)
    assert read_all([ok + b"\r\n" + over + b"\n" + ok], limit) == [ok, Oversized(limit), ok]


def test_huge_line_is_never_buffered_and_reading_resumes() -> None:
    limit = 1024
    reader = LineReader(_unused_source, limit)
    reader.feed(b'{"before":1}\n' + b"z" * 5000)
    for _ in range(200):  # 12.8 MB more of the same line, in 64 KiB chunks
        reader.feed(b"z" * 65536)
        assert reader.buffered == 0
    reader.feed(b"zzz\n" + b'{"after":2}\n')
    items = _drain(reader)
    assert items[0] == b'{"before":1}'
    assert isinstance(items[1], Oversized) and items[1].limit == limit and items[1].size > 13_000_000
    assert items[2] == b'{"after":2}'


def test_oversized_line_cut_short_by_eof_still_reported() -> None:
    assert read_all([b"a" * 100], 10) == [Oversized(10)]


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LineReader(_unused_source, 0)


@pytest.mark.anyio
async def test_next_line_pulls_from_the_source_until_eof() -> None:
    chunks = [b'{"a"', b":1}\n{", b'"b":2}\r', b"\n\n", b"tail", b""]
    calls = 0

    async def source() -> bytes:
        nonlocal calls
        calls += 1
        return chunks.pop(0) if chunks else b""

    reader = LineReader(source, 64)
    got = []
    while (line := await reader.next_line()) is not None:
        got.append(line)
    assert got == [b'{"a":1}', b'{"b":2}', b"tail"]
    assert await reader.next_line() is None
    assert calls == 6  # nothing read after the end
