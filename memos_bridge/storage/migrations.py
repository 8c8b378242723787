"""Versioned, in-place schema upgrades.

`MIGRATIONS` is an ordered list of `Migration(version, name, apply)`. `migrate(engine)` applies, in order,
every migration whose version is not yet recorded in `schema_migrations`; each one runs in its own
transaction together with the row that records it, so a failure leaves the database at the previous
version (SQLite DDL is transactional once SQLAlchemy owns BEGIN, see `engine.py`). Writers BEGIN
IMMEDIATE (on PostgreSQL each migration transaction takes an advisory lock first) and the "already
applied?" check happens inside that transaction, so two processes starting at once cannot apply a migration
twice.

How a later change adds a migration
-----------------------------------
1. Change the ORM in `models.py` (new column, table or index). Fresh databases get it from migration 1,
   which creates the *current* ORM schema.
2. Append `Migration(<next version>, "<short_name>", _fn)` to `MIGRATIONS`, where `_fn(conn)` brings an
   *existing* database to the same shape idempotently, e.g.::

       def _add_trace_lang(conn: Connection) -> None:
           ensure_column(conn, TraceRow.__table__.c.lang)     # ALTER TABLE ADD COLUMN only if missing
           ensure_index(conn, _index(TraceRow, "ix_traces_lang"))   # the index declared on the model

   Because migration 1 already created the column on fresh databases, the helpers must check the
   inspector first (`ensure_column`, `ensure_index`, `ensure_table` do). A new NOT NULL column needs a
   `server_default` for SQLite's ALTER TABLE. Data back-fills belong in the same function.
3. Never edit or renumber a released migration; the schema drift test (`tests/storage`) checks that a
   database built by the migrations matches the ORM.

SQLite-only steps (FTS5 DDL) must check `conn.dialect.name` and be a no-op elsewhere; likewise
PostgreSQL-only steps (migration 8: tsvector and 3-gram search tables, pgvector) on SQLite. The tables such
DDL adds outside the ORM (FTS5's `<table>_fts_*`; PostgreSQL's `<table>_search` and `<table>_pgv`) are derived
from ORM columns by triggers and are never written or read through the ORM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Connection, Engine, Index, Table, func, insert, inspect, select, update
from sqlalchemy.schema import CreateColumn

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.storage import pg_vectors
from memos_bridge.storage.engine import fts5_available, is_sqlite, sqlite_version, writer
from memos_bridge.storage.fts import create_fts, rebuild_fts
from memos_bridge.storage.models import (
    AuditEventRow,
    Base,
    DecisionRepairRow,
    L2CandidateRow,
    LearningClaimRow,
    MemoryRow,
    PolicyRow,
    RelayedEventRow,
    SchemaMigrationRow,
    SkillRow,
    TraceRow,
    WorldModelRow,
)
from memos_bridge.timeutil import now_ms

_MIGRATIONS_TABLE = Base.metadata.tables[SchemaMigrationRow.__tablename__]


@dataclass(frozen=True)
class Migration:
    """One schema step; `apply` runs inside the transaction that records it."""

    version: int
    name: str
    apply: Callable[[Connection], None]


# ---------------------------------------------------------------------------------------------------------
# Idempotent helpers for migration functions


def ensure_table(conn: Connection, table: Table) -> bool:
    """Create `table` (with its indexes) if missing. Returns True when it was created."""
    if inspect(conn).has_table(table.name):
        return False
    table.create(conn)
    return True


def ensure_column(conn: Connection, column: Column[Any], table_name: str | None = None) -> bool:
    """ALTER TABLE ADD COLUMN unless the column already exists. Returns True when it was added.

    `column` is usually `Model.__table__.c.<name>`; pass `table_name` for a free-standing Column.
    """
    name = table_name or getattr(column.table, "name", None)
    if not name:
        raise ValueError("ensure_column needs a table-bound column or table_name")
    existing = {col["name"] for col in inspect(conn).get_columns(name)}
    if column.name in existing:
        return False
    ddl = CreateColumn(column).compile(dialect=conn.dialect)
    quoted = conn.dialect.identifier_preparer.quote(name)
    conn.exec_driver_sql(f"ALTER TABLE {quoted} ADD COLUMN {ddl}")
    return True


def ensure_index(conn: Connection, index: Index) -> bool:
    """Create `index` unless an index of that name exists on its table. Returns True when created."""
    table = index.table
    if table is None or index.name is None:
        raise ValueError("ensure_index needs a named index bound to a table")
    existing = {ix["name"] for ix in inspect(conn).get_indexes(table.name)}
    if index.name in existing:
        return False
    index.create(conn)
    return True


# ---------------------------------------------------------------------------------------------------------
# The migrations


def _baseline(conn: Connection) -> None:
    Base.metadata.create_all(conn, checkfirst=True)


def _fts5(conn: Connection) -> None:
    if conn.dialect.name != "sqlite":
        return
    create_fts(conn)
    rebuild_fts(conn)


def _learning_columns(conn: Connection) -> None:
    """Issue 4: policy pattern signatures; decision repairs know their episode, tool, source and policies."""
    ensure_column(conn, _table(PolicyRow).c.signature)
    repairs = _table(DecisionRepairRow)
    for name in ("episode_id", "tool", "source", "severity", "confidence", "attached_policy_ids_json"):
        ensure_column(conn, repairs.c[name])


def _experience_columns(conn: Connection) -> None:
    """Issue 5: experiences carry domain tags (world models group by them) and a meta record."""
    policies = _table(PolicyRow)
    ensure_column(conn, policies.c.tags_json)
    ensure_column(conn, policies.c.meta_json)


def _experience_lesson(conn: Connection) -> None:
    """Typed experiences keep their lesson (the feedback's own lines, their roles and subject) in a column."""
    ensure_column(conn, _table(PolicyRow).c.lesson_json)


def _remembered_memories(conn: Connection) -> None:
    """Memories written on purpose (a table with its FTS indexes), forgetting on every searchable kind, and
    the audit index that `memory.history` reads by memory."""
    ensure_table(conn, _table(MemoryRow))
    for model in (TraceRow, PolicyRow, WorldModelRow, SkillRow):
        ensure_column(conn, _table(model).c.forgotten_at)
    ensure_index(conn, _index(AuditEventRow, "ix_audit_events_target"))
    if conn.dialect.name == "sqlite":
        create_fts(conn)  # IF NOT EXISTS: only the new table's indexes and triggers are created


def _skill_review(conn: Connection) -> None:
    """A person's review of a skill (approved / rejected, the reason, when) lives on the skill row, so every
    read and every learning path sees it without a join."""
    skills = _table(SkillRow)
    for name in ("review_status", "review_reason", "reviewed_at"):
        ensure_column(conn, skills.c[name])


def _shared_database(conn: Connection) -> None:
    """Several services on one database: the learning-chain claims and the bodies of large relayed events."""
    ensure_table(conn, _table(LearningClaimRow))
    ensure_table(conn, _table(RelayedEventRow))


def _postgres_search(conn: Connection) -> None:
    """PostgreSQL searches in the database: for every searchable kind a side table with a weighted tsvector
    and a 3-gram array under GIN indexes (`pg_search`), and, where the server has pgvector, one with a
    `vector` twin of every vector column under HNSW indexes for the shipped model's dimension (`pg_vectors`),
    all kept current by triggers and filled for the rows already there. Without pgvector the vectors stay in
    the in-memory index and `core.health` reports no vector extension. Nothing to do on SQLite (FTS5 came
    with migration 2)."""
    if conn.dialect.name != "postgresql":
        return
    create_fts(conn)
    pg_vectors.install(conn)


def _pool_trace_column(conn: Connection) -> None:
    """The L2 candidate pool names the trace each row is evidence of in an indexed column: a chain found a
    step's rows by the id's suffix (`LIKE '%_<trace id>'`), a scan of the whole pool per step, and the pool
    only grows. Existing rows get it from their evidence list (one trace per row)."""
    pool = _table(L2CandidateRow)
    ensure_column(conn, pool.c.trace_id)
    ensure_index(conn, _index(L2CandidateRow, "ix_l2_candidate_pool_trace_id"))
    rows = conn.execute(select(pool.c.id, pool.c.evidence_trace_ids_json).where(pool.c.trace_id.is_(None))).all()
    for row_id, evidence in rows:
        if evidence:
            conn.execute(update(pool).where(pool.c.id == row_id).values(trace_id=evidence[0]))


def _index(model: type[Any], name: str) -> Index:
    """The model's own declared index: a new `Index(name, column)` would attach a second index of that name to
    the shared table metadata, and the next `create_all` in the process would try to create it twice."""
    return next(index for index in _table(model).indexes if index.name == name)


def _table(model: type[Any]) -> Table:
    tbl = model.__table__
    assert isinstance(tbl, Table)
    return tbl


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "baseline", _baseline),
    Migration(2, "fts5", _fts5),
    Migration(3, "learning_columns", _learning_columns),
    Migration(4, "experience_columns", _experience_columns),
    Migration(5, "experience_lesson", _experience_lesson),
    Migration(6, "remembered_memories", _remembered_memories),
    Migration(7, "skill_review", _skill_review),
    Migration(8, "postgres_search", _postgres_search),
    Migration(9, "shared_database", _shared_database),
    Migration(10, "pool_trace_column", _pool_trace_column),
)

LATEST_VERSION = MIGRATIONS[-1].version


def _check_order(migrations: tuple[Migration, ...]) -> None:
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)) or versions[0] < 1:
        raise RuntimeError(f"migration versions must be unique, ascending and ≥ 1: {versions}")


_check_order(MIGRATIONS)


# ---------------------------------------------------------------------------------------------------------
# Running them


def _recorded_version(conn: Connection) -> int:
    if not inspect(conn).has_table(_MIGRATIONS_TABLE.name):
        return 0
    value = conn.execute(select(func.max(_MIGRATIONS_TABLE.c.version))).scalar()
    return int(value or 0)


def _is_applied(conn: Connection, version: int) -> bool:
    stmt = select(_MIGRATIONS_TABLE.c.version).where(_MIGRATIONS_TABLE.c.version == version)
    return conn.execute(stmt).first() is not None


MIGRATION_LOCK_KEY = 0x6D656D6F73_4D4947  # "memos" "MIG": any constant the services agree on
"""PostgreSQL advisory lock taken by each migration transaction (see `_one_migrator`)."""


def _one_migrator(conn: Connection) -> None:
    """On PostgreSQL, wait until no other service is migrating the database (the lock ends with the transaction).

    SQLite's writers BEGIN IMMEDIATE, which already makes a second process wait; PostgreSQL's transactions do
    not lock anything up front, so two services started at once on one database would both find a migration
    missing, both apply it, and one would fail on a table the other had just created."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")


def current_version(engine: Engine) -> int:
    """Highest applied migration version (0 for an empty database)."""
    with engine.connect() as conn:
        return _recorded_version(conn)


def migrate(engine: Engine, *, target: int | None = None) -> list[int]:
    """Apply pending migrations up to `target` (default: all). Returns the versions applied now.

    Raises MemosError(unsupported) if the database was written by a newer build (its version is above
    LATEST_VERSION), or if SQLite lacks FTS5 trigram support.
    """
    found = current_version(engine)
    if found > LATEST_VERSION:
        raise MemosError(
            ErrorCode.UNSUPPORTED,
            f"database schema version {found} is newer than this build supports ({LATEST_VERSION})",
        )
    pending = [m for m in MIGRATIONS if target is None or m.version <= target]
    needs_fts5 = any(m.name == "fts5" and m.version > found for m in pending)
    if needs_fts5 and is_sqlite(engine) and not fts5_available(engine):
        raise MemosError(
            ErrorCode.UNSUPPORTED,
            f"SQLite {sqlite_version()} lacks FTS5 with the trigram tokenizer (needs ≥ 3.34 with FTS5)",
        )
    write_engine = writer(engine) if is_sqlite(engine) else engine
    with write_engine.begin() as conn:
        _one_migrator(conn)
        ensure_table(conn, _MIGRATIONS_TABLE)
    applied: list[int] = []
    for migration in pending:
        with write_engine.begin() as conn:
            _one_migrator(conn)
            if _is_applied(conn, migration.version):
                continue
            migration.apply(conn)
            conn.execute(
                insert(_MIGRATIONS_TABLE).values(version=migration.version, name=migration.name, applied_at=now_ms())
            )
        applied.append(migration.version)
    return applied
