"""MicroBatcher with a fake `process`: coalescing, ordering, limits, errors, cancellation."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from memos_bridge.embedding.batcher import MicroBatcher

pytestmark = pytest.mark.anyio


class Recorder:
    """A `process` that doubles numbers and records the batches it was given."""

    def __init__(self, delay: float = 0.01, fail_on: int | None = None) -> None:
        self.delay = delay
        self.fail_on = fail_on
        self.batches: list[list[list[int]]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, payloads: list[list[int]]) -> list[list[int]]:
        self.gate.wait(5)
        self.batches.append(payloads)
        time.sleep(self.delay)
        if self.fail_on is not None and any(self.fail_on in p for p in payloads):
            raise ValueError("boom")
        return [[2 * x for x in p] for p in payloads]


async def test_single_request_runs_alone() -> None:
    rec = Recorder()
    batcher = MicroBatcher(rec, max_items=10)
    assert await batcher.submit([1, 2], 2) == [2, 4]
    assert rec.batches == [[[1, 2]]]


async def test_concurrent_requests_are_coalesced_and_answered_in_order() -> None:
    rec = Recorder(delay=0.02)
    batcher = MicroBatcher(rec, max_items=1000)
    results: dict[int, list[int]] = {}

    async def call(i: int) -> None:
        results[i] = await batcher.submit([i, i + 1000], 2)

    async with anyio.create_task_group() as tg:
        for i in range(100):
            tg.start_soon(call, i)
    assert results == {i: [2 * i, 2 * (i + 1000)] for i in range(100)}
    assert len(rec.batches) <= 3  # not 100
    assert batcher.requests == 100
    assert batcher._pending == [] and not batcher._leading


async def test_batches_respect_max_items_but_never_split_a_request() -> None:
    rec = Recorder()
    rec.gate.clear()  # hold the first batch so that all the others queue up behind it
    batcher = MicroBatcher(rec, max_items=5)

    async def call(n: int) -> None:
        assert await batcher.submit(list(range(n)), n) == [2 * x for x in range(n)]

    async with anyio.create_task_group() as tg:
        for n in (1, 2, 2, 2, 9, 1):
            tg.start_soon(call, n)
        await anyio.sleep(0.05)
        rec.gate.set()
    sizes = [sum(len(p) for p in batch) for batch in rec.batches]
    assert sum(sizes) == 17
    assert all(size <= 5 for size in sizes if size != 9)
    assert 9 in sizes  # the oversized request went alone


async def test_an_error_reaches_only_the_requests_of_its_batch() -> None:
    rec = Recorder(fail_on=666)
    batcher = MicroBatcher(rec, max_items=1)  # one request per batch
    outcomes: dict[int, object] = {}

    async def call(i: int) -> None:
        try:
            outcomes[i] = await batcher.submit([i], 1)
        except ValueError as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        for i in (1, 666, 3):
            tg.start_soon(call, i)
    assert outcomes[1] == [2] and outcomes[3] == [6]
    assert isinstance(outcomes[666], ValueError)
    assert await batcher.submit([5], 1) == [10]  # still usable


async def test_cancelled_waiter_is_dropped_and_others_proceed() -> None:
    rec = Recorder()
    rec.gate.clear()
    batcher = MicroBatcher(rec, max_items=100)
    results: dict[str, list[int]] = {}

    async def call(name: str, value: int) -> None:
        results[name] = await batcher.submit([value], 1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "leader", 1)
        await anyio.sleep(0.02)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as inner:
                inner.start_soon(call, "cancelled", 2)
                await anyio.sleep(0.02)
                scope.cancel()
        tg.start_soon(call, "later", 3)
        await anyio.sleep(0.02)
        rec.gate.set()
    assert results == {"leader": [2], "later": [6]}
    assert all([2] not in batch for batch in rec.batches)  # the cancelled payload never ran


async def test_cancelled_leader_still_delivers_and_hands_over() -> None:
    rec = Recorder()
    rec.gate.clear()
    batcher = MicroBatcher(rec, max_items=100)
    results: dict[str, list[int]] = {}

    async def call(name: str, value: int) -> None:
        results[name] = await batcher.submit([value], 1)

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as leader_scope:
            async with anyio.create_task_group() as inner:
                inner.start_soon(call, "leader", 1)  # becomes leader, its batch blocks on the gate
                await anyio.sleep(0.02)
                tg.start_soon(call, "waiter", 2)  # queued behind the running batch
                await anyio.sleep(0.02)
                leader_scope.cancel()
                rec.gate.set()  # let the batch finish
    # The leader's own batch had already run: it may return its result or see the cancellation.
    assert results["waiter"] == [4] and results.get("leader") in (None, [2])
    assert [[1]] in rec.batches and [[2]] in rec.batches
    assert not batcher._leading and batcher._pending == []
