"""Fixtures for the storage tests: every test gets its own on-disk database under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from memos_bridge.storage.database import Database
from memos_bridge.storage.engine import create_db_engine
from memos_bridge.storage.migrations import migrate


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'memos.db'}"


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """A fully migrated engine."""
    eng = create_db_engine(db_url, busy_timeout_ms=2000)
    migrate(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url, busy_timeout_ms=2000, read_threads=4)
    database.open()
    yield database
    database.close()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """An ORM session on a migrated database holding the factories' session and episode (se_1, ep_1)."""
    from .factories import seed_episode

    with Session(engine) as s:
        seed_episode(s)
        s.commit()
        yield s
