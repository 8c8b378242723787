"""Learning-chain claims in the database, on SQLite and on a real PostgreSQL: several learning queues (one per
service) that share a database run an episode's chain once per request, never two runs of one episode at
once, and again for a request made after a run started (late feedback)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest
from sqlalchemy.orm import Session

from memos_bridge.core.learning.claims import ChainClaims
from memos_bridge.core.learning.queue import LearningQueue
from memos_bridge.ids import new_id
from memos_bridge.storage import claims
from memos_bridge.storage.claims import Claim
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import EpisodeRow, SessionRow

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    url = f"sqlite:///{tmp_path / 'memos.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    database = Database(url, busy_timeout_ms=5000)
    database.open()
    try:
        yield database
    finally:
        database.close()


def _episode(db: Database) -> str:
    """A new episode (in its own session): claims are per episode and reference it."""
    session_id, episode_id = new_id("session"), new_id("episode")

    def work(s: Session) -> None:
        s.add(SessionRow(id=session_id, agent="tester", started_at=1, last_seen_at=1))
        s.flush()
        s.add(EpisodeRow(id=episode_id, session_id=session_id, started_at=1, status="closed"))

    db.write_sync(work)
    return episode_id


def _row(db: Database, episode_id: str) -> tuple[int, int, int, str | None]:
    row = db.read_sync(lambda s: claims.claim_row(s, episode_id))
    assert row is not None
    return row.requested, row.served, row.runs, row.claimed_by


class Chain:
    """A chain that records its runs and checks that no two runs of one episode overlap (in any queue)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.delay = delay
        self.active: dict[str, int] = {}
        self.overlaps = 0

    def for_queue(self, name: str) -> Callable[[str, str], Awaitable[None]]:
        async def chain(episode: str, trigger: str) -> None:
            self.active[episode] = self.active.get(episode, 0) + 1
            if self.active[episode] > 1:
                self.overlaps += 1
            self.calls.append((name, episode, trigger))
            try:
                await anyio.sleep(self.delay)
            finally:
                self.active[episode] -= 1

        return chain


def _queue(db: Database, chain: Chain, name: str, *, window_s: float = 60.0) -> LearningQueue:
    return LearningQueue(
        chain.for_queue(name),
        window_s=window_s,
        concurrency=2,
        claims=ChainClaims(db, f"node-{name}", poll_s=0.05),
    )


# ------------------------------------------------------------------------------------------ the protocol


async def test_a_request_is_answered_by_a_run_that_starts_after_it(db: Database) -> None:
    episode = _episode(db)
    now, lease = 1_000, 60_000
    first = db.write_sync(lambda s: claims.request_sync(s, episode, now))
    second = db.write_sync(lambda s: claims.request_sync(s, episode, now))
    assert (first, second) == (1, 2)

    assert db.write_sync(lambda s: claims.claim_sync(s, episode, first, "a", now, lease)) is Claim.CLAIMED
    assert _row(db, episode) == (2, 2, 1, "a")  # the run answers both requests made so far
    # while A's lease lasts, B waits, whatever its request
    assert db.write_sync(lambda s: claims.claim_sync(s, episode, second, "b", now + 1, lease)) is Claim.WAIT
    assert db.write_sync(lambda s: claims.renew_sync(s, episode, "a", now + 10, lease)) is True
    assert db.write_sync(lambda s: claims.renew_sync(s, episode, "b", now + 10, lease)) is False
    db.write_sync(lambda s: claims.release_sync(s, episode, "a", now + 20))

    # B's request was made before A's run started: answered, nothing to run
    assert db.write_sync(lambda s: claims.claim_sync(s, episode, second, "b", now + 30, lease)) is Claim.COVERED
    # ... unless B must run anyway (explicit feedback)
    assert db.write_sync(lambda s: claims.claim_sync(s, episode, second, "b", now + 30, lease, force=True)) is (
        Claim.CLAIMED
    )
    db.write_sync(lambda s: claims.release_sync(s, episode, "b", now + 40))

    # a request made later (late feedback) runs again: the claim was per run
    third = db.write_sync(lambda s: claims.request_sync(s, episode, now + 50))
    assert db.write_sync(lambda s: claims.claim_sync(s, episode, third, "a", now + 60, lease)) is Claim.CLAIMED
    assert _row(db, episode) == (3, 3, 3, "a")


async def test_an_expired_lease_is_taken_over(db: Database) -> None:
    episode = _episode(db)
    generation = db.write_sync(lambda s: claims.request_sync(s, episode, 0))
    assert db.write_sync(lambda s: claims.claim_sync(s, episode, generation, "dead", 0, 1_000)) is Claim.CLAIMED
    later = db.write_sync(lambda s: claims.request_sync(s, episode, 500))
    assert db.write_sync(lambda s: claims.claim_sync(s, episode, later, "b", 999, 1_000)) is Claim.WAIT
    assert db.write_sync(lambda s: claims.claim_sync(s, episode, later, "b", 1_001, 1_000)) is Claim.CLAIMED
    db.write_sync(lambda s: claims.release_sync(s, episode, "dead", 1_002))  # the late release changes nothing
    assert _row(db, episode)[3] == "b"


async def test_an_unknown_episode_has_nothing_to_coordinate(db: Database) -> None:
    assert db.write_sync(lambda s: claims.request_sync(s, "ep_missing", 0)) == 0
    assert db.write_sync(lambda s: claims.claim_sync(s, "ep_missing", 0, "a", 0, 1_000)) is Claim.CLAIMED


# ------------------------------------------------------------------------------------------ queues


async def test_feedback_in_one_queue_answers_the_episode_waiting_in_another(db: Database) -> None:
    episode = _episode(db)
    chain = Chain()
    a, b = _queue(db, chain, "a"), _queue(db, chain, "b")
    async with anyio.create_task_group() as group:
        group.start_soon(a.run)
        group.start_soon(b.run)
        await anyio.sleep(0.05)
        b.episode_finalized(episode, "gap")  # the task ended in B: waits for its feedback window there
        with anyio.fail_after(5):
            while _row_or_none(db, episode) is None:
                await anyio.sleep(0.01)
        await a.run_now(episode, "explicit_feedback")  # the verdict arrives through A
        await b.flush()
        await a.flush()
        group.cancel_scope.cancel()
    assert chain.calls == [("a", episode, "explicit_feedback")]
    assert b.stats.covered == 1 and _row(db, episode)[2] == 1

    # late feedback through B: a new request, a new run
    await b.run_now(episode, "explicit_feedback")
    assert chain.calls[-1] == ("b", episode, "explicit_feedback") and _row(db, episode)[2] == 2


async def test_queues_flushing_at_once_run_the_chain_once_and_never_side_by_side(db: Database) -> None:
    episodes = [_episode(db) for _ in range(3)]
    chain = Chain(delay=0.2)
    queues = [_queue(db, chain, name) for name in ("a", "b", "c")]
    for queue in queues:
        for episode in episodes:
            # without a running loop each queue records its request when the run starts: all three are
            # recorded before any run claims, so one run answers them
            queue.episode_finalized(episode, "stale")
    for queue in queues:
        for episode in episodes:
            await queue._record_request(episode)
    async with anyio.create_task_group() as group:
        for queue in queues:
            group.start_soon(queue.flush)
    assert sorted(episode for _, episode, _ in chain.calls) == sorted(episodes)
    assert chain.overlaps == 0
    assert sum(queue.stats.covered for queue in queues) == 2 * len(episodes)


async def test_feedback_in_two_queues_at_once_runs_twice_one_after_the_other(db: Database) -> None:
    episode = _episode(db)
    chain = Chain(delay=0.2)
    a, b = _queue(db, chain, "a"), _queue(db, chain, "b")
    async with anyio.create_task_group() as group:
        group.start_soon(a.run_now, episode, "explicit_feedback")
        group.start_soon(b.run_now, episode, "explicit_feedback")
    assert sorted(name for name, _, _ in chain.calls) == ["a", "b"]  # each verdict is learned from
    assert chain.overlaps == 0 and _row(db, episode)[2] == 2


def _row_or_none(db: Database, episode_id: str) -> object:
    return db.read_sync(lambda s: claims.claim_row(s, episode_id))
