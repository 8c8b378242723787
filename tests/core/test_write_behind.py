"""Deferred writes (a turn's cached result, its access counts): committed by the next turn's own write while
turns keep coming, by the flusher once they stop, never lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.background import BackgroundWork, WriteBehind
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import KvRow, TurnRow
from tests.core.units import record_units

pytestmark = pytest.mark.anyio

DELAY_S = 0.05


def _kv(key: str) -> Any:
    def write(session: Session) -> None:
        session.add(KvRow(key=key, value_json=1, updated_at=1))

    return write


def _keys(db: Database) -> list[str]:
    return db.read_sync(lambda s: sorted(s.scalars(select(KvRow.key))))


@pytest.fixture
def db(tmp_path: Path) -> Any:
    database = Database(f"sqlite:///{tmp_path / 'memos.db'}")
    database.open()
    yield database
    database.close()


class _CountingDb:
    """The database, counting the write transactions the flusher opens."""

    def __init__(self, db: Database) -> None:
        self.db, self.writes = db, 0

    async def write(self, fn: Any) -> Any:
        self.writes += 1
        return await self.db.write(fn)


async def test_writes_taken_by_a_turn_are_not_flushed_again_and_later_ones_wait_for_their_delay(db: Database) -> None:
    background = BackgroundWork()
    counting = _CountingDb(db)
    queue = WriteBehind(counting, background, min_delay_s=DELAY_S, max_delay_s=DELAY_S)  # type: ignore[arg-type]
    async with anyio.create_task_group() as group:
        group.start_soon(background.run)
        await anyio.sleep(0.01)
        await queue.add("result-1", _kv("one"))
        # turns keep coming: each takes what is queued into its own transaction, then queues its own result
        for n in range(2, 6):
            await anyio.sleep(DELAY_S * 0.6)
            taken = queue.take()
            assert taken, n
            db.write_sync(lambda s, taken=taken: queue.apply(s, taken))
            await queue.add(f"result-{n}", _kv(f"k{n}"))
        assert counting.writes == 0  # the flusher never committed in the gaps between turns
        with anyio.fail_after(5):  # the turns stopped: the last result is flushed once it is old enough
            while "k5" not in _keys(db):
                await anyio.sleep(0.01)
        assert counting.writes == 1
        group.cancel_scope.cancel()
    assert _keys(db) == ["k2", "k3", "k4", "k5", "one"]


async def test_writes_put_back_after_a_failed_turn_are_flushed(db: Database) -> None:
    background = BackgroundWork()
    queue = WriteBehind(db, background, min_delay_s=DELAY_S, max_delay_s=DELAY_S)
    async with anyio.create_task_group() as group:
        group.start_soon(background.run)
        await anyio.sleep(0.01)
        await queue.add("result", _kv("kept"))
        taken = queue.take()
        await anyio.sleep(DELAY_S * 3)  # the flusher found nothing to do and stopped
        await queue.put_back(taken)  # the turn's transaction failed before it committed them
        with anyio.fail_after(5):
            while _keys(db) != ["kept"]:
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()


async def test_back_to_back_turns_commit_the_previous_results_in_their_own_write(core_factory: Any) -> None:
    core = await core_factory()
    transactions = record_units(core.db, "write_sync")
    async with anyio.create_task_group() as group:
        group.start_soon(core.background.run)
        await anyio.sleep(0.01)
        for n in range(4):
            await anyio.sleep(0.02)  # a host's gap between turns, shorter than the flusher's delay
            await core.turn_start(
                dto.TurnInputDTO.model_validate(
                    {"agent": "t", "sessionId": "se_a", "userText": f"summarise report {n}", "ts": 1 + n}
                )
            )
        assert len(transactions) == 4, transactions  # one write per turn: no flush between the turns
        with anyio.fail_after(5):  # the last turn's result is flushed once the turns stop
            while len(transactions) < 5:
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    assert "flush" in transactions[-1]
    saved = core.db.read_sync(lambda s: list(s.scalars(select(TurnRow.result_json))))
    assert len(saved) == 4 and all(saved)  # every turn's result, for a retry after a restart
