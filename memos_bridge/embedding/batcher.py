"""Coalesce concurrent async requests into batches that run in one worker thread.

Why: a model call has a fixed cost (thread hop, session run, tokenizer setup) that dominates for a
few texts; 200 concurrent `embed()` calls of 2 texts each would otherwise run 200 tiny batches one
after another. Here, requests that arrive while a batch is running wait and then go together in the
next batch, so throughput under load approaches that of one large batch while an idle service still
answers a single call straight away (no timer, no added latency).

How, without a background task (which would tie the batcher to one task group and need a start/stop
lifecycle): the first caller becomes the *leader* and runs batches in a worker thread until its own
request is done; then it hands leadership to the oldest waiting request, whose task wakes up and
carries on. Every caller therefore does its share of the driving, and nothing runs when nobody waits.

Use from one event loop at a time (the service has one); `process` itself may also be called directly
from other threads by the owner (e.g. a synchronous path), as long as it is thread-safe.

Cancellation: a waiting caller that is cancelled is dropped from the queue (or, if its request is
already running, its result is discarded). A cancelled leader still lets its running batch finish
(the thread cannot be interrupted), delivers the results to every request in it, and passes
leadership on, so no waiter is ever stranded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

import anyio
import anyio.lowlevel

P = TypeVar("P")
R = TypeVar("R")


@dataclass(eq=False)
class _Request(Generic[P, R]):
    payload: P
    size: int
    done: anyio.Event = field(default_factory=anyio.Event)
    finished: bool = False
    result: R | None = None
    error: BaseException | None = None
    #: True while this request's task is (or is about to become) the leader.
    lead: bool = False


class BatchInterrupted(RuntimeError):
    """The batch holding a request ended without a result (should not happen; defensive)."""


class MicroBatcher(Generic[P, R]):
    """`await submit(payload, size)` → `process([payloads…])[i]`, with concurrent submits coalesced.

    `process` runs in a worker thread and must return one result per payload, in order; if it raises,
    every request of that batch gets the exception. A batch holds whole requests, at most `max_items`
    of `size` in total, except that a single larger request still goes alone.
    """

    def __init__(self, process: Callable[[list[P]], list[R]], max_items: int) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        self._process = process
        self.max_items = max_items
        self._lock = threading.Lock()
        self._pending: list[_Request[P, R]] = []
        self._leading = False
        #: Number of `process` calls and of requests served, for tests and diagnostics.
        self.batches = 0
        self.requests = 0

    async def submit(self, payload: P, size: int) -> R:
        request: _Request[P, R] = _Request(payload, size)
        with self._lock:
            self._pending.append(request)
            request.lead = lead = not self._leading
            self._leading = True
        if not lead:
            try:
                await request.done.wait()
            except BaseException:
                self._leave(request)
                raise
            if not request.lead:
                return self._outcome(request)
        try:
            await self._lead(request)
        finally:
            self._leave(request)
        return self._outcome(request)

    async def _lead(self, own: _Request[P, R]) -> None:
        while not own.finished:
            # Let tasks scheduled in the same tick enqueue first, so a burst forms one batch.
            await anyio.lowlevel.checkpoint()
            batch = self._take()
            if not batch:
                return
            try:
                await anyio.to_thread.run_sync(self._run, batch)
            finally:
                for request in batch:
                    if not request.finished:
                        request.error = BatchInterrupted("embedding batch ended without a result")
                        request.finished = True
                    request.done.set()

    def _take(self) -> list[_Request[P, R]]:
        with self._lock:
            queue = self._pending
            batch: list[_Request[P, R]] = []
            total = 0
            while queue and (not batch or total + queue[0].size <= self.max_items):
                request = queue.pop(0)
                batch.append(request)
                total += request.size
            return batch

    def _run(self, batch: list[_Request[P, R]]) -> None:
        """Worker thread: results are stored on the requests here, so they survive a cancelled leader."""
        self.batches += 1
        self.requests += len(batch)
        try:
            results = self._process([request.payload for request in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"process returned {len(results)} results for {len(batch)} payloads")
        except BaseException as exc:
            for request in batch:
                request.error = exc
                request.finished = True
            return
        for request, result in zip(batch, results, strict=True):
            request.result = result
            request.finished = True

    def _leave(self, request: _Request[P, R]) -> None:
        """Drop `request` from the queue; if it held leadership, pass it to the oldest waiter."""
        with self._lock:
            if request in self._pending:
                self._pending.remove(request)
            if not request.lead:
                return
            request.lead = False
            if self._pending:
                successor = self._pending[0]
                successor.lead = True
                successor.done.set()
            else:
                self._leading = False

    @staticmethod
    def _outcome(request: _Request[P, R]) -> R:
        if request.error is not None:
            raise request.error
        if not request.finished:
            raise BatchInterrupted("embedding request left the queue without a result")
        return cast(R, request.result)
