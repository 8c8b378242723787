"""The async/sync Database facade: migrations on open, serialised writes, rollback, restart, cascades."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.storage.database import Database
from memos_bridge.storage.fts import fts_search
from memos_bridge.storage.migrations import LATEST_VERSION
from memos_bridge.storage.models import (
    Base,
    EpisodeRow,
    FeedbackRow,
    KvRow,
    SessionRow,
    TraceRow,
    TurnRow,
)

from .factories import OWNER, add_session, add_trace, seed_episode

pytestmark = pytest.mark.anyio


def _count(session: Session, model: type[Base]) -> int:
    return int(session.execute(select(func.count()).select_from(model)).scalar_one())


async def test_open_migrates_and_reports(db: Database) -> None:
    assert db.schema_version() == LATEST_VERSION
    counts = db.counts()
    assert set(counts) == set(Base.metadata.tables)
    assert counts["schema_migrations"] == LATEST_VERSION
    assert counts["traces"] == 0


async def test_rows_stay_usable_after_the_session_closes(db: Database) -> None:
    def create(session: Session) -> SessionRow:
        return add_session(session, "se_x")

    row = await db.write(create)
    assert row.id == "se_x"
    assert row.meta_json == {}  # defaults loaded, no refresh needed after commit
    loaded = await db.read(lambda s: s.get(SessionRow, "se_x"))
    assert loaded is not None
    assert loaded.agent == OWNER.agent_kind


async def test_concurrent_writes_are_serialised_and_all_land(db: Database) -> None:
    active = 0
    peak = 0
    guard = threading.Lock()

    def bump(session: Session) -> None:
        nonlocal active, peak
        with guard:
            active += 1
            peak = max(peak, active)
        try:
            row = session.get(KvRow, "counter")
            current = 0 if row is None else int(row.value_json)
            time.sleep(0.002)  # widen the read-modify-write window
            if row is None:
                session.add(KvRow(key="counter", value_json=current + 1, updated_at=1))
            else:
                row.value_json = current + 1
            session.add(KvRow(key=f"item-{current}", value_json=current, updated_at=1))
        finally:
            with guard:
                active -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(40):
            tg.start_soon(db.write, bump)
    assert peak == 1
    counter = await db.read(lambda s: s.get(KvRow, "counter"))
    assert counter is not None
    assert counter.value_json == 40
    assert await db.read(lambda s: _count(s, KvRow)) == 41


def test_sync_writes_from_threads_are_serialised(db: Database) -> None:
    """write_sync holds the writer lock itself, not only the async limiter."""
    inside = threading.Semaphore(1)
    overlaps: list[int] = []

    def exclusive(session: Session) -> None:
        if not inside.acquire(blocking=False):
            overlaps.append(1)
            return
        try:
            session.add(KvRow(key=f"t-{threading.get_ident()}-{time.perf_counter_ns()}", updated_at=1))
            time.sleep(0.003)
        finally:
            inside.release()

    threads = [threading.Thread(target=lambda: [db.write_sync(exclusive) for _ in range(5)]) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    assert db.read_sync(lambda s: _count(s, KvRow)) == 30


async def test_reads_run_concurrently(db: Database) -> None:
    barrier = threading.Barrier(4, timeout=5)

    def wait_for_peers(session: Session) -> int:
        barrier.wait()  # raises BrokenBarrierError unless 4 reads are in flight together
        return _count(session, TraceRow)

    results: list[int] = []

    async def one() -> None:
        results.append(await db.read(wait_for_peers))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(one)
    assert results == [0, 0, 0, 0]


async def test_failed_write_rolls_back_everything(db: Database) -> None:
    class Boom(Exception):
        pass

    def half_done(session: Session) -> None:
        seed_episode(session)
        session.flush()  # the rows really reached the database inside the transaction
        raise Boom

    with pytest.raises(Boom):
        await db.write(half_done)
    assert await db.read(lambda s: (_count(s, SessionRow), _count(s, EpisodeRow))) == (0, 0)
    # the writer slot is free again
    await db.write(lambda s: add_session(s, "se_after"))
    assert await db.read(lambda s: _count(s, SessionRow)) == 1


def test_sync_variants_and_restart_keep_data(db_url: str) -> None:
    first = Database(db_url)
    assert first.open() == list(range(1, LATEST_VERSION + 1))

    def seed(session: Session) -> None:
        seed_episode(session)
        add_trace(session, "tr_1", summary="persist across restarts")

    first.write_sync(seed)
    first.close()
    first.close()  # idempotent

    second = Database(db_url)
    assert second.open() == []  # nothing left to migrate
    try:
        assert second.read_sync(lambda s: [t.id for t in s.scalars(select(TraceRow))]) == ["tr_1"]
        hits = second.read_sync(lambda s: fts_search(s, "trace", "restart", owner=OWNER))
        assert [h[0] for h in hits] == ["tr_1"]
    finally:
        second.close()


def test_use_before_open_is_an_error(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(MemosError) as info:
        db.read_sync(lambda s: None)
    assert info.value.code is ErrorCode.NOT_INITIALIZED
    with pytest.raises(MemosError):
        _ = db.engine


async def test_in_memory_database_works() -> None:
    with Database("sqlite://") as db:
        await db.write(seed_episode)
        counts = await db.read(lambda s: (_count(s, SessionRow), _count(s, EpisodeRow)))
        assert counts == (1, 1)
        assert db.schema_version() == LATEST_VERSION


async def test_deleting_a_session_cascades(db: Database) -> None:
    def seed(session: Session) -> None:
        seed_episode(session)
        add_trace(session, "tr_1", summary="cascade target words")
        session.add(TurnRow(session_id="se_1", episode_id="ep_1", turn_id=1, started_at=1, **OWNER.as_columns()))
        session.add(
            FeedbackRow(
                id="fb_1",
                ts=1,
                episode_id="ep_1",
                trace_id="tr_1",
                channel="explicit",
                polarity="negative",
                magnitude=1.0,
                **OWNER.as_columns(),
            )
        )

    await db.write(seed)
    await db.write(lambda s: s.execute(delete(SessionRow).where(SessionRow.id == "se_1")))

    def check(session: Session) -> tuple[int, int, int, tuple[str | None, str | None] | None]:
        fb = session.get(FeedbackRow, "fb_1")
        return (
            _count(session, EpisodeRow),
            _count(session, TraceRow),
            _count(session, TurnRow),
            None if fb is None else (fb.episode_id, fb.trace_id),
        )

    assert await db.read(check) == (0, 0, 0, (None, None))  # feedback survives, detached (SET NULL)
    assert await db.read(lambda s: fts_search(s, "trace", "cascade", owner=OWNER)) == []


async def test_orm_delete_of_parent_cascades_in_the_database(db: Database) -> None:
    await db.write(seed_episode)

    def drop(session: Session) -> None:
        row = session.get(SessionRow, "se_1")
        assert row is not None
        session.delete(row)

    await db.write(drop)
    assert await db.read(lambda s: _count(s, EpisodeRow)) == 0
