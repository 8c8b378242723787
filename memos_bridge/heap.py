"""Give the C heap's free memory back to the operating system while the service runs.

Why a long-running service needs this: Python objects, SQLite's page buffers, numpy arrays and ONNX
Runtime's tensors all come from the C library's `malloc`. glibc gives every thread that allocates its own
arena (up to 8 per core), and returns memory to the system only when the free space is at the very top of
an arena. The service's threads (readers, the writer, embedding batches, the transport) allocate and free
large short-lived buffers all the time — one embedding batch's activations are megabytes — so the arenas
fill with free chunks below live ones. Those pages stay resident: the process's RSS grows with the work it
has done, not with what it holds, and over hours that looks like a leak.

`malloc_trim(0)` walks every arena and hands whole free pages back with `madvise`, without moving any live
object. It holds each arena's lock while it walks it, so it runs in a worker thread, only after the service
has done some work since the last trim, and only at a moment when no host is waiting on a `turn.start`
(it waits for one at most `patience_s`). On C libraries without `malloc_trim` (musl, macOS) nothing runs.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread

from memos_bridge.storage.priority import yield_to_interactive

log = logging.getLogger(__name__)


def _load_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (looked up among the process's own symbols:
    no `ldconfig` run, nothing loaded)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _load_trim()


def can_trim() -> bool:
    """True when the C library can return free heap pages on request (glibc)."""
    return _MALLOC_TRIM is not None


def resident_mib() -> float | None:
    """This process's resident set size in MiB (Linux `/proc`), or None elsewhere."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * mmap.PAGESIZE / 2**20


@dataclass
class TrimStats:
    """What the trimmer did, for `core.health` and the soak benchmark."""

    runs: int = 0
    released_mib: float = 0.0
    """Resident memory the trims gave back, in all (measured around each trim; other threads' allocations
    meanwhile make it an estimate)."""
    last_ms: float = 0.0


def trim_now(stats: TrimStats | None = None) -> float:
    """Return the free heap to the system now (blocking: call it from a worker thread); MiB released."""
    if _MALLOC_TRIM is None:
        return 0.0
    before = resident_mib()
    started = time.perf_counter()
    _MALLOC_TRIM(0)
    elapsed_ms = (time.perf_counter() - started) * 1000
    after = resident_mib()
    released = max(0.0, before - after) if before is not None and after is not None else 0.0
    if stats is not None:
        stats.runs += 1
        stats.released_mib += released
        stats.last_ms = elapsed_ms
    return released


async def run_trimmer(
    busy_since_last: Callable[[], bool],
    stats: TrimStats,
    *,
    interval_s: float,
) -> None:
    """Trim every `interval_s` (`transport.heap_trim_interval_s`) while the service works (start this in the
    server's task group).

    `busy_since_last` says whether any request or background work ran since it was last asked: an idle
    service has freed nothing new, so it is not trimmed again.
    """
    if _MALLOC_TRIM is None:
        return
    while True:
        await anyio.sleep(interval_s)
        if not busy_since_last():
            continue
        await yield_to_interactive(patience_s=interval_s / 10)
        released = await anyio.to_thread.run_sync(trim_now, stats)
        log.debug("heap trim released %.1f MiB in %.1f ms", released, stats.last_ms)
