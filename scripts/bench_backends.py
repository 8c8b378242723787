"""The database a benchmark home uses: its SQLite file, or a database of its own on a PostgreSQL server.

`bench_retrieval.py --storage-url` runs every corpus size on both backends, one after the other, so the
figures of the two sit side by side from one run. This module holds what differs between them for a
benchmark: where the database lives, how big it is, how its vectors are read for the floor, and how a bulk
load defers the per-row index work (FTS5 triggers on SQLite, HNSW inserts on PostgreSQL) to one pass at the
end. `pgserver` as the URL starts a private throw-away server (PyPI `pgserver`, PostgreSQL with pgvector) in
a temporary folder, as the tests do.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import create_engine, make_url, text

from memos_bridge.storage import pg_vectors
from memos_bridge.storage.database import Database

#: Columns whose vectors the service searches (the floor's exact top-k runs over all of them).
VECTOR_COLUMNS = (
    ("traces", "vec_summary"),
    ("traces", "vec_action"),
    ("policies", "vec"),
    ("world_models", "vec"),
    ("skills", "vec"),
    ("memories", "vec"),
)


@contextlib.contextmanager
def postgres_server(url: str) -> Iterator[str]:
    """The server URL to use: `url` itself, or a private `pgserver` started now when `url` is "pgserver"."""
    if url != "pgserver":
        yield url
        return
    if not os.environ.get("XDG_RUNTIME_DIR"):  # pgserver asks for a runtime folder when it is imported
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="memos-bench-run-")
    import pgserver

    with tempfile.TemporaryDirectory(prefix="memos-bench-pg-") as folder:
        server = pgserver.get_server(folder, cleanup_mode="stop")  # type: ignore[attr-defined]
        try:
            yield f"postgresql+psycopg://postgres@/postgres?host={folder}"
        finally:
            server.cleanup()


class PostgresHomes:
    """One database per benchmark home on a server: `create(name)` (dropped first if it exists), `drop`."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self._admin = create_engine(server_url, isolation_level="AUTOCOMMIT")

    def url(self, database: str) -> str:
        return make_url(self.server_url).set(database=database).render_as_string(hide_password=False)

    def create(self, database: str) -> str:
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            conn.exec_driver_sql(f"CREATE DATABASE {database}")
        return self.url(database)

    def drop(self, url: str) -> None:
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {make_url(url).database} WITH (FORCE)")

    def close(self) -> None:
        self._admin.dispose()


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'memos.db'}"


def is_postgres(url: str) -> bool:
    return make_url(url).get_backend_name() == "postgresql"


def database_mib(url: str) -> float:
    """The database's size on disk: the SQLite file with its WAL, or `pg_database_size` (tables, indexes,
    side tables and TOAST)."""
    if not is_postgres(url):
        path = Path(make_url(url).database or "")
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 2**20
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return float(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()) / 2**20
    finally:
        engine.dispose()


def stored_vectors(url: str) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Every vector the service searches, as one float32 matrix, read from the stored BLOBs (either backend)."""
    engine = create_engine(url)
    blobs: list[bytes] = []
    try:
        with engine.connect() as conn:
            for table, column in VECTOR_COLUMNS:
                rows = conn.execute(text(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL"))
                blobs += [bytes(row[0]) for row in rows]
    finally:
        engine.dispose()
    if not blobs:
        return np.zeros((0, 384), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)


@contextlib.contextmanager
def hnsw_deferred(db: Database, kind: str, fields: tuple[str, ...], dim: int) -> Iterator[None]:
    """Bulk-load `kind` on PostgreSQL without its HNSW indexes, then build them once from every row.

    An HNSW insert costs milliseconds per row; building the index over the loaded rows is several times
    cheaper. The indexes are re-created with the service's own DDL (`pg_vectors.ensure_indexes`), so the
    schema ends up as the migrations made it.
    """
    names = [pg_vectors.index_name(kind, field, dim) for field in fields]
    db.write_sync(lambda s: [s.execute(text(f'DROP INDEX IF EXISTS "{name}"')) for name in names])
    try:
        yield
    finally:

        def build(session: Any) -> None:
            session.execute(text("SET LOCAL maintenance_work_mem = '1GB'"))
            pg_vectors.ensure_indexes(session.connection(), dim)

        db.write_sync(build)
