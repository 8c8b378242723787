"""The background learning queue: when an episode ends, run its chain (reward → L2 → …) in order.

Rules it enforces, and why:
* **Feedback window.** A finished episode waits `feedback_window_s` before it is scored, because the
  user's or verifier's verdict usually arrives right after the task; scoring twice costs LLM calls.
  Explicit feedback (`run_now`) cancels the wait and runs the chain at once, also for an episode that was
  scored long ago (late feedback re-scores it and re-triggers everything downstream).
* **One chain per episode at a time.** A request for an episode whose chain is running marks it dirty; the
  chain runs once more afterwards with the newest data (coalesced), so stages never race on one episode.
* **Bounded.** At most `concurrency` chains run at once.
* **Foreground first.** Before each stage a chain waits (up to `FOREGROUND_PATIENCE_S`) until no
  `turn.start`/`turn.end` is in flight: learning must not slow the agent's next answer down.
* **A lost lock race runs again.** On a shared database another service's transaction may hold rows the chain
  writes, and PostgreSQL cancels one of the two (a deadlock or serialization failure). Every stage is
  idempotent (feedback already absorbed is skipped), so the chain runs again, up to `CHAIN_ATTEMPTS` times.
* **Drained by flush.** `flush()` fires every waiting episode now and returns when nothing is pending or
  running: `memory.flush`, `session.close` and shutdown call it, so "flushed" means "learned".
* **Once across services.** When several services share one database (PostgreSQL), each has its own queue,
  and the same episode may be requested in more than one (it ended in one, feedback arrived in another,
  both swept or recovered it). With `claims` set, every request is also recorded in the database when it is
  made, and a chain is claimed there before it runs (`core/learning/claims.py`): a request that a run in any
  service started after it has answered runs nothing (`covered`); a run in progress elsewhere is waited for.
  Explicit feedback (`run_now`) always runs once more, as it does in one process. The claim is per run: a
  request made after a run started is answered by a later run, wherever it is made.

Without an attached task group (`run()` not started: tests driving the core directly, one-shot tools)
nothing runs by itself: `flush()` and `run_now()` run the chains inline, which keeps tests deterministic.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc

from memos_bridge.core.learning.claims import ChainClaims
from memos_bridge.storage.claims import Claim
from memos_bridge.storage.locks import is_lock_conflict
from memos_bridge.storage.priority import background

log = logging.getLogger(__name__)

FOREGROUND_PATIENCE_S = 2.0
#: Runs of one chain when the database cancels it for a lock conflict with another service, and the pause
#: before the next run (times the attempt).
CHAIN_ATTEMPTS = 3
CHAIN_RETRY_PAUSE_S = 0.2
REMEMBERED_REQUESTS = 10_000  # episodes whose last recorded request generation is kept for their next run

Chain = Callable[[str, str], Awaitable[object]]  # (episode id, trigger) -> report


class ForegroundGate:
    """Counts foreground requests in flight; background work waits for a quiet moment."""

    def __init__(self) -> None:
        self._active = 0
        self._quiet = anyio.Event()
        self._quiet.set()
        #: Foreground requests ever entered: a change tells that a turn ran meanwhile (stage timings).
        self.entered = 0

    @property
    def active(self) -> int:
        return self._active

    @contextmanager
    def foreground(self) -> Iterator[None]:
        self._active += 1
        self.entered += 1
        if self._active == 1:
            self._quiet = anyio.Event()
        try:
            yield
        finally:
            self._active -= 1
            if self._active == 0:
                self._quiet.set()

    async def wait_quiet(self, patience_s: float = FOREGROUND_PATIENCE_S) -> None:
        """Wait until no foreground request runs, or `patience_s` at most (background must progress too)."""
        if self._active:
            with anyio.move_on_after(patience_s):
                await self._quiet.wait()


@dataclass
class _Pending:
    trigger: str
    due: float  # monotonic seconds


@dataclass
class QueueStats:
    chains_run: int = 0
    chains_failed: int = 0
    coalesced: int = 0
    covered: int = 0  # requests another service's run (or an earlier one) had answered already
    lock_retries: int = 0  # chains run again after the database cancelled them for a lock conflict
    last_error: str = ""
    by_trigger: dict[str, int] = field(default_factory=dict)


class LearningQueue:
    def __init__(
        self,
        chain: Chain,
        *,
        window_s: float,
        concurrency: int,
        gate: ForegroundGate | None = None,
        clock: Callable[[], float] = time.monotonic,
        claims: ChainClaims | None = None,
    ) -> None:
        self._chain = chain
        self._window_s = window_s
        self._limiter = anyio.CapacityLimiter(concurrency)
        self.gate = gate or ForegroundGate()
        self._clock = clock
        self._pending: dict[str, _Pending] = {}
        self._running: dict[str, anyio.Event] = {}
        self._dirty: dict[str, str] = {}  # episode -> trigger of the rerun
        self._group: anyio.abc.TaskGroup | None = None
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self.stats = QueueStats()
        #: Database claims when several services share the database (see the module docstring).
        self.claims = claims
        self._requested: dict[str, int] = {}  # episode -> newest request generation recorded, not yet run
        self._requesting: dict[str, int] = {}  # episode -> requests being recorded right now
        self._recorded: dict[str, anyio.Event] = {}  # episode -> set when none is being recorded any more
        self._forced: set[str] = set()  # episodes whose next run must run even if another run answered it

    # ------------------------------------------------------------------ inspection

    @property
    def pending(self) -> list[str]:
        return list(self._pending)

    @property
    def running(self) -> list[str]:
        return list(self._running)

    # ------------------------------------------------------------------ requests

    def episode_finalized(self, episode_id: str, reason: str) -> None:
        """An episode ended: score it after the feedback window (or at once when the window is 0)."""
        trigger = f"finalized:{reason}"
        self._record_request_soon(episode_id)
        if episode_id in self._running:
            self._mark_dirty(episode_id, trigger)
            return
        self._pending[episode_id] = _Pending(trigger, self._clock() + self._window_s)
        self._touch()

    async def run_now(self, episode_id: str, trigger: str) -> None:
        """Run the episode's chain now and return when it (and any rerun it caused) has finished."""
        self._pending.pop(episode_id, None)
        if self.claims is not None:
            self._forced.add(episode_id)
            try:
                await self._record_request(episode_id)
            except Exception:  # the run records a request of its own
                log.exception("could not record the learning request for %s", episode_id)
        running = self._running.get(episode_id)
        if running is not None:
            self._mark_dirty(episode_id, trigger)
            while episode_id in self._running:
                await self._running[episode_id].wait()
            return
        await self._run_chain(episode_id, trigger)

    async def flush(self) -> None:
        """Fire every waiting episode now and wait until no chain is pending or running."""
        while self._pending or self._running:
            due = list(self._pending.items())
            self._pending.clear()
            if self._group is not None:
                for episode_id, entry in due:
                    self._start(episode_id, entry.trigger)
            else:
                for episode_id, entry in due:
                    await self._run_chain(episode_id, entry.trigger)
            if self._running:
                await self._idle.wait()

    # ------------------------------------------------------------------ the server's loop

    async def run(self) -> None:
        """Fire pending episodes when their window ends (start this in the server's task group)."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                while True:
                    now = self._clock()
                    for episode_id, entry in list(self._pending.items()):
                        if entry.due <= now:
                            del self._pending[episode_id]
                            self._start(episode_id, entry.trigger)
                    next_due = min((e.due for e in self._pending.values()), default=math.inf)
                    self._wake = anyio.Event()
                    with anyio.move_on_after(max(0.0, next_due - self._clock()) if next_due < math.inf else None):
                        await self._wake.wait()
        finally:
            self._group = None

    # ------------------------------------------------------------------ internals

    def _touch(self) -> None:
        self._wake.set()

    def _mark_dirty(self, episode_id: str, trigger: str) -> None:
        self._dirty[episode_id] = trigger
        self.stats.coalesced += 1

    def _start(self, episode_id: str, trigger: str) -> None:
        if episode_id in self._running:
            self._mark_dirty(episode_id, trigger)
            return
        assert self._group is not None
        self._claim(episode_id)
        self._group.start_soon(self._run_started, episode_id, trigger, name=f"learning:{episode_id}")

    def _claim(self, episode_id: str) -> None:
        self._running[episode_id] = anyio.Event()
        self._idle = anyio.Event() if self._idle.is_set() else self._idle

    async def _run_chain(self, episode_id: str, trigger: str) -> None:
        self._claim(episode_id)
        await self._run_claimed(episode_id, trigger)

    async def _run_started(self, episode_id: str, trigger: str) -> None:
        """A chain's own task: it runs in the normal lane even when a host's `turn.start` triggered it."""
        background()
        await self._run_claimed(episode_id, trigger)

    async def _run_claimed(self, episode_id: str, trigger: str) -> None:
        done = self._running[episode_id]
        try:
            while True:
                await self._run_coordinated(episode_id, trigger)
                rerun = self._dirty.pop(episode_id, None)
                if rerun is None:
                    break
                trigger = rerun
        finally:
            del self._running[episode_id]
            done.set()
            if not self._running:
                self._idle.set()

    # ------------------------------------------------------------------ several services, one database

    def _record_request_soon(self, episode_id: str) -> None:
        """Record the request in the database now, in the background (the caller cannot wait: it is the
        session's synchronous hook). Without a running queue the run records it itself when it starts."""
        if self.claims is None or self._group is None:
            return
        self._requesting[episode_id] = self._requesting.get(episode_id, 0) + 1
        if self._requesting[episode_id] == 1:
            self._recorded[episode_id] = anyio.Event()
        self._group.start_soon(self._record_request_task, episode_id, name=f"learning-request:{episode_id}")

    async def _record_request_task(self, episode_id: str) -> None:
        try:
            await self._record_request(episode_id)
        except Exception:  # the run records a request of its own when this one is missing
            log.exception("could not record the learning request for %s", episode_id)
        finally:
            left = self._requesting[episode_id] - 1
            if left:
                self._requesting[episode_id] = left
            else:
                del self._requesting[episode_id]
                self._recorded.pop(episode_id).set()

    async def _record_request(self, episode_id: str) -> int:
        assert self.claims is not None
        generation = await self.claims.request(episode_id)
        self._requested[episode_id] = max(self._requested.pop(episode_id, 0), generation)
        while len(self._requested) > REMEMBERED_REQUESTS:  # a forgotten one is recorded again by its run
            self._requested.pop(next(iter(self._requested)))
        return generation

    async def _run_coordinated(self, episode_id: str, trigger: str) -> None:
        """Run the chain once, claimed in the database when it is shared (see the module docstring)."""
        claims = self.claims
        if claims is None:
            async with self._limiter:
                await self._run_once(episode_id, trigger)
            return
        recording = self._recorded.get(episode_id)
        if recording is not None:
            await recording.wait()  # the newest request must be part of what this run answers
        generation = self._requested.pop(episode_id, None)
        force = episode_id in self._forced
        self._forced.discard(episode_id)
        while True:
            async with self._limiter:
                try:
                    if generation is None:
                        generation = await claims.request(episode_id)
                    state = await claims.claim(episode_id, generation, force=force)
                except Exception as exc:  # like a failing chain: counted and logged, the queue goes on
                    self.stats.chains_failed += 1
                    self.stats.last_error = f"claim: {type(exc).__name__}: {exc}"[:300]
                    log.exception("could not claim the learning chain for %s", episode_id)
                    return
                if state is Claim.CLAIMED:
                    await self._run_leased(claims, episode_id, trigger)
                    return
            if state is Claim.COVERED:
                self.stats.covered += 1
                log.debug("learning chain for %s: request %d answered already", episode_id, generation)
                return
            await anyio.sleep(claims.poll_s)  # another service runs this episode's chain: wait for its end

    async def _run_leased(self, claims: ChainClaims, episode_id: str, trigger: str) -> None:
        """Run the claimed chain, renewing the lease meanwhile; release the claim however the run ends."""
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._keep_lease, claims, episode_id)
                await self._run_once(episode_id, trigger)
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await claims.release(episode_id)
                except Exception:  # the lease runs out by itself
                    log.exception("could not release the learning claim on %s", episode_id)

    @staticmethod
    async def _keep_lease(claims: ChainClaims, episode_id: str) -> None:
        while True:
            await anyio.sleep(claims.lease_s / 3)
            try:
                if not await claims.renew(episode_id):
                    log.warning("learning claim on %s expired and was taken over; this run goes on", episode_id)
                    return
            except Exception:
                log.exception("could not renew the learning claim on %s", episode_id)

    async def _run_once(self, episode_id: str, trigger: str) -> None:
        self.stats.by_trigger[trigger.split(":")[0]] = self.stats.by_trigger.get(trigger.split(":")[0], 0) + 1
        for attempt in range(1, CHAIN_ATTEMPTS + 1):
            try:
                await self._chain(episode_id, trigger)
                self.stats.chains_run += 1
                return
            except Exception as exc:
                if attempt < CHAIN_ATTEMPTS and is_lock_conflict(exc):
                    self.stats.lock_retries += 1
                    log.info(
                        "learning chain for %s lost a lock race (attempt %d); running it again", episode_id, attempt
                    )
                    await anyio.sleep(CHAIN_RETRY_PAUSE_S * attempt)
                    continue
                self._failed(episode_id, trigger, exc)
                return

    def _failed(self, episode_id: str, trigger: str, exc: Exception) -> None:
        """A failing chain is counted and logged; the queue goes on with the others."""
        self.stats.chains_failed += 1
        self.stats.last_error = f"{type(exc).__name__}: {exc}"[:300]
        log.error("learning chain for %s failed (trigger %s)", episode_id, trigger, exc_info=exc)
