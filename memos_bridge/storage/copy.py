"""Copy a whole memory from one database to another: SQLite → PostgreSQL, PostgreSQL → SQLite, SQLite → SQLite.

This is what `memos-bridge migrate` runs (the command line is `cli_migrate.py`); here there is only storage:
two engines in, per-table counts out, progress through a callback.

How the copy works, and why:

* both schemas are brought to this build's version with the product's own migrations first (`migrate`), so
  the rows of every ORM table have the same columns on both sides, and the target's dialect-specific
  structures (FTS5 tables and triggers on SQLite) exist before the first row arrives. A database written by
  a newer build is refused: its rows may have columns this build does not know;
* only the base tables of `models.Base` are copied, parents before children (`metadata.sorted_tables`), so
  foreign keys hold at every commit. Full-text indexes and any other derived search structure are never
  copied: they differ between dialects, so the target builds its own (`rebuild_fts` at the end). Vectors are
  BLOB columns of the base tables, so they travel with their rows and the service loads them as usual.
  `schema_migrations` is not copied either: it records what the target's own migrations did;
* rows are read from one read transaction of the source (one snapshot, even for a memory another process
  writes to) and written in batches, one target transaction per batch. Each batch first reads the next
  primary keys of the source in key order, asks the target which of them it already holds, and inserts only
  the others. So an interrupted copy run again continues where it stopped and never duplicates a row, and a
  run after a complete copy writes nothing: it checks every key and the counts (a verification). Keys are
  only ever compared for equality between the two databases, never ordered, because text sorts differently
  in SQLite and in a PostgreSQL collation. A row the target holds is never rewritten, so a source changed
  between an interrupted run and its continuation (served meanwhile) is best copied again into a fresh target;
* the target remembers which source it receives (`memos_copy_state`, a one-row table outside the ORM, so it
  is neither copied nor part of the product's schema). A target that holds rows but no such record, or the
  record of another source, is refused unless `force`: copying one memory into another merges them, and
  integer keys (`rid`, turn and link ids) of the two would collide — `memory.export` / `memory.import` are
  the tools that merge memories. A source is known by the creation time of its database (when its first
  migration ran), which survives moving the file;
* PostgreSQL hands out integer keys from sequences that an explicit insert does not advance, so after the copy
  every sequence is set past the largest copied key; otherwise the target's next insert would collide;
* PostgreSQL text cannot hold the NUL character that SQLite text can (tool output sometimes has one), so on a
  PostgreSQL target NUL characters of text columns are replaced by U+FFFD and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    MetaData,
    String,
    Table,
    delete,
    func,
    insert,
    inspect,
    literal,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.storage.engine import is_sqlite, writer
from memos_bridge.storage.fts import rebuild_fts
from memos_bridge.storage.migrations import LATEST_VERSION, current_version, migrate
from memos_bridge.storage.models import Base, SchemaMigrationRow
from memos_bridge.timeutil import now_ms

BATCH_ROWS = 1000
"""Rows per target transaction: large enough that a commit's cost is spread, small enough that an
interruption loses little and the progress bar moves."""

NUL_REPLACEMENT = "\ufffd"

#: The target's record of the source it receives (see the module docstring). Its own metadata: it is not part
#: of the product's schema, so `create_all` and the schema drift test never see it.
COPY_STATE = Table(
    "memos_copy_state",
    MetaData(),
    Column("source_id", String, primary_key=True),
    Column("source", String, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("finished_at", BigInteger, nullable=True),
)

_NOT_COPIED = {SchemaMigrationRow.__tablename__}


def copied_tables() -> list[Table]:
    """The ORM tables a copy moves, parents before children."""
    return [table for table in Base.metadata.sorted_tables if table.name not in _NOT_COPIED]


@dataclass(frozen=True)
class TableProgress:
    """Where the copy of one table stands: `done` of `total` source rows handled (copied now or found in
    the target already), `copied` of them inserted by this run; `finished` once the table is complete."""

    table: str
    total: int
    done: int
    copied: int
    finished: bool = False


@dataclass(frozen=True)
class TableCount:
    """Rows of one table in the source and in the target after the copy, and how many this run inserted."""

    table: str
    source: int
    target: int
    copied: int = 0

    @property
    def ok(self) -> bool:
        return self.source == self.target


@dataclass(frozen=True)
class CopyReport:
    """What a copy did: per-table counts (the verification), whether it continued an earlier run of the
    same copy, and how many text values lost a NUL character on the way to PostgreSQL."""

    tables: list[TableCount]
    resumed: bool = False
    nul_replaced: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(count.ok for count in self.tables)

    @property
    def copied(self) -> int:
        return sum(count.copied for count in self.tables)


ProgressCallback = Callable[[TableProgress], None]


# ---------------------------------------------------------------------------------------------------------
# Schema versions and the source's identity


def check_versions(source: Engine, target: Engine) -> None:
    """Refuse a database written by a newer build: its rows may carry columns this build would drop."""
    for role, engine in (("source", source), ("target", target)):
        found = current_version(engine)
        if found > LATEST_VERSION:
            raise MemosError(
                ErrorCode.UNSUPPORTED,
                f"the {role} database has schema version {found}, newer than this memos-bridge supports "
                f"({LATEST_VERSION}): run the copy with the newer memos-bridge that wrote it",
                {"role": role, "version": found, "supported": LATEST_VERSION},
            )


def source_id(conn: Connection) -> str:
    """Who the source is: its dialect and the millisecond its first migration ran (stable when the file
    moves; two databases created apart share it only by a coincidence of the clock)."""
    table = Base.metadata.tables[SchemaMigrationRow.__tablename__]
    created = conn.execute(select(func.min(table.c.applied_at))).scalar()
    return f"{conn.dialect.name}:{created}"


# ---------------------------------------------------------------------------------------------------------
# The copy


def copy_memory(
    source: Engine,
    target: Engine,
    *,
    source_label: str,
    force: bool = False,
    batch_rows: int = BATCH_ROWS,
    on_progress: ProgressCallback | None = None,
) -> CopyReport:
    """Copy every ORM table of `source` into `target` and verify the counts (module docstring).

    `source_label` names the source in the target's record and in messages (a URL without its password).
    `on_progress` is called when a table starts, after each committed batch and when the table is done; an
    exception it raises stops the copy after that batch, which a later call continues.
    Raises MemosError: `unsupported` for a newer schema, `conflict` for a target holding another memory.
    """
    if batch_rows < 1:
        raise ValueError("batch_rows must be ≥ 1")
    check_versions(source, target)
    migrate(source)
    migrate(target)
    target_w = writer(target) if is_sqlite(target) else target
    tables = copied_tables()
    sanitize = _nul_sanitizer(target)
    notes: list[str] = []
    _check_tables(target, tables)
    with _snapshot(source) as src:
        identity = source_id(src)
        resumed, finished_before = _claim_target(target_w, tables, identity, source_label, force=force)
        in_source = set(inspect(src).get_table_names())
        absent = [table.name for table in tables if table.name not in in_source]
        if absent:
            notes.append(f"not in the source, so nothing to copy: {', '.join(absent)}")
        source_counts = {table.name: _count(src, table) if table.name in in_source else 0 for table in tables}
        copied: dict[str, int] = {}
        for table in tables:
            total = source_counts[table.name]
            if table.name in absent:
                copied[table.name] = 0
                if on_progress is not None:
                    on_progress(TableProgress(table.name, 0, 0, 0, finished=True))
                continue
            copied[table.name] = _copy_table(src, target_w, table, total, batch_rows, sanitize, on_progress)
    with target_w.begin() as conn:
        reset = reset_sequences(conn, tables)
        if reset:
            notes.append(f"sequences set past the copied keys of {len(reset)} tables")
        if any(copied.values()) or not finished_before:
            rebuild_derived(conn)
            notes.append("search indexes rebuilt on the target")
        conn.execute(update(COPY_STATE).where(COPY_STATE.c.source_id == identity).values(finished_at=now_ms()))
    counts = verify(source_counts, target, tables, copied)
    return CopyReport(counts, resumed=resumed, nul_replaced=sanitize.replaced, notes=notes)


def _check_tables(target: Engine, tables: Sequence[Table]) -> None:
    """Every copied table must exist in the target once its migrations ran; a source may lack a table its
    migrations do not create (it then has no rows of it)."""
    with target.connect() as conn:
        present = set(inspect(conn).get_table_names())
    missing = [table.name for table in tables if table.name not in present]
    if missing:
        raise MemosError(
            ErrorCode.UNSUPPORTED,
            f"the target has no table {', '.join(missing)} after its migrations: this build's schema is incomplete",
            {"tables": missing},
        )


def verify(
    source_counts: Mapping[str, int], target: Engine, tables: Sequence[Table], copied: Mapping[str, int]
) -> list[TableCount]:
    """Rows per table in the source (as the copy read them) and in the target now."""
    with target.connect() as conn:
        return [
            TableCount(table.name, source_counts[table.name], _count(conn, table), copied.get(table.name, 0))
            for table in tables
        ]


def rebuild_derived(conn: Connection) -> None:
    """Rebuild the target's search structures from its base tables. On SQLite the FTS5 triggers indexed each
    copied row as it was inserted already; rebuilding from the finished tables gives the same index whatever
    happened to an earlier interrupted run, and a structure that a back-fill fills rather than a trigger is
    filled here. A new derived structure's rebuild belongs in this function."""
    rebuild_fts(conn)


def reset_sequences(conn: Connection, tables: Sequence[Table]) -> list[str]:
    """On PostgreSQL, set the sequence behind every integer key column past its largest value (an empty table
    starts at 1 again). Returns the `table.column` names whose sequence was set; [] on SQLite, which takes
    the next integer key from the table itself."""
    if conn.dialect.name != "postgresql":
        return []
    done: list[str] = []
    for table in tables:
        column = table.autoincrement_column
        if column is None:
            continue
        sequence = conn.execute(
            text("SELECT pg_get_serial_sequence(:table, :column)"), {"table": table.name, "column": column.name}
        ).scalar()
        if sequence is None:
            continue
        largest = conn.execute(select(func.max(column))).scalar()
        if largest is None:
            conn.execute(text("SELECT setval(:seq, 1, false)"), {"seq": sequence})
        else:
            conn.execute(text("SELECT setval(:seq, :value, true)"), {"seq": sequence, "value": int(largest)})
        done.append(f"{table.name}.{column.name}")
    return done


# ---------------------------------------------------------------------------------------------------------
# Steps


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """One read transaction over the whole copy, so every table is read as of the same moment. SQLite in WAL
    mode gives that to any transaction; PostgreSQL's default (read committed) takes a new snapshot per
    statement, so the copy asks for repeatable read."""
    with engine.connect() as conn:
        if not is_sqlite(conn):
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def _claim_target(
    target: Engine, tables: Sequence[Table], identity: str, label: str, *, force: bool
) -> tuple[bool, bool]:
    """Record in the target that it receives `identity`; refuse (unless `force`) a target that holds rows of
    another memory. Returns (whether an earlier run of this copy was found, whether that run finished)."""
    with target.begin() as conn:
        COPY_STATE.create(conn, checkfirst=True)
        record = conn.execute(select(COPY_STATE)).mappings().first()
        if record is not None and record["source_id"] == identity:
            return True, record["finished_at"] is not None
        holding = [table.name for table in tables if _has_rows(conn, table)]
        if holding and not force:
            if record is not None:
                why = f"it receives a copy of another memory ({record['source']})"
            else:
                why = f"it already holds a memory that was not copied from {label} (rows in {', '.join(holding)})"
            raise MemosError(
                ErrorCode.CONFLICT,
                f"refusing to copy into the target: {why}. Copying one memory into another would merge them, and "
                "their keys can collide; to merge two memories, export one and import it into the other "
                "(memos-bridge memories export / import). Give --force to copy into this target anyway.",
                {"tables": holding},
            )
        conn.execute(delete(COPY_STATE))
        conn.execute(insert(COPY_STATE).values(source_id=identity, source=label, started_at=now_ms()))
        return False, False


def _copy_table(
    src: Connection,
    target: Engine,
    table: Table,
    total: int,
    batch_rows: int,
    sanitize: _NulSanitizer,
    on_progress: ProgressCallback | None,
) -> int:
    """Copy the rows of `table` the target lacks, batch by batch in key order; returns how many."""
    key = list(table.primary_key.columns)
    columns = _shared_columns(src, target, table)
    done = copied = 0
    last: tuple[Any, ...] | None = None
    if on_progress is not None:
        on_progress(TableProgress(table.name, total, 0, 0))
    while True:
        query = select(*key).order_by(*key).limit(batch_rows)
        if last is not None:
            query = query.where(_after(key, last))
        keys = [tuple(row) for row in src.execute(query)]
        if not keys:
            break
        with target.begin() as conn:
            present = {tuple(row) for row in conn.execute(select(*key).where(_key_in(key, keys)))}
            missing = [k for k in keys if k not in present]
            if missing:
                rows = src.execute(select(*columns).where(_key_in(key, missing)).order_by(*key)).mappings().all()
                conn.execute(insert(table), [sanitize(dict(row)) for row in rows])
                copied += len(rows)
        done += len(keys)
        last = keys[-1]
        if on_progress is not None:
            on_progress(TableProgress(table.name, total, done, copied))
    if on_progress is not None:
        on_progress(TableProgress(table.name, total, done, copied, finished=True))
    return copied


def _shared_columns(src: Connection, target: Engine, table: Table) -> list[Column[Any]]:
    """The ORM columns both databases have as plain columns. After `migrate` that is every ORM column; a
    column a database computes itself (a generated search column) cannot be inserted, so it is left out."""
    with target.connect() as conn:
        target_columns = {c["name"]: c for c in inspect(conn).get_columns(table.name)}
    source_columns = {c["name"] for c in inspect(src).get_columns(table.name)}
    return [
        column
        for column in table.columns
        if column.name in source_columns
        and column.name in target_columns
        and column.computed is None
        and not target_columns[column.name].get("computed")
    ]


def _after(key: Sequence[Column[Any]], last: tuple[Any, ...]) -> ColumnElement[bool]:
    if len(key) == 1:
        first: ColumnElement[bool] = key[0] > last[0]
        return first
    later: ColumnElement[bool] = tuple_(*key) > tuple_(*(literal(value) for value in last))
    return later


def _key_in(key: Sequence[Column[Any]], keys: Sequence[tuple[Any, ...]]) -> ColumnElement[bool]:
    if len(key) == 1:
        return key[0].in_([k[0] for k in keys])
    return tuple_(*key).in_(keys)


def _count(conn: Connection, table: Table) -> int:
    return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _has_rows(conn: Connection, table: Table) -> bool:
    return conn.execute(select(literal(1)).select_from(table).limit(1)).first() is not None


class _NulSanitizer:
    """Replaces NUL characters in the text values of a row bound for PostgreSQL (module docstring). JSON
    values need nothing: the JSON encoder writes NUL as the escape `\\u0000`, which PostgreSQL's json type
    accepts."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.replaced = 0

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        if not self.active:
            return row
        for name, value in row.items():
            if isinstance(value, str) and "\x00" in value:
                row[name] = value.replace("\x00", NUL_REPLACEMENT)
                self.replaced += 1
        return row


def _nul_sanitizer(target: Engine) -> _NulSanitizer:
    return _NulSanitizer(active=target.dialect.name == "postgresql")


__all__ = [
    "BATCH_ROWS",
    "COPY_STATE",
    "CopyReport",
    "ProgressCallback",
    "TableCount",
    "TableProgress",
    "check_versions",
    "copied_tables",
    "copy_memory",
    "rebuild_derived",
    "reset_sequences",
    "source_id",
    "verify",
]
