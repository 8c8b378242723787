"""LearningQueue: feedback window, coalescing, concurrency bound, foreground priority, flush."""

from __future__ import annotations

import anyio
import pytest

from memos_bridge.core.learning.queue import ForegroundGate, LearningQueue

pytestmark = pytest.mark.anyio


class Recorder:
    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, str]] = []
        self.delay = delay
        self.active = 0
        self.peak = 0

    async def __call__(self, episode: str, trigger: str) -> None:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.calls.append((episode, trigger))
        try:
            await anyio.sleep(self.delay)
        finally:
            self.active -= 1


async def test_without_a_loop_nothing_runs_until_flush() -> None:
    chain = Recorder()
    queue = LearningQueue(chain, window_s=30, concurrency=2)
    queue.episode_finalized("ep_1", "explicit")
    queue.episode_finalized("ep_2", "gap")
    assert chain.calls == [] and sorted(queue.pending) == ["ep_1", "ep_2"]
    await queue.flush()
    assert sorted(chain.calls) == [("ep_1", "finalized:explicit"), ("ep_2", "finalized:gap")]
    assert queue.pending == [] and queue.running == []


async def test_run_now_skips_the_window_and_waits_for_the_chain() -> None:
    chain = Recorder(delay=0.01)
    queue = LearningQueue(chain, window_s=30, concurrency=1)
    queue.episode_finalized("ep_1", "explicit")
    await queue.run_now("ep_1", "explicit_feedback")
    assert chain.calls == [("ep_1", "explicit_feedback")] and queue.pending == []


async def test_the_loop_fires_after_the_window_and_respects_concurrency() -> None:
    chain = Recorder(delay=0.05)
    queue = LearningQueue(chain, window_s=0.05, concurrency=2)
    async with anyio.create_task_group() as group:
        group.start_soon(queue.run)
        await anyio.sleep(0.01)
        for i in range(5):
            queue.episode_finalized(f"ep_{i}", "explicit")
        await anyio.sleep(0.02)
        assert chain.calls == []  # still inside the window
        with anyio.fail_after(3):
            while len(chain.calls) < 5 or queue.running:
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    assert chain.peak == 2 and queue.stats.chains_run == 5


async def test_requests_for_a_running_episode_coalesce_into_one_rerun() -> None:
    chain = Recorder(delay=0.05)
    queue = LearningQueue(chain, window_s=0, concurrency=2)
    async with anyio.create_task_group() as group:
        group.start_soon(queue.run)
        await anyio.sleep(0.01)
        queue.episode_finalized("ep_1", "explicit")
        await anyio.sleep(0.02)  # now running
        queue.episode_finalized("ep_1", "gap")
        queue.episode_finalized("ep_1", "gap")
        await queue.run_now("ep_1", "explicit_feedback")  # waits for the run and its one rerun
        group.cancel_scope.cancel()
    assert chain.calls == [("ep_1", "finalized:explicit"), ("ep_1", "explicit_feedback")]
    assert chain.peak == 1


async def test_a_failing_chain_is_counted_and_does_not_stop_the_queue() -> None:
    calls: list[str] = []

    async def chain(episode: str, trigger: str) -> None:
        calls.append(episode)
        if episode == "ep_bad":
            raise RuntimeError("boom")

    queue = LearningQueue(chain, window_s=0, concurrency=1)
    queue.episode_finalized("ep_bad", "explicit")
    queue.episode_finalized("ep_ok", "explicit")
    await queue.flush()
    assert sorted(calls) == ["ep_bad", "ep_ok"]
    assert queue.stats.chains_failed == 1 and "boom" in queue.stats.last_error


async def test_background_waits_for_foreground_requests_with_bounded_patience() -> None:
    gate = ForegroundGate()
    order: list[str] = []

    async def background() -> None:
        await gate.wait_quiet(patience_s=2)
        order.append("background")

    async with anyio.create_task_group() as group:
        with gate.foreground():
            group.start_soon(background)
            await anyio.sleep(0.05)
            order.append("foreground done")
    assert order == ["foreground done", "background"]
    started = anyio.current_time()
    with gate.foreground():  # a request that never ends cannot starve learning forever
        await gate.wait_quiet(patience_s=0.05)
    assert anyio.current_time() - started < 1


class _Cancelled(Exception):
    """Stands for the driver's error when PostgreSQL cancels a statement as a deadlock."""

    sqlstate = "40P01"


async def test_a_chain_the_database_cancels_for_a_lock_conflict_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy.exc import OperationalError

    from memos_bridge.core.learning import queue as queue_module

    monkeypatch.setattr(queue_module, "CHAIN_RETRY_PAUSE_S", 0.0)
    runs: list[str] = []

    async def chain(episode: str, trigger: str) -> None:
        runs.append(episode)
        if episode == "ep_locked" and runs.count(episode) == 1:
            try:
                raise OperationalError("UPDATE policies …", {}, _Cancelled("deadlock detected"))
            except OperationalError as exc:
                raise RuntimeError("the stage's write failed") from exc  # a stage may wrap it
        if episode == "ep_always":
            raise OperationalError("UPDATE traces …", {}, _Cancelled("deadlock detected"))

    queue = LearningQueue(chain, window_s=30, concurrency=1)
    await queue.run_now("ep_locked", "explicit_feedback")
    assert runs == ["ep_locked", "ep_locked"]
    assert queue.stats.chains_run == 1 and queue.stats.chains_failed == 0 and queue.stats.lock_retries == 1

    await queue.run_now("ep_always", "explicit_feedback")  # bounded: it gives up after the last attempt
    assert runs.count("ep_always") == queue_module.CHAIN_ATTEMPTS
    assert queue.stats.chains_failed == 1 and "deadlock" in queue.stats.last_error


async def test_a_chain_failing_for_another_reason_is_not_run_again() -> None:
    runs: list[str] = []

    async def chain(episode: str, trigger: str) -> None:
        runs.append(episode)
        raise ValueError("a bug, not a lock race")

    queue = LearningQueue(chain, window_s=30, concurrency=1)
    await queue.run_now("ep_1", "explicit_feedback")
    assert runs == ["ep_1"] and queue.stats.chains_failed == 1 and queue.stats.lock_retries == 0
