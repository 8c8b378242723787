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
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

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
