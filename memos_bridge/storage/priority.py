"""Who goes first when several tasks wait for the database: a host waiting on `turn.start`, or capture.

SQLite has one writer and the service a few reader threads; under many concurrent hosts these slots are
the queue every request stands in. A plain FIFO makes a `turn.start` (the call a host blocks its agent
on) wait behind every queued `turn.end` capture and background learning write: with 50 busy hosts that
was seconds. So work is tagged with a lane and the urgent lane is always admitted first:

* `interactive()` marks the current task (and the tasks it starts, which inherit the context) as urgent:
  `turn.start` uses it around its routing write, its retrieval reads and its embedding;
* `background()` clears the mark: work a request hands to the background (a deferred write, a learning
  chain) must not jump the queue just because the request that queued it did;
* `PrioritySlots` is the counting semaphore with two FIFO lanes that honours the mark;
* `settling(budget_s)` marks work that should wait for a calm moment, not just for a gap: a learning
  chain. Background work yields whenever interactive work is in flight, but a host sending turns back to
  back leaves gaps of a millisecond, and a unit of work started in such a gap overlaps the next
  `turn.start` whole: on two cores that made a `turn.start` 15-28 % slower at p95 beside learning. Settling
  work starts a unit only after `SETTLE_S` without interactive work, which real turns (an LLM answers in
  between) give at once and a burst of turns does not. The budget bounds how long a chain keeps deferring
  this way under load that never pauses; after it, the chain only yields as other background work does.

The mark lives in a `ContextVar`, so nothing has to pass a flag through every layer between the handler
and the storage call, and a task's mark can never leak into another request's task.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar

import anyio
import anyio.lowlevel

_URGENT: ContextVar[bool] = ContextVar("memos_bridge_urgent", default=False)
#: Until when (monotonic seconds) the current task's storage work waits for a calm moment (`settling`).
_SETTLE_UNTIL: ContextVar[float] = ContextVar("memos_bridge_settle_until", default=-math.inf)

#: How long background work defers to interactive work at most, so it still progresses under any load.
YIELD_PATIENCE_S = 0.25

#: How long no interactive work must have run before settling work starts a unit. A `turn.start` took
#: 23-34 ms (p50-p95) at 10k steps on a 2-core machine; the gap between two turns a burst sends back to
#: back is about a millisecond, and real turns are seconds apart (the agent's LLM answers in between).
SETTLE_S = 0.02


class _InFlight:
    """How many interactive blocks run now, and who waits for the count to reach zero (event-loop side)."""

    def __init__(self) -> None:
        self.count = 0
        self.waiters: list[anyio.Event] = []
        self.left_at = -math.inf  # monotonic time the count last fell to zero

    def leave(self) -> None:
        self.count -= 1
        if not self.count:
            self.left_at = time.monotonic()
            waiters, self.waiters = self.waiters, []
            for event in waiters:
                event.set()


_IN_FLIGHT = _InFlight()


def is_interactive() -> bool:
    """True inside work a host is waiting on right now."""
    return _URGENT.get()


@contextlib.contextmanager
def interactive() -> Iterator[None]:
    """Run the block (and tasks started from it) in the urgent lane."""
    token = _URGENT.set(True)
    _IN_FLIGHT.count += 1
    try:
        yield
    finally:
        _URGENT.reset(token)
        _IN_FLIGHT.leave()


@contextlib.contextmanager
def settling(budget_s: float) -> Iterator[None]:
    """For `budget_s` from now, the block's storage work starts only after `SETTLE_S` of calm (see the module
    docstring); afterwards, and outside the block, it yields as any background work does."""
    token = _SETTLE_UNTIL.set(time.monotonic() + budget_s)
    try:
        yield
    finally:
        _SETTLE_UNTIL.reset(token)


def _calm_still_needed() -> float:
    """Seconds the current task must still wait for calm before it may start a unit (0: go ahead)."""
    now = time.monotonic()
    until = _SETTLE_UNTIL.get()
    if now >= until:
        return 0.0
    return max(0.0, min(_IN_FLIGHT.left_at + SETTLE_S - now, until - now))


def interactive_in_flight() -> int:
    """Interactive blocks running now (diagnostics, tests)."""
    return _IN_FLIGHT.count


async def yield_to_interactive(patience_s: float = YIELD_PATIENCE_S) -> None:
    """Background work calls this before it takes the CPU: wait while a host's call is in flight.

    Queue order alone is not enough: the service is one Python process, and a capture running in a thread
    competes with `turn.start` for the interpreter lock and the cores however the queues are ordered.
    Waiting at most `patience_s` keeps background work moving when interactive calls never stop.
    Interactive work itself never waits here. Inside `settling`, the wait lasts until the interactive work
    has been over for `SETTLE_S`.
    """
    if is_interactive() or (not _IN_FLIGHT.count and not _calm_still_needed()):
        return
    with anyio.move_on_after(patience_s):
        while True:
            if _IN_FLIGHT.count:
                await _until_none_in_flight()
                continue
            calm_needed = _calm_still_needed()
            if not calm_needed:
                return
            await anyio.sleep(calm_needed)


async def _until_none_in_flight() -> None:
    quiet = anyio.Event()
    _IN_FLIGHT.waiters.append(quiet)
    try:
        await quiet.wait()
    finally:
        if quiet in _IN_FLIGHT.waiters:
            _IN_FLIGHT.waiters.remove(quiet)


def background() -> None:
    """Put the current task in the normal lane for the rest of its life.

    Called at the start of a background job's task: the task runs in a copy of the context it was started
    from, so this changes that task only.
    """
    _URGENT.set(False)


class PrioritySlots:
    """`total` slots; a waiter in the urgent lane is admitted before any waiter in the normal lane.

    Within a lane, first come first served. A released slot is handed straight to the next waiter (it
    never becomes free in between), so a newcomer cannot overtake someone already waiting in its own or
    a higher lane. Must be used from one event loop.
    """

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError("total must be >= 1")
        self.total = total
        self._free = total
        self._urgent: deque[anyio.Event] = deque()
        self._normal: deque[anyio.Event] = deque()
        #: Admissions per lane that had to wait (diagnostics; the tests check the order).
        self.waited = {"urgent": 0, "normal": 0}

    @property
    def waiting(self) -> int:
        return len(self._urgent) + len(self._normal)

    @contextlib.asynccontextmanager
    async def slot(self, urgent: bool | None = None) -> AsyncIterator[None]:
        """Hold one slot for the block; `urgent=None` takes the lane from the current task's mark."""
        lane_urgent = is_interactive() if urgent is None else urgent
        await self._acquire(lane_urgent)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, urgent: bool) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._free:  # a free slot means nobody waits: releases hand slots to waiters directly
            self._free -= 1
            await anyio.lowlevel.cancel_shielded_checkpoint()  # yield, but never lose the slot taken
            return
        lane = self._urgent if urgent else self._normal
        admitted = anyio.Event()
        lane.append(admitted)
        self.waited["urgent" if urgent else "normal"] += 1
        try:
            await admitted.wait()
        except BaseException:
            if admitted.is_set():
                self._release()  # the slot was handed over as we were cancelled: pass it on
            else:
                lane.remove(admitted)
            raise

    def _release(self) -> None:
        for lane in (self._urgent, self._normal):
            if lane:
                lane.popleft().set()  # the slot goes to that waiter; `_free` is unchanged
                return
        self._free += 1
