"""Engine construction: the only place that knows SQLite connection details (and what serves the home).

The URL is configurable (`StorageSettings.url`) so another database can be plugged in later; everything
SQLite-specific here is guarded by the dialect:

* every new SQLite connection gets WAL (readers never block the writer), `synchronous=NORMAL` (durable
  enough with WAL, much faster), `foreign_keys=ON` (off by default in SQLite; cascades depend on it),
  `busy_timeout` and in-memory temp storage;
* SQLAlchemy, not the `sqlite3` module, emits BEGIN. The module's legacy mode does not begin a transaction
  for SELECT or DDL, which breaks repeatable reads and transactional migrations. Connections used for
  writing (see `writer`) begin with BEGIN IMMEDIATE, which takes the write lock up front: a deferred
  transaction that reads first and writes later can fail with SQLITE_BUSY without waiting if another
  process wrote in between, while BEGIN IMMEDIATE simply waits for `busy_timeout`. Statements that cannot
  run in a transaction (VACUUM) use `conn.execution_options(isolation_level="AUTOCOMMIT")`, for which no
  BEGIN is emitted; the driver-level setting SQLAlchemy restores on check-in is undone at checkout;
* JSON is serialised with `ensure_ascii=False` so CJK text inside JSON columns stays searchable by FTS.

`backend_info` reports which database serves the home and what runs inside it (full-text search; on
PostgreSQL, pgvector) for `core.health` and `doctor`.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

WRITE_OPTION = "memos_write"
"""Execution option marking connections that will write; on SQLite they BEGIN IMMEDIATE."""


def _json_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def is_sqlite(engine: Engine | Connection) -> bool:
    return engine.dialect.name == "sqlite"


def is_memory_sqlite(url: URL) -> bool:
    """True for `sqlite://` and `sqlite:///:memory:` (one private database per connection)."""
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def sqlite_version() -> str:
    """Version of the SQLite library linked into the stdlib `sqlite3` module (FTS5 trigram needs ≥ 3.34)."""
    return sqlite3.sqlite_version


def writer(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions take the write lock at BEGIN on SQLite."""
    return engine.execution_options(**{WRITE_OPTION: True})


def create_db_engine(url: str, *, busy_timeout_ms: int, pool_size: int | None = None) -> Engine:
    """Create the engine for `url`, with SQLite pragmas and transaction handling installed.

    `sqlite://` (in memory) uses a single shared connection (StaticPool) so every session sees the same
    database; callers must serialise access to it (`Database` does). For a file URL the parent directory
    is created. `pool_size` bounds concurrent connections for pooled (file / server) databases.
    """
    parsed = make_url(url)
    common: dict[str, Any] = {"json_serializer": _json_dumps}
    if parsed.get_backend_name() != "sqlite":
        if pool_size is not None:
            common["pool_size"] = pool_size
        return create_engine(parsed, pool_pre_ping=True, **common)

    memory = is_memory_sqlite(parsed)
    if memory:
        engine = create_engine(parsed, poolclass=StaticPool, connect_args={"check_same_thread": False}, **common)
    else:
        if parsed.database and not parsed.query.get("uri"):
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        if pool_size is not None:
            common["pool_size"] = pool_size
        engine = create_engine(parsed, connect_args={"check_same_thread": False}, **common)
    _install_sqlite_hooks(engine, busy_timeout_ms=busy_timeout_ms, wal=not memory)
    return engine


def _install_sqlite_hooks(engine: Engine, *, busy_timeout_ms: int, wal: bool) -> None:
    pragmas = [
        *(["journal_mode=WAL"] if wal else []),
        "synchronous=NORMAL",
        "foreign_keys=ON",
        f"busy_timeout={int(busy_timeout_ms)}",
        "temp_store=MEMORY",
    ]

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Hand transaction control to SQLAlchemy (see module docstring); pragmas must run outside a
        # transaction (foreign_keys is a no-op inside one).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            for pragma in pragmas:
                cursor.execute(f"PRAGMA {pragma}")
        finally:
            cursor.close()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        # Resetting a connection after AUTOCOMMIT use re-enables the driver's legacy implicit BEGIN.
        if dbapi_conn.isolation_level is not None:
            dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get("isolation_level") == "AUTOCOMMIT":
            return
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE_OPTION, False) else "BEGIN")


def fts5_available(engine: Engine) -> bool:
    """Whether this SQLite build has FTS5 with the trigram tokenizer (False on other databases)."""
    if not is_sqlite(engine):
        return False
    with engine.connect() as conn:
        try:
            conn.exec_driver_sql("CREATE VIRTUAL TABLE temp.memos_fts5_probe USING fts5(x, tokenize='trigram')")
            conn.exec_driver_sql("DROP TABLE temp.memos_fts5_probe")
        except DBAPIError:
            return False
        finally:
            conn.rollback()
    return True


def backend_info(engine: Engine) -> dict[str, str | bool | None]:
    """Which database serves the home: dialect, server version, whether full-text search runs in it, and the
    vector extension's version when the database searches the vectors (None: the service's in-memory vector
    index is used).

    On PostgreSQL full text counts once every searchable kind has its tsvector GIN index (migration 8), and
    pgvector once the extension is installed and every vector column has its `vector` twin: an installed
    but unused extension is not reported, because the service then searches in memory."""
    if is_sqlite(engine):
        return {
            "dialect": "sqlite",
            "server_version": sqlite_version(),
            "full_text": fts5_available(engine),
            "vector_extension": None,
        }
    # Imported here: they load the ORM models and numpy, which creating an engine does not need.
    from memos_bridge.storage import pg_search, pg_vectors
    from memos_bridge.storage.fts import FTS_SPECS

    with engine.connect() as conn:
        version = str(conn.exec_driver_sql("SHOW server_version").scalar() or "")
        postgres = engine.dialect.name == "postgresql"
        full_text = postgres and pg_search.full_text_ready(conn, list(FTS_SPECS.values()))
        vector = pg_vectors.extension_version(conn) if postgres and pg_vectors.ready(conn) else None
    return {
        "dialect": engine.dialect.name,
        "server_version": version,
        "full_text": full_text,
        "vector_extension": vector,
    }
