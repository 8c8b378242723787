"""Coordination of services that share one database, on SQLite and on a real PostgreSQL: a write that loses a
unique-key race returns the winner's row, the decay lock is held by one service at a time, and services that
start together on an empty database migrate it once without colliding."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from memos_bridge.storage.database import Database
from memos_bridge.storage.engine import create_db_engine
from memos_bridge.storage.locks import AdvisoryLock, is_unique_violation, write_first_wins
from memos_bridge.storage.migrations import LATEST_VERSION, current_version, migrate
from memos_bridge.storage.models import KvRow
from tests.postgres import postgres_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with postgres_server(tmp_path_factory.mktemp("pg")) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'memos.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def db(url: str) -> Iterator[Database]:
    database = Database(url, busy_timeout_ms=5000)
    database.open()
    yield database
    database.close()


async def test_a_write_that_loses_a_unique_race_returns_the_winners_row(db: Database) -> None:
    key = f"race-{uuid.uuid4().hex}"
    attempts: list[int] = []

    def remember(session: Session) -> object:
        """Read, then insert when missing; on the first attempt another service inserts in between."""
        attempts.append(1)
        found = session.get(KvRow, key)
        if found is not None:
            return found.value_json
        if len(attempts) == 1:
            db.write_sync(lambda other: other.add(KvRow(key=key, value_json="theirs", updated_at=1)))
        session.add(KvRow(key=key, value_json="ours", updated_at=2))
        session.flush()
        return "ours"

    if db.engine.dialect.name == "sqlite":
        # one writer at a time: no other service can insert in between; a duplicate is still recognised
        db.write_sync(lambda other: other.add(KvRow(key=key, value_json="theirs", updated_at=1)))
        with pytest.raises(IntegrityError) as caught:
            db.write_sync(lambda s: (s.add(KvRow(key=key, value_json="ours", updated_at=2)), s.flush()))
        assert is_unique_violation(caught.value)
        assert await write_first_wins(db, remember) == "theirs"
        return
    assert await write_first_wins(db, remember) == "theirs"
    assert len(attempts) == 2
    assert db.read_sync(lambda s: s.scalar(select(KvRow.value_json).where(KvRow.key == key))) == "theirs"


async def test_other_integrity_errors_are_not_retried(db: Database) -> None:
    attempts: list[int] = []

    def orphan(session: Session) -> None:
        attempts.append(1)
        session.execute(text("INSERT INTO episodes (id, session_id, started_at) VALUES ('ep_orphan', 'se_none', 1)"))

    with pytest.raises(IntegrityError) as caught:
        await write_first_wins(db, orphan)
    assert not is_unique_violation(caught.value) and len(attempts) == 1


def test_the_advisory_lock_is_held_by_one_at_a_time(db: Database) -> None:
    first, second = AdvisoryLock(db.engine, "tests.lock"), AdvisoryLock(db.engine, "tests.lock")
    other = AdvisoryLock(db.engine, "tests.other")
    try:
        assert first.try_acquire()
        shared = db.engine.dialect.name == "postgresql"
        assert second.try_acquire() is (not shared)  # on SQLite there is one service: always granted
        assert other.try_acquire()
        first.release()
        if shared:
            assert second.try_acquire()
    finally:
        for lock in (first, second, other):
            lock.release()


def test_services_starting_together_migrate_an_empty_database_once(postgres_url: str) -> None:
    name = f"fresh_{uuid.uuid4().hex[:8]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    fresh = make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    engines = [create_db_engine(fresh, busy_timeout_ms=5000) for _ in range(4)]
    barrier = threading.Barrier(len(engines))
    results: list[object] = []

    def start(index: int) -> None:
        barrier.wait()
        try:
            results.append(migrate(engines[index]))
        except Exception as exc:  # reported below
            results.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(len(engines))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not [r for r in results if isinstance(r, Exception)], results
        applied = sorted(version for r in results if isinstance(r, list) for version in r)
        assert applied == sorted({v for r in results if isinstance(r, list) for v in r})  # none applied twice
        assert current_version(engines[0]) == LATEST_VERSION
    finally:
        for engine in engines:
            engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE {name}"))
        admin.dispose()
