"""The learning suite runs once on SQLite and once on PostgreSQL.

Every stage keeps its own SQL beside its logic, and the two backends differ where learning is most exposed:
transaction isolation (READ COMMITTED against SQLite's single writer), JSON columns, float rounding, NULL
ordering and case rules in comparisons. So each test here gets its database from `database_for(home)`,
which is the home's SQLite file in the first run and a fresh migrated PostgreSQL database per home in the
second (the session's server, `tests/conftest.py`). A second core on the same home (a restart) gets the
same database again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from memos_bridge.core.facade import MemoryCore
from memos_bridge.embedding.base import Embedder
from memos_bridge.llm.host import NoLLM
from memos_bridge.storage.database import Database
from tests.conftest import PostgresDatabases, SwitchableEmbedder, make_settings

DatabaseFor = Callable[[Path], str]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_for(request: pytest.FixtureRequest) -> Iterator[DatabaseFor]:
    """The SQLAlchemy URL of a data home's database on this run's backend."""
    if request.param == "sqlite":
        yield lambda home: f"sqlite:///{home / 'memos.db'}"
        return
    postgres: PostgresDatabases = request.getfixturevalue("postgres")
    made: dict[Path, str] = {}

    def url(home: Path) -> str:
        if home not in made:
            made[home] = postgres.create()
        return made[home]

    yield url
    for database_url in made.values():
        postgres.drop(database_url)


@pytest.fixture
async def core_factory(tmp_path: Path, real_embedder: Embedder, database_for: DatabaseFor) -> AsyncIterator[object]:
    """`tests/conftest.py`'s `core_factory`, on this run's backend."""
    made: list[MemoryCore] = []

    async def make(llm: object = None, home: Path | None = None, **overrides: object) -> MemoryCore:
        home = home or tmp_path / f"home{len(made)}"
        home.mkdir(parents=True, exist_ok=True)  # a SQLite URL must name a file in an existing folder
        storage = {**dict(overrides.pop("storage", None) or {}), "url": database_for(home)}  # type: ignore[call-overload]
        settings = make_settings(home, storage=storage, **overrides)
        db = Database(settings.database_url)
        db.open()
        core = MemoryCore(settings, db, SwitchableEmbedder(real_embedder), llm or NoLLM())  # type: ignore[arg-type]
        made.append(core)
        return core

    yield make
    for core in made:
        core.db.close()
