"""Events between services that share a PostgreSQL database (`core/cluster.py`), in one process: two event
buses, each with its relay on its own connection pool, as two services would have. And deferred writes that
meet another service's row locks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.events import EventType
from memos_bridge.core.background import BackgroundWork, WriteBehind
from memos_bridge.core.cluster import EventRelay, named_memories
from memos_bridge.core.events import EventBus
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import KvRow
from tests.postgres import postgres_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with postgres_server(tmp_path_factory.mktemp("pg")) as url:
        yield url


class Service:
    def __init__(self, url: str, name: str) -> None:
        self.db = Database(url)
        self.db.open()
        self.bus = EventBus()
        self.heard: list[CoreEventDTO] = []
        self.bus.subscribe(self.heard.append)
        self.followed: list[dict[str, Any]] = []
        self.relay = EventRelay(self.db, self.bus, name, follow=self._follow)

    async def _follow(self, events: list[dict[str, Any]]) -> None:
        self.followed.extend(events)

    def types(self) -> list[str]:
        return [event.type for event in self.heard]


@pytest.fixture
async def services(postgres_url: str) -> AsyncIterator[tuple[Service, Service]]:
    a, b = Service(postgres_url, "a"), Service(postgres_url, "b")
    async with anyio.create_task_group() as group:
        group.start_soon(a.relay.run)
        group.start_soon(b.relay.run)
        with anyio.fail_after(10):
            await a.relay.listening.wait()
            await b.relay.listening.wait()
        yield a, b
        group.cancel_scope.cancel()
    a.db.close()
    b.db.close()


async def _until(predicate: Any, what: str) -> None:
    with anyio.fail_after(10):
        while not predicate():
            await anyio.sleep(0.02)


async def test_an_event_reaches_the_other_service_once_with_its_namespace(services: tuple[Service, Service]) -> None:
    a, b = services
    a.bus.emit(EventType.TRACE_CREATED, {"traceId": "tr_1", "episodeId": "ep_1"}, "corr-1", scope=("alice", "w1"))
    a.bus.emit(EventType.LEARNING_FLUSHED, {"chainsRun": 1})  # about service A alone: stays there
    a.bus.emit(EventType.SKILL_CRYSTALLIZED, {"skillId": "sk_1"}, scope=("default", None))
    await _until(lambda: "skill.crystallized" in b.types(), "the events in B")
    await anyio.sleep(0.3)  # anything echoed or duplicated would arrive by now
    assert b.types() == ["trace.created", "skill.crystallized"]
    trace = b.heard[0]
    assert trace.payload == {"traceId": "tr_1", "episodeId": "ep_1"} and trace.correlation_id == "corr-1"
    assert trace.namespace is not None and (trace.namespace.profile_id, trace.namespace.workspace_id) == ("alice", "w1")
    assert a.types() == ["trace.created", "learning.flushed", "skill.crystallized"]  # no echo of its own
    assert named_memories(b.followed) == {"trace": {"tr_1"}, "skill": {"sk_1"}}


async def test_events_travel_both_ways_and_are_not_sent_on_again(services: tuple[Service, Service]) -> None:
    a, b = services
    b.bus.emit(EventType.FEEDBACK_RECEIVED, {"feedbackId": "fb_1"})
    await _until(lambda: a.types() == ["feedback.received"], "B's event in A")
    a.bus.emit(EventType.EPISODE_CLOSED, {"episodeId": "ep_2"})
    await _until(lambda: "episode.closed" in b.types(), "A's event in B")
    await anyio.sleep(0.3)
    # B heard its own event once (the original) and A's once: A did not send B's event back
    assert b.types() == ["feedback.received", "episode.closed"]
    assert a.types() == ["feedback.received", "episode.closed"]


async def test_an_event_too_large_for_a_notification_is_read_from_the_database(
    services: tuple[Service, Service],
) -> None:
    a, b = services
    summary = "parcel weights " * 2_000  # ~30 kB: far past PostgreSQL's 8000-byte payload limit
    a.bus.emit(EventType.TRACE_CREATED, {"traceId": "tr_big", "summary": summary})
    await _until(lambda: "trace.created" in b.types(), "the large event in B")
    assert b.heard[0].payload == {"traceId": "tr_big", "summary": summary}


async def test_a_deferred_write_cancelled_as_a_deadlock_runs_again_after_its_batch(tmp_path: Path) -> None:
    """Two services' batches of deferred writes (access counts) may lock rows in opposite orders; the write the
    database cancels runs again in a transaction of its own instead of being dropped."""
    db = Database(f"sqlite:///{tmp_path / 'memos.db'}")
    db.open()
    queue = WriteBehind(db, BackgroundWork())
    ran: list[str] = []

    def deadlocked(session: Session) -> None:
        ran.append("deadlocked")
        if ran.count("deadlocked") == 1:
            raise OperationalError("UPDATE traces …", {}, _Deadlock())
        session.add(KvRow(key="late", value_json=1, updated_at=1))

    def fine(session: Session) -> None:
        ran.append("fine")
        session.add(KvRow(key="fine", value_json=1, updated_at=1))

    await queue.add("access", deadlocked)
    await queue.add("result", fine)
    await queue.flush()
    assert sorted(ran) == ["deadlocked", "deadlocked", "fine"] and queue.dropped == 0
    assert db.read_sync(lambda s: sorted(s.scalars(select(KvRow.key)))) == ["fine", "late"]
    db.close()


class _Deadlock(Exception):
    sqlstate = "40P01"
