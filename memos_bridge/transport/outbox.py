"""`Outbox`: the single writer of a connection.

Replies, our requests and notifications come from many tasks at once. Routing them all through one queue
and one writer task guarantees whole lines that never interleave, and lets the writer send everything
that accumulated while the previous write was in progress as one write: under load that is one system
call (and, on stdio, one thread hop) per batch instead of one per message.

A client that stops reading must not make us buffer without bound: past `high_water` queued bytes,
`put` waits until the writer has caught up, which in turn holds the sender's concurrency slot and so
slows reading from that client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

logger = logging.getLogger(__name__)

ByteSink = Callable[[bytes], Awaitable[None]]
"""Writes all of the given bytes (or raises once the connection is unusable)."""

DEFAULT_HIGH_WATER = 4 << 20


class Outbox:
    """Queue of encoded lines plus the loop (`run`) that writes them out in batches."""

    def __init__(
        self,
        send: ByteSink,
        *,
        on_failure: Callable[[BaseException], object],
        name: str = "?",
        high_water: int = DEFAULT_HIGH_WATER,
    ) -> None:
        self._send = send
        self._on_failure = on_failure
        self._name = name
        self._high_water = high_water
        self._lines: list[bytes] = []
        self._queued_bytes = 0
        self._closing = False
        self._failed = False
        self._wakeup: anyio.Event | None = None
        self._drain_waiters: list[anyio.Event] = []
        self.done = anyio.Event()
        """Set once `run` has returned (everything flushed, or the output failed)."""

    @property
    def accepting(self) -> bool:
        return not (self._closing or self._failed)

    @property
    def failed(self) -> bool:
        return self._failed

    @property
    def backlogged(self) -> bool:
        """More than `high_water` bytes wait to be written: the other side is not keeping up."""
        return self._queued_bytes > self._high_water

    def put_nowait(self, data: bytes) -> bool:
        """Queue one encoded line; False if the output is closed or broken (the line is dropped)."""
        if not self.accepting:
            return False
        self._lines.append(data)
        self._queued_bytes += len(data)
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None
        return True

    async def put(self, data: bytes) -> bool:
        """Queue one encoded line, then wait while more than `high_water` bytes are queued."""
        if not self.put_nowait(data):
            return False
        while self._queued_bytes > self._high_water and not self._failed:
            waiter = anyio.Event()
            self._drain_waiters.append(waiter)
            await waiter.wait()
        return not self._failed

    def close(self) -> None:
        """Accept nothing more; `run` returns once what is queued has been written."""
        self._closing = True
        self._wake_writer()

    def mark_failed(self) -> None:
        """Drop everything queued and accept nothing more (the connection is gone)."""
        self._failed = True
        self._lines.clear()
        self._queued_bytes = 0
        self._wake_drainers()
        self._wake_writer()

    async def run(self) -> None:
        """The writer loop; run it as a task for the life of the connection."""
        try:
            while True:
                if not self._lines:
                    if self._closing or self._failed:
                        return
                    waiter = self._wakeup = anyio.Event()
                    await waiter.wait()
                    continue
                batch, self._lines = self._lines, []
                data = batch[0] if len(batch) == 1 else b"".join(batch)
                try:
                    await self._send(data)
                except Exception as exc:  # any failure to write means the other side is gone
                    logger.info("connection %s: output failed (%r)", self._name, exc)
                    self.mark_failed()
                    self._on_failure(exc)
                    return
                self._queued_bytes -= len(data)
                if self._queued_bytes <= self._high_water:
                    self._wake_drainers()
        finally:
            self.done.set()

    def _wake_writer(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    def _wake_drainers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            waiter.set()
