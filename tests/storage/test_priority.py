"""Priority lanes: interactive work is admitted first, background work defers, cancellation never leaks a slot."""

from __future__ import annotations

import time

import anyio
import pytest

from memos_bridge.storage.database import Database
from memos_bridge.storage.priority import (
    SETTLE_S,
    PrioritySlots,
    background,
    interactive,
    interactive_in_flight,
    is_interactive,
    settling,
    yield_to_interactive,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _queue_behind_holder(slots: PrioritySlots, lanes: list[tuple[str, bool]], order: list[str]) -> None:
    """Hold the only slot, queue `lanes` in the given arrival order, then release and record admissions."""
    release = anyio.Event()

    async def holder() -> None:
        async with slots.slot(urgent=False):
            await release.wait()

    async def waiter(name: str, urgent: bool) -> None:
        async with slots.slot(urgent=urgent):
            order.append(name)
            await anyio.sleep(0)

    async with anyio.create_task_group() as group:
        group.start_soon(holder)
        await anyio.wait_all_tasks_blocked()
        for name, urgent in lanes:
            group.start_soon(waiter, name, urgent)
            await anyio.wait_all_tasks_blocked()  # arrival order is the order given
        assert slots.waiting == len(lanes)
        release.set()


async def test_urgent_waiters_are_admitted_before_earlier_normal_ones_fifo_within_a_lane() -> None:
    slots = PrioritySlots(1)
    order: list[str] = []
    lanes = [("n1", False), ("n2", False), ("u1", True), ("n3", False), ("u2", True)]
    await _queue_behind_holder(slots, lanes, order)
    assert order == ["u1", "u2", "n1", "n2", "n3"]
    assert slots.waited == {"urgent": 2, "normal": 3}
    assert slots.waiting == 0


async def test_the_lane_comes_from_the_interactive_mark_unless_given() -> None:
    slots = PrioritySlots(1)
    order: list[str] = []
    release = anyio.Event()

    async def holder() -> None:
        async with slots.slot():
            await release.wait()

    async def marked(name: str, urgent_mark: bool) -> None:
        if urgent_mark:
            with interactive():
                async with slots.slot():
                    order.append(name)
        else:
            async with slots.slot():
                order.append(name)

    async with anyio.create_task_group() as group:
        group.start_soon(holder)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(marked, "plain", False)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(marked, "host", True)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert order == ["host", "plain"]


async def test_a_cancelled_waiter_leaves_the_queue_and_a_handed_slot_passes_on() -> None:
    slots = PrioritySlots(1)
    admitted: list[str] = []
    release = anyio.Event()

    async def holder() -> None:
        async with slots.slot():
            await release.wait()

    async def waiter(name: str) -> None:
        async with slots.slot():
            admitted.append(name)

    async with anyio.create_task_group() as group:
        group.start_soon(holder)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as doomed:
            doomed.cancel()
            async with anyio.create_task_group() as inner:
                inner.start_soon(waiter, "cancelled")
        group.start_soon(waiter, "next")
        await anyio.wait_all_tasks_blocked()
        assert slots.waiting == 1  # the cancelled waiter is gone from the queue
        release.set()
    assert admitted == ["next"]

    # The slot is handed to a waiter that is cancelled before it runs: it must reach the next waiter.
    slots = PrioritySlots(1)
    admitted.clear()
    release = anyio.Event()
    scope = anyio.CancelScope()

    async def handing_holder() -> None:
        async with slots.slot():
            await release.wait()
            scope.cancel()  # the first waiter is cancelled, and before it can run the slot is handed to it

    with anyio.fail_after(5):  # a leaked slot would leave "after" waiting forever
        async with anyio.create_task_group() as group:
            group.start_soon(handing_holder)
            await anyio.wait_all_tasks_blocked()

            async def cancelled_after_handoff() -> None:
                with scope:
                    async with slots.slot():
                        admitted.append("never")

            group.start_soon(cancelled_after_handoff)
            await anyio.wait_all_tasks_blocked()
            group.start_soon(waiter, "after")
            await anyio.wait_all_tasks_blocked()
            release.set()
    assert admitted == ["after"]
    async with slots.slot():  # and the slot count is whole again
        assert slots.waiting == 0


async def test_background_work_waits_for_interactive_work_with_bounded_patience() -> None:
    assert interactive_in_flight() == 0
    await yield_to_interactive()  # nothing in flight: returns at once

    finished = anyio.Event()
    events: list[str] = []

    async def host_call() -> None:
        with interactive():
            assert is_interactive()
            await yield_to_interactive()  # interactive work never waits on itself
            await anyio.sleep(0.05)
            events.append("host done")
        finished.set()

    async def background_job() -> None:
        await yield_to_interactive(patience_s=5)
        events.append("background ran")

    async with anyio.create_task_group() as group:
        group.start_soon(host_call)
        await anyio.sleep(0.01)
        group.start_soon(background_job)
    assert events == ["host done", "background ran"]
    assert interactive_in_flight() == 0

    # Patience bounds the wait when interactive work never stops.
    with interactive():
        inner_flag: list[bool] = []

        async def starved() -> None:
            background()
            inner_flag.append(is_interactive())
            with anyio.fail_after(2):
                await yield_to_interactive(patience_s=0.05)

        async with anyio.create_task_group() as group:
            group.start_soon(starved)
        assert inner_flag == [False]  # background() cleared the inherited mark in that task only
        assert is_interactive()


async def _after_a_host_call() -> tuple[float, float]:
    """Run one short interactive block; return (monotonic time it ended, time a background yield took)."""
    with interactive():
        await anyio.sleep(0.001)
    ended = time.monotonic()
    await yield_to_interactive()
    return ended, time.monotonic() - ended


async def test_settling_work_starts_only_after_a_calm_moment_and_plain_background_work_does_not_wait() -> None:
    _, plain_wait = await _after_a_host_call()
    assert plain_wait < SETTLE_S / 2  # nothing in flight: ordinary background work goes at once

    with settling(budget_s=5):
        ended, settled_wait = await _after_a_host_call()
        assert time.monotonic() - ended >= SETTLE_S  # it waited until the host had been quiet for SETTLE_S
        assert settled_wait < SETTLE_S * 10
        started = time.monotonic()
        await yield_to_interactive()  # already calm: no further wait
        assert time.monotonic() - started < SETTLE_S / 2


async def test_a_burst_of_host_calls_holds_settling_work_back_until_it_ends() -> None:
    order: list[str] = []

    async def burst() -> None:
        for _ in range(8):  # back to back, gaps far shorter than SETTLE_S
            with interactive():
                await anyio.sleep(0.005)
            await anyio.sleep(0.0005)
        order.append("burst over")

    async def learning_unit() -> None:
        with settling(budget_s=5):
            await anyio.sleep(0.002)  # the burst is under way
            await yield_to_interactive(patience_s=5)
            order.append("learning ran")

    async with anyio.create_task_group() as group:
        group.start_soon(burst)
        group.start_soon(learning_unit)
    assert order == ["burst over", "learning ran"]


async def test_settling_stops_when_its_budget_is_spent_and_patience_still_bounds_every_wait() -> None:
    with settling(budget_s=0.0):  # budget spent at once: behaves as plain background work
        _, wait = await _after_a_host_call()
        assert wait < SETTLE_S / 2

    stop = anyio.Event()

    async def endless_burst() -> None:
        while not stop.is_set():
            with interactive():
                await anyio.sleep(0.003)
            await anyio.sleep(0.0005)

    async with anyio.create_task_group() as group:
        group.start_soon(endless_burst)
        await anyio.sleep(0.01)
        with settling(budget_s=5), anyio.fail_after(2):
            started = time.monotonic()
            await yield_to_interactive(patience_s=0.1)  # never calm: patience ends the wait
            assert 0.09 <= time.monotonic() - started < 1
        stop.set()


async def test_database_admits_an_interactive_write_ahead_of_queued_background_writes(tmp_path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'p.db'}")
    db.open()
    try:
        order: list[str] = []
        gate = anyio.Event()
        started = anyio.Event()

        def blocking_write(_session) -> None:
            anyio.from_thread.run_sync(started.set)
            anyio.from_thread.run(gate.wait)

        async def background_write(name: str) -> None:
            await db.write(lambda _s: order.append(name))

        async def host_write() -> None:
            with interactive():
                await db.write(lambda _s: order.append("host"))

        async with anyio.create_task_group() as group:
            group.start_soon(db.write, blocking_write)
            await started.wait()
            for name in ("capture-1", "capture-2"):
                group.start_soon(background_write, name)
                await anyio.sleep(0.01)
            group.start_soon(host_write)
            await anyio.sleep(0.01)
            gate.set()
        assert order[0] == "host" and sorted(order[1:]) == ["capture-1", "capture-2"]
    finally:
        db.close()
