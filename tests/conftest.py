"""Shared fixtures. In-process core: a real database and the real embedding model (loaded once per session).

PostgreSQL: one private server for the whole session (`postgres`, from `tests/postgres.py`), and a fresh
database per test (`postgres_url`), copied from a migrated template database, which takes a fraction of a
second where starting a server or migrating takes seconds. `backend_url` runs a test once on SQLite and once
on PostgreSQL. Without `pgserver` the PostgreSQL variants are skipped, unless `MEMOS_BRIDGE_REQUIRE_POSTGRES=1`.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import anyio
import numpy as np
import pytest
from sqlalchemy import create_engine, make_url

from memos_bridge.config import Settings, load_settings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core.facade import MemoryCore
from memos_bridge.embedding.base import Embedder, EmbedderStatus, Role
from memos_bridge.embedding.factory import create_embedder
from memos_bridge.llm.host import NoLLM
from memos_bridge.storage.database import Database
from memos_bridge.storage.engine import create_db_engine
from memos_bridge.storage.migrations import migrate
from tests.postgres import postgres_server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def real_embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    settings = load_settings(tmp_path_factory.mktemp("embed-home"))
    embedder = create_embedder(settings.embedding, settings.models_dir)
    embedder.embed_sync(["warm up"])
    return embedder


class SwitchableEmbedder:
    """The real embedder, with a switch that makes it fail like an unavailable model."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.down = False
        self.delay = 0.0  # seconds, to simulate a slow model
        self.name = inner.name
        self.dim = inner.dim

    async def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        if self.down:
            raise MemosError(ErrorCode.EMBEDDING_UNAVAILABLE, "model offline (test switch)")
        if self.delay:
            await anyio.sleep(self.delay)
        return await self.inner.embed(texts, role)

    def embed_sync(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        return self.inner.embed_sync(texts, role)

    def status(self) -> EmbedderStatus:
        return self.inner.status()

    async def warmup(self) -> None:
        await self.inner.warmup()

    def close(self) -> None:
        pass  # shared across tests


def make_settings(home: Path, **overrides: object) -> Settings:
    return load_settings(home, env={}, overrides=overrides)


DatabaseFor = Callable[[Path], "str | None"]


@pytest.fixture
def database_for() -> DatabaseFor:
    """The database URL of a data home; None: the home's own SQLite file. A test folder whose suite runs on
    both backends overrides this (tests/core/learning/conftest.py)."""
    return lambda home: None


@pytest.fixture
async def core_factory(tmp_path: Path, real_embedder: Embedder, database_for: DatabaseFor) -> AsyncIterator[object]:
    made: list[MemoryCore] = []

    async def make(llm: object = None, home: Path | None = None, **overrides: object) -> MemoryCore:
        """A core with its own data home, or on `home` (a second core on the same database, as after a restart)."""
        home = home or tmp_path / f"home{len(made)}"
        home.mkdir(parents=True, exist_ok=True)  # a SQLite URL must name a file in an existing folder
        url = database_for(home)
        if url is not None:
            overrides["storage"] = {**dict(overrides.get("storage") or {}), "url": url}  # type: ignore[call-overload]
        settings = make_settings(home, **overrides)
        db = Database(settings.database_url)
        db.open()
        core = MemoryCore(settings, db, SwitchableEmbedder(real_embedder), llm or NoLLM())  # type: ignore[arg-type]
        made.append(core)
        return core

    yield make
    for core in made:
        core.db.close()


# ---------------------------------------------------------------------------------------------------------
# PostgreSQL


class PostgresDatabases:
    """Databases on one running server: `create()` a fresh one, `drop(url)` it again."""

    TEMPLATE = "memos_template"

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self._admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
        self._numbers = itertools.count(1)
        self._template_ready = False

    def url(self, database: str) -> str:
        return make_url(self.server_url).set(database=database).render_as_string(hide_password=False)

    def _prepare_template(self) -> None:
        """A database migrated to this build's schema, copied by `create` (no connection may stay open on it)."""
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {self.TEMPLATE}")
        engine = create_db_engine(self.url(self.TEMPLATE), busy_timeout_ms=5000)
        try:
            migrate(engine)
        finally:
            engine.dispose()
        self._template_ready = True

    def create(self, *, migrated: bool = True) -> str:
        """A new, empty database (with this build's schema when `migrated`); returns its SQLAlchemy URL."""
        if migrated and not self._template_ready:
            self._prepare_template()
        name = f"memos_t{next(self._numbers)}"
        template = self.TEMPLATE if migrated else "template0"
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name} TEMPLATE {template}")
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop a database made by `create`, closing any connection still open on it."""
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {make_url(url).database} WITH (FORCE)")

    def close(self) -> None:
        self._admin.dispose()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresDatabases]:
    """The session's PostgreSQL server (skipped without pgserver unless MEMOS_BRIDGE_REQUIRE_POSTGRES=1)."""
    with postgres_server(tmp_path_factory.mktemp("pg")) as url:
        databases = PostgresDatabases(url)
        try:
            yield databases
        finally:
            databases.close()


@pytest.fixture
def postgres_url(postgres: PostgresDatabases) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    url = postgres.create()
    yield url
    postgres.drop(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test's database: a SQLite file, then (second run) a fresh migrated PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'memos.db'}"
    return str(request.getfixturevalue("postgres_url"))
