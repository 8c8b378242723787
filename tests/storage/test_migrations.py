"""Versioned migrations: fresh install, idempotence, in-place upgrade, schema drift, failure atomicity."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Connection, Engine, Index, Text, inspect, select, text
from sqlalchemy.orm import Session

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.storage import migrations
from memos_bridge.storage.engine import create_db_engine
from memos_bridge.storage.fts import fts_integrity_errors, fts_search, fts_table_names
from memos_bridge.storage.migrations import (
    LATEST_VERSION,
    Migration,
    current_version,
    ensure_column,
    ensure_index,
    migrate,
)
from memos_bridge.storage.models import Base, SchemaMigrationRow

from .factories import OWNER, add_trace, seed_episode


@pytest.fixture
def bare_engine(db_url: str) -> Iterator[Engine]:
    """An engine on an empty database (no migrations applied)."""
    eng = create_db_engine(db_url, busy_timeout_ms=2000)
    yield eng
    eng.dispose()


def _recorded(engine: Engine) -> list[tuple[int, str]]:
    with Session(engine) as session:
        rows = session.execute(select(SchemaMigrationRow.version, SchemaMigrationRow.name))
        return [(v, n) for v, n in rows]


def test_fresh_database_reaches_latest(bare_engine: Engine) -> None:
    assert current_version(bare_engine) == 0
    applied = migrate(bare_engine)
    assert applied == [m.version for m in migrations.MIGRATIONS]
    assert current_version(bare_engine) == LATEST_VERSION
    assert _recorded(bare_engine) == [(m.version, m.name) for m in migrations.MIGRATIONS]


def test_second_migrate_is_a_no_op(bare_engine: Engine) -> None:
    migrate(bare_engine)
    assert migrate(bare_engine) == []
    assert len(_recorded(bare_engine)) == len(migrations.MIGRATIONS)


def test_old_database_upgrades_in_place_and_fts_finds_old_rows(bare_engine: Engine) -> None:
    assert migrate(bare_engine, target=1) == [1]
    assert current_version(bare_engine) == 1
    tables = set(inspect(bare_engine).get_table_names())
    assert not tables & set(fts_table_names())

    with Session(bare_engine) as session:
        seed_episode(session)
        add_trace(session, "tr_old", summary="legacy parsing of infoTable rows", agent_text="解析每个持仓")
        session.commit()

    assert migrate(bare_engine) == [m.version for m in migrations.MIGRATIONS if m.version > 1]
    assert current_version(bare_engine) == LATEST_VERSION
    with Session(bare_engine) as session:
        assert fts_search(session, "trace", "parse", owner=OWNER, tokenizer="word")[0][0] == "tr_old"
        assert [h[0] for h in fts_search(session, "trace", "解析每", owner=OWNER, tokenizer="trigram")] == ["tr_old"]
        # rows written after the upgrade are indexed by the new triggers
        add_trace(session, "tr_new", summary="fresh parsing")
        session.commit()
        found = {h[0] for h in fts_search(session, "trace", "parsing", owner=OWNER, tokenizer="word")}
        assert found == {"tr_old", "tr_new"}
    with bare_engine.connect() as conn:
        assert fts_integrity_errors(conn) == []


def _user_tables(engine: Engine) -> set[str]:
    fts = fts_table_names()
    names = set(inspect(engine).get_table_names())
    return {n for n in names if not n.startswith("sqlite_") and not any(n.startswith(f) for f in fts)}


def test_schema_matches_orm_exactly(engine: Engine) -> None:
    """Drift guard: a database built by the migrations has exactly the ORM's tables, columns, indexes."""
    inspector = inspect(engine)
    assert _user_tables(engine) == set(Base.metadata.tables)
    for name, table in Base.metadata.tables.items():
        db_columns = {c["name"] for c in inspector.get_columns(name)}
        assert db_columns == set(table.columns.keys()), name
        db_indexes = {ix["name"] for ix in inspector.get_indexes(name)}
        assert {ix.name for ix in table.indexes} <= db_indexes, name


def test_version_2_database_gains_the_learning_columns(bare_engine: Engine) -> None:
    """Migration 3 on a database written before it: the columns appear, existing rows get the defaults."""
    assert migrate(bare_engine, target=2) == [1, 2]
    added = {
        "policies": ["signature"],
        "decision_repairs": ["episode_id", "tool", "source", "severity", "confidence", "attached_policy_ids_json"],
    }
    with bare_engine.begin() as conn:
        for table, columns in added.items():
            for column in columns:
                conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.exec_driver_sql(
            "INSERT INTO decision_repairs (id, ts, context_hash, preference, anti_pattern, high_value_traces_json,"
            " low_value_traces_json, validated, owner_agent_kind, owner_profile_id) VALUES"
            " ('dr_old', 1, 'h', 'Prefer x', 'Avoid y', '[]', '[]', 0, 'a', 'p')"
        )
    assert migrate(bare_engine) == [m.version for m in migrations.MIGRATIONS if m.version > 2]
    inspector = inspect(bare_engine)
    for table, columns in added.items():
        assert set(columns) <= {c["name"] for c in inspector.get_columns(table)}
    with bare_engine.connect() as conn:
        row = conn.exec_driver_sql("SELECT source, severity, attached_policy_ids_json FROM decision_repairs").one()
    assert tuple(row) == ("failure_burst", "warn", "[]")


def test_version_9_pool_gains_its_trace_column_filled_from_the_evidence(bare_engine: Engine) -> None:
    """Migration 10 on a pool written before it: the indexed column appears and old rows name their trace."""
    assert migrate(bare_engine, target=9) == list(range(1, 10))
    with bare_engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_l2_candidate_pool_trace_id")
        conn.exec_driver_sql("ALTER TABLE l2_candidate_pool DROP COLUMN trace_id")
        conn.exec_driver_sql(
            "INSERT INTO l2_candidate_pool (id, evidence_trace_ids_json, signature, similarity, expires_at,"
            " created_at, owner_agent_kind, owner_profile_id) VALUES"
            """ ('cand_x1_tr_old', '["tr_old"]', 'bash|make', 0.5, 10, 1, 'a', 'p')"""
        )
    assert migrate(bare_engine) == [m.version for m in migrations.MIGRATIONS if m.version > 9]
    indexes = {ix["name"] for ix in inspect(bare_engine).get_indexes("l2_candidate_pool")}
    assert "ix_l2_candidate_pool_trace_id" in indexes
    with bare_engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT trace_id FROM l2_candidate_pool").scalar_one() == "tr_old"


def test_database_from_a_newer_build_is_refused(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            Base.metadata.tables["schema_migrations"]
            .insert()
            .values(version=LATEST_VERSION + 1, name="future", applied_at=1)
        )
    with pytest.raises(MemosError) as info:
        migrate(engine)
    assert info.value.code is ErrorCode.UNSUPPORTED


def test_failed_migration_rolls_back_and_is_not_recorded(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(conn: Connection) -> None:
        conn.exec_driver_sql("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("boom")

    monkeypatch.setattr(
        migrations, "MIGRATIONS", (*migrations.MIGRATIONS, Migration(LATEST_VERSION + 1, "broken", broken))
    )
    monkeypatch.setattr(migrations, "LATEST_VERSION", LATEST_VERSION + 1)
    with pytest.raises(RuntimeError, match="boom"):
        migrate(engine)
    assert current_version(engine) == LATEST_VERSION
    assert "half_done" not in inspect(engine).get_table_names()


def test_ensure_helpers_are_idempotent(engine: Engine) -> None:
    note = Column("note", Text, nullable=False, server_default="")
    with engine.begin() as conn:
        assert ensure_column(conn, note, table_name="kv") is True
        assert ensure_column(conn, note, table_name="kv") is False
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO kv (key, value_json, updated_at) VALUES ('a', '1', 1)"))
        assert conn.execute(text("SELECT note FROM kv WHERE key = 'a'")).scalar() == ""

    kv = Base.metadata.tables["kv"]
    index = Index("ix_test_kv_updated", kv.c.updated_at)
    try:
        with engine.begin() as conn:
            assert ensure_index(conn, index) is True
            assert ensure_index(conn, index) is False
        assert "ix_test_kv_updated" in {ix["name"] for ix in inspect(engine).get_indexes("kv")}
    finally:
        kv.indexes.discard(index)  # keep the shared metadata clean for other tests

    # a table-bound ORM column that already exists is left alone
    with engine.begin() as conn:
        assert ensure_column(conn, kv.c.updated_at) is False


def test_migrate_to_explicit_target_then_rest(tmp_path: Path) -> None:
    eng = create_db_engine(f"sqlite:///{tmp_path / 'stepwise.db'}", busy_timeout_ms=500)
    try:
        assert migrate(eng, target=1) == [1]
        assert migrate(eng, target=1) == []
        assert migrate(eng) == list(range(2, LATEST_VERSION + 1))
    finally:
        eng.dispose()
