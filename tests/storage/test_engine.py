"""Engine set-up: SQLite pragmas, transaction control, JSON encoding."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from memos_bridge.storage.engine import create_db_engine, fts5_available, sqlite_version, writer
from memos_bridge.storage.models import KvRow


def _pragma(engine: Engine, name: str) -> object:
    with engine.connect() as conn:
        return conn.exec_driver_sql(f"PRAGMA {name}").scalar()


def test_file_database_pragmas(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'p.db'}", busy_timeout_ms=1234)
    try:
        assert _pragma(engine, "journal_mode") == "wal"
        assert _pragma(engine, "foreign_keys") == 1
        assert _pragma(engine, "synchronous") == 1  # NORMAL
        assert _pragma(engine, "busy_timeout") == 1234
        assert _pragma(engine, "temp_store") == 2  # MEMORY
    finally:
        engine.dispose()


def test_parent_directory_is_created(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "memos.db"
    engine = create_db_engine(f"sqlite:///{target}", busy_timeout_ms=100)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        assert target.exists()
    finally:
        engine.dispose()


def test_memory_url_is_one_shared_database() -> None:
    engine = create_db_engine("sqlite://", busy_timeout_ms=100)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        conn.exec_driver_sql("INSERT INTO t VALUES (7)")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT x FROM t").scalar() == 7
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_sqlite_capabilities(engine: Engine) -> None:
    major, minor, *_ = (int(part) for part in sqlite_version().split("."))
    assert (major, minor) >= (3, 34)
    assert fts5_available(engine)


def test_writer_takes_the_write_lock_at_begin(tmp_path: Path) -> None:
    """BEGIN IMMEDIATE: a second writer cannot even start while the first holds its transaction."""
    engine = create_db_engine(f"sqlite:///{tmp_path / 'lock.db'}", busy_timeout_ms=50)
    try:
        with writer(engine).connect() as first:
            first.begin()
            first.exec_driver_sql("SELECT 1")  # a read only: deferred BEGIN would hold no write lock yet
            with writer(engine).connect() as second, pytest.raises(OperationalError, match="locked"):
                second.begin()
                second.exec_driver_sql("SELECT 1")
            first.rollback()
    finally:
        engine.dispose()


def test_autocommit_connections_skip_begin_and_leave_the_pool_clean(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'ac.db'}", busy_timeout_ms=100, pool_size=1)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM")  # fails inside a transaction
        with engine.connect() as conn:  # the same pooled connection, back under SQLAlchemy's BEGIN
            assert conn.connection.dbapi_connection is not None
            assert conn.connection.dbapi_connection.isolation_level is None
            conn.exec_driver_sql("SELECT 1")
            assert conn.connection.dbapi_connection.in_transaction
    finally:
        engine.dispose()


def test_read_transactions_see_a_stable_snapshot(engine: Engine) -> None:
    """SQLAlchemy emits BEGIN for SELECTs, so a read session does not see commits made meanwhile."""
    with Session(engine) as reader:
        before = reader.execute(text("SELECT count(*) FROM kv")).scalar_one()
        with Session(writer(engine)) as other:
            other.add(KvRow(key="k", value_json=1, updated_at=1))
            other.commit()
        assert reader.execute(text("SELECT count(*) FROM kv")).scalar() == before
    with Session(engine) as fresh:
        assert fresh.execute(text("SELECT count(*) FROM kv")).scalar() == before + 1


def test_json_keeps_cjk_unescaped(engine: Engine) -> None:
    """FTS indexes the stored JSON text, so CJK must not be turned into \\uXXXX escapes."""
    with Session(engine) as session:
        session.add(KvRow(key="cjk", value_json={"tag": "持仓"}, updated_at=1))
        session.commit()
    with engine.connect() as conn:
        raw = conn.exec_driver_sql("SELECT value_json FROM kv WHERE key = 'cjk'").scalar()
    assert raw == '{"tag":"持仓"}'
    assert sqlite3.sqlite_version == sqlite_version()
