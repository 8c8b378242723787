"""Work that must not delay a reply but must be finished before a flush or a shutdown completes.

The server attaches a task group (`run`); `submit` then starts the work in it and returns at once. Without
an attached group (tests that drive `MemoryCore` directly, one-shot CLI commands) `submit` simply awaits the
work, so behaviour is the same, only slower. `drain` waits until nothing submitted is still running: flush,
`session.close` and shutdown call it so that "accepted" always means "done before the next step".

A failing job is logged and counted, never raised into the task group: one bad job must not take the
service down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
from sqlalchemy.orm import Session

from memos_bridge.storage.database import Database
from memos_bridge.storage.locks import is_lock_conflict
from memos_bridge.storage.priority import background

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[object]]


class BackgroundWork:
    def __init__(self) -> None:
        self._group: anyio.abc.TaskGroup | None = None
        self._running = 0
        self._idle = anyio.Event()
        self._idle.set()
        self.failures = 0
        self.completed = 0

    @property
    def attached(self) -> bool:
        return self._group is not None

    @property
    def running(self) -> int:
        return self._running

    async def run(self) -> None:
        """Serve submitted jobs until cancelled (start this in the server's task group)."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                await anyio.sleep_forever()
        finally:
            self._group = None

    async def submit(self, name: str, job: Job) -> None:
        """Run `job` in the background when a group is attached, else right now."""
        self._running += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        if self._group is None:
            await self._guarded(name, job)
        else:
            self._group.start_soon(self._guarded, name, job, name=f"background:{name}")

    async def drain(self) -> None:
        """Wait until every submitted job has finished (jobs submitted meanwhile included)."""
        while self._running:
            await self._idle.wait()

    async def _guarded(self, name: str, job: Job) -> None:
        if self._group is not None:
            background()  # this job's own task: the normal lane, whoever submitted it
        try:
            await job()
            self.completed += 1
        except Exception:
            self.failures += 1
            log.exception("background job %s failed", name)
        finally:
            self._running -= 1
            if self._running == 0:
                self._idle.set()


Write = Callable[[Session], None]


class WriteBehind:
    """Small writes nobody waits for (a turn's cached result, its api_logs row), committed together.

    SQLite has one writer: a write per turn issued in the background still makes the *next* turn's own
    write wait for the lock. So while turns keep coming, each `turn.start` takes the queue into its own
    routing write (`take`, `apply`, `put_back`): no commit of its own, no wait. When they stop, a single
    flusher applies what is left in one transaction, once the oldest write has waited `min_delay_s` and no
    foreground request is in flight (or `max_delay_s` later at most). A crash loses at most that fraction of
    a second of cached results (a retried turn then simply runs again). Each write runs in its own savepoint:
    a failing one is logged and dropped without losing the others.
    """

    def __init__(
        self, db: Database, background: BackgroundWork, *, min_delay_s: float = 0.05, max_delay_s: float = 0.25
    ) -> None:
        self._db = db
        self._background = background
        self._min_delay_s = min_delay_s
        self._max_delay_s = max_delay_s
        self._queue: list[tuple[str, Write]] = []
        self._oldest_at: float | None = None  # monotonic time the oldest queued write was queued
        self._scheduled = False
        self.quiet: Callable[[float], Awaitable[None]] | None = None  # e.g. ForegroundGate.wait_quiet
        self.dropped = 0

    async def add(self, name: str, write: Write) -> None:
        self._queue.append((name, write))
        if self._oldest_at is None:
            self._oldest_at = time.monotonic()
        await self._schedule()

    async def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            await self._background.submit("write-behind", self._flush_later)

    async def _flush_later(self) -> None:
        """Flush once the oldest queued write has waited `min_delay_s` and no request is in flight. While
        turns keep coming, each turn's own write takes the queue (`take`), so what is left is always younger
        than that: wait another round rather than commit in the gap before the next turn's write."""
        try:
            if self._background.attached:
                while True:
                    await anyio.sleep(self._min_delay_s)  # let a burst of turns queue up behind one commit
                    if self.quiet is not None:
                        await self.quiet(self._max_delay_s)
                    if self._oldest_at is None or time.monotonic() - self._oldest_at >= self._min_delay_s:
                        break
        finally:
            self._scheduled = False
        await self.flush()

    def take(self) -> list[tuple[str, Write]]:
        """Every queued write, removed from the queue: the caller applies them in its own transaction
        (`apply`) and hands back (`put_back`) those it could not commit."""
        batch, self._queue, self._oldest_at = self._queue, [], None
        return batch

    async def put_back(self, batch: list[tuple[str, Write]]) -> None:
        """Queue again writes taken with `take` that were not committed; the next flush applies them."""
        if batch:
            self._queue[:0] = batch
            self._oldest_at = time.monotonic() - self._min_delay_s  # due at once
            await self._schedule()

    def apply(self, db: Session, batch: list[tuple[str, Write]]) -> list[tuple[str, Write]]:
        """Apply taken writes inside the caller's write transaction, each in a savepoint; returns the writes
        that met another service's lock, to `put_back` after the caller's commit."""
        return self._apply(db, batch, retry=True)

    async def flush(self) -> None:
        batch = self.take()
        if batch:
            again = await self._db.write(lambda db: self._apply(db, batch, retry=True))
            if again:  # after the commit, which let the other service's transaction finish
                await self._db.write(lambda db: self._apply(db, again, retry=False))

    def _apply(self, db: Session, batch: list[tuple[str, Write]], *, retry: bool) -> list[tuple[str, Write]]:
        """Apply the writes, each in a savepoint; returns those to run again in a transaction of their own.

        With several services on one database, two batches may lock the same rows in opposite orders (access
        counts of memories both recalled) and the database cancels one write as a deadlock. Retrying it in
        this transaction would meet the same lock again; after this transaction commits it will not."""
        again: list[tuple[str, Write]] = []
        for name, write in batch:
            try:
                with db.begin_nested():
                    write(db)
            except Exception as exc:
                if retry and is_lock_conflict(exc):
                    log.info("deferred write %s met another service's lock; retried after this batch", name)
                    again.append((name, write))
                    continue
                self.dropped += 1
                log.exception("deferred write %s failed; dropped", name)
        return again
