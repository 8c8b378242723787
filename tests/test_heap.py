"""The heap trimmer gives freed C-heap pages back to the system, and only trims a service that worked."""

from __future__ import annotations

import threading

import anyio
import pytest

from memos_bridge import heap

needs_glibc = pytest.mark.skipif(not heap.can_trim(), reason="malloc_trim is glibc's")


_KEPT: list[bytes] = []


def _fragment_a_thread_arena(chunks: int, size: int) -> None:
    """In a fresh thread (its own glibc arena), allocate `chunks` blocks, keep the last one and free the rest:
    the freed pages lie below a live block, so the arena cannot shrink by itself."""
    blocks = [bytes(size) for _ in range(chunks)]
    keep = blocks[-1]
    del blocks
    _KEPT.append(keep)


@needs_glibc
def test_trim_returns_freed_pages_that_free_alone_keeps() -> None:
    worker = threading.Thread(target=_fragment_a_thread_arena, args=(40_000, 4_000))  # ~150 MiB
    worker.start()
    worker.join()
    stats = heap.TrimStats()
    released = heap.trim_now(stats)
    assert released > 50  # MiB: most of what the thread freed was still resident until now
    assert stats.runs == 1 and stats.released_mib == pytest.approx(released)
    assert heap.trim_now(stats) < 20  # nothing much left to give back
    assert stats.runs == 2


def test_resident_memory_is_reported_on_linux() -> None:
    rss = heap.resident_mib()
    assert rss is None or 10 < rss < 100_000


@needs_glibc
@pytest.mark.anyio
async def test_the_trimmer_skips_an_idle_service() -> None:
    answers = iter([True, False, False, True])
    asked: list[bool] = []

    def busy() -> bool:
        value = next(answers, False)
        asked.append(value)
        return value

    stats = heap.TrimStats()
    with anyio.move_on_after(0.5):
        await heap.run_trimmer(busy, stats, interval_s=0.1)
    assert len(asked) >= 4
    assert stats.runs == 2  # one trim per busy interval, none while idle
