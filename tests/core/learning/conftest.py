"""The learning suite runs once on SQLite and once on PostgreSQL.

Every stage keeps its own SQL beside its logic, and the two backends differ where learning is most exposed:
transaction isolation (READ COMMITTED against SQLite's single writer), JSON columns, float rounding, NULL
ordering and case rules in comparisons. So each test here gets its database from `database_for(home)`,
which is the home's SQLite file in the first run and a fresh migrated PostgreSQL database per home in the
second (the session's server, `tests/conftest.py`); `core_factory` (tests/conftest.py) asks it too. A second
core on the same home (a restart) gets the same database again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import PostgresDatabases

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
