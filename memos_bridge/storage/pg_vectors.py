"""Vectors searched inside PostgreSQL with pgvector: HNSW indexes, cosine distance, namespace filter in SQL.

The BLOB columns (`vec`, `vec_summary`, `vec_action`: little-endian float32, `vectors.to_blob`) stay the
source of truth on every backend, so capture, learning, import and the copy between databases write them
as before. On PostgreSQL with the `vector` extension each searchable table has a side table
`<table>_pgv (rid, <field>_pgv vector, …)`, one row per base row (same `rid`, deleted with it), filled by an
`AFTER INSERT OR UPDATE OF <vector fields>` trigger through `memos_blob_vector(bytea)` (an exact decoding of
the float32 bits in SQL; NULL for an empty, all-zero or non-finite vector) and back-filled by migration 8.
Because the database keeps it current, every service on the database sees every other service's vectors at
once, and nothing is loaded into memory.

Why a side table rather than columns of the base table: PostgreSQL writes a new entry into every index of a
table for each UPDATE that cannot be done in place, and an HNSW insert costs milliseconds (13 ms per
`traces` row at 20 000 rows on two cores, against 0.4 ms without). The learning loop and recall update trace
rows all the time (value, priority, strength, access counts); in the side table only a changed vector does.

The columns are plain `vector` (any dimension) and each index is a partial expression index per dimension:
`USING hnsw ((<field>_pgv::vector(384)) vector_cosine_ops) WHERE vector_dims(<field>_pgv) = 384`, the form
pgvector documents for columns of mixed dimensions. A `vector(384)` column would make every row written by
another embedding model fail to insert, and re-embedding with a new model (`memory.import` re-embeds) would
need the column rebuilt; here rows of another dimension are simply not found, as the in-memory index skips
them. Migration 8 creates the indexes for the shipped model's dimension (`DEFAULT_DIM`); a service
configured for another dimension creates its own at start (`prepare`).

A search orders by the indexed expression (`<=>`, cosine distance; score = 1 − distance = cosine similarity,
as in the in-memory index) and joins the base row for the namespace and live-row predicates, in one
statement. An HNSW scan returns at most `hnsw.ef_search` rows before those predicates apply (pgvector 0.6
has no iterative scan), so `ef_search` is raised to cover `k`, and when fewer than `k` rows come back the
search runs exactly over the visible rows: the namespace's own rows through the owner index and the shared
rows through a small partial index, which is cheap for the small namespaces that cause it. `min_score` is
applied after, so it never triggers the exact pass by itself.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection, Table, text
from sqlalchemy.dialects.postgresql.base import ischema_names
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.types import UserDefinedType

from memos_bridge.storage.models import MemoryRow, PolicyRow, SkillRow, TraceRow, WorldModelRow
from memos_bridge.storage.owner import SHARED_SCOPES, OwnerFilter
from memos_bridge.storage.vectors import VECTOR_FIELDS, FloatArray, from_blob

log = logging.getLogger(__name__)

DEFAULT_DIM = 384
"""Dimension of the shipped embedding model (all-MiniLM-L6-v2): its HNSW indexes are made by migration 8."""

MODELS: dict[str, type[Any]] = {
    "trace": TraceRow,
    "policy": PolicyRow,
    "world_model": WorldModelRow,
    "skill": SkillRow,
    "memory": MemoryRow,
}


class PgVector(UserDefinedType[Any]):
    """pgvector's `vector` type, known by name so that reflecting a table with the derived vector columns
    (`inspect(conn).get_columns`, which migrations and the database copy use) does not warn about an
    unknown type. The ORM never maps these columns."""

    cache_ok = True

    def get_col_spec(self, **_kw: Any) -> str:
        return "vector"


ischema_names.setdefault("vector", PgVector)

MAX_EF_SEARCH = 1000
MIN_EF_SEARCH = 64

_BLOB_VECTOR = """
CREATE OR REPLACE FUNCTION memos_blob_vector(b bytea) RETURNS vector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
SELECT CASE WHEN bool_or(e = 255) OR bool_and((bits & 2147483647) = 0) THEN NULL
  ELSE array_agg(
    (CASE WHEN (bits >> 31) = 1 THEN -1.0 ELSE 1.0 END)::float8 *
    (CASE WHEN e = 0 THEN (bits & 8388607)::float8 * 2.0::float8 ^ (-149)
          ELSE ((bits & 8388607) + 8388608)::float8 * 2.0::float8 ^ (e - 150) END)
    ORDER BY n)::real[]::vector END
FROM (SELECT n, bits, ((bits >> 23) & 255) AS e FROM (
  SELECT m.n, ('x' || m.g[4] || m.g[3] || m.g[2] || m.g[1])::bit(32)::bigint AS bits
  FROM regexp_matches(encode(b, 'hex'), '(..)(..)(..)(..)', 'g') WITH ORDINALITY AS m(g, n)) AS w) AS f
WHERE length(b) > 0 AND mod(length(b), 4) = 0
$fn$
"""
"""Decode a `to_blob` BLOB into a pgvector value: the little-endian bytes of each float32 are read in one pass
over the value's hex form, then sign, exponent and mantissa are combined exactly in float8 (subnormals
included). NaN or infinity anywhere, or an all-zero vector (no direction: cosine distance to it is
undefined), gives NULL, which no search finds. Not `get_byte` per byte: on a stored (compressed) value each
call decompresses it again, which made one 384-float vector cost 11 ms instead of 1."""


_SHARED = "b.share_scope IN (" + ", ".join(f"'{scope}'" for scope in SHARED_SCOPES) + ")"


def _q(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _table(kind: str) -> Table:
    tbl = MODELS[kind].__table__
    assert isinstance(tbl, Table)
    return tbl


def column(field: str) -> str:
    """The pgvector twin of a BLOB vector column (a column of the side table)."""
    return f"{field}_pgv"


def side_table(kind: str) -> str:
    """The table holding a kind's `vector` columns, keyed by the base table's `rid`."""
    return f"{_table(kind).name}_pgv"


def _live(kind: str, alias: str = "") -> str:
    """Rows a search may return (`repos.iter_vectors` loads the same ones into the in-memory index)."""
    prefix = f"{alias}." if alias else ""
    sql = f"{prefix}archived_at IS NULL"
    if "status" in _table(kind).c:
        sql += f" AND {prefix}status <> 'archived'"
    return sql


def index_name(kind: str, field: str, dim: int) -> str:
    return f"ix_{side_table(kind)}_{field}_hnsw{int(dim)}"


# ---------------------------------------------------------------------------------------------------------
# DDL


PREPARE_LOCK_KEY = 0x6D656D6F73_564543  # "memos" "VEC"
"""Advisory lock that serialises `prepare` between services starting at once on one database."""


def prepare(conn: Connection, dim: int) -> bool:
    """Make the database ready to search vectors of dimension `dim`; False: use the in-memory index.

    Run once by each service at start, in a write transaction. Usually it only checks: migration 8 set
    everything up. It installs the vector columns when pgvector became available on the server after
    migration 8 ran without it, and creates the HNSW indexes of a dimension other than `DEFAULT_DIM`
    (a one-time index build). Services starting together take turns (`PREPARE_LOCK_KEY`), so two of them
    never create the same index at once."""
    if conn.dialect.name != "postgresql":
        return False
    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({PREPARE_LOCK_KEY})")
    if not ready(conn):
        available = conn.exec_driver_sql("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").scalar()
        if available is None or not install(conn, dim):
            return False
    if missing_indexes(conn, dim):
        log.info("creating the HNSW indexes for %d-dimensional vectors", dim)
        ensure_indexes(conn, dim)
    return True


def extension_version(conn: Connection) -> str | None:
    version = conn.exec_driver_sql("SELECT extversion FROM pg_extension WHERE extname = 'vector'").scalar()
    return None if version is None else str(version)


def _decoded(row: str, fields: Sequence[str]) -> str:
    """The `vector` values of a row's BLOB fields, in order."""
    return ", ".join(f"memos_blob_vector({row}.{_q(f)})" for f in fields)


def install(conn: Connection, dim: int = DEFAULT_DIM) -> bool:
    """Create the extension (if the server has it), the decoding function, the side tables with the
    triggers that fill them, fill them for the rows already there, and create the HNSW indexes for `dim`.
    False, with nothing changed, when the extension cannot be created (not installed on the server, or not
    allowed for this role)."""
    if extension_version(conn) is None:
        try:
            with conn.begin_nested():
                conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
        except DBAPIError as exc:
            log.warning("pgvector is not available (%s): vectors stay in the in-memory index", exc.orig)
            return False
    conn.exec_driver_sql(_BLOB_VECTOR)
    for kind, fields in VECTOR_FIELDS.items():
        base, side = _table(kind).name, side_table(kind)
        created = conn.exec_driver_sql(f"SELECT to_regclass('{_q(side)}') IS NULL").scalar()
        columns = ", ".join(f"{column(f)} vector" for f in fields)
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {_q(side)} (rid integer PRIMARY KEY "
            f"REFERENCES {_q(base)} (rid) ON DELETE CASCADE, {columns})"
        )
        targets = ", ".join(column(f) for f in fields)
        if created:  # back-fill the rows written before
            conn.exec_driver_sql(
                f"INSERT INTO {_q(side)} (rid, {targets}) SELECT b.rid, {_decoded('b', fields)} FROM {_q(base)} AS b "
                "ON CONFLICT (rid) DO NOTHING"
            )
        function = f"memos_vectors_{base}"
        unchanged = " AND ".join(f"NEW.{_q(f)} IS NOT DISTINCT FROM OLD.{_q(f)}" for f in fields)
        updates = ", ".join(f"{column(f)} = EXCLUDED.{column(f)}" for f in fields)
        conn.exec_driver_sql(
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN "
            f"IF TG_OP = 'UPDATE' AND {unchanged} THEN RETURN NULL; END IF; "
            f"INSERT INTO {_q(side)} AS v (rid, {targets}) VALUES (NEW.rid, {_decoded('NEW', fields)}) "
            f"ON CONFLICT (rid) DO UPDATE SET {updates}; RETURN NULL; END $fn$"
        )
        trigger = _q(f"{base}_vectors")
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger} ON {_q(base)}")
        conn.exec_driver_sql(
            f"CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OF {', '.join(_q(f) for f in fields)} ON {_q(base)} "
            f"FOR EACH ROW EXECUTE FUNCTION {function}()"
        )
    ensure_indexes(conn, dim)
    return True


def ensure_indexes(conn: Connection, dim: int) -> None:
    """The HNSW index of every vector column for vectors of dimension `dim`, and the small partial index of
    shared rows that the exact search reads (IF NOT EXISTS)."""
    dim = int(dim)
    for kind, fields in VECTOR_FIELDS.items():
        base = _table(kind).name
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS {_q(f'ix_{base}_shared_rows')} ON {_q(base)} (rid) "
            f"WHERE {_SHARED.removeprefix('b.')}"
        )
        for field in fields:
            pgv = column(field)
            conn.exec_driver_sql(
                f"CREATE INDEX IF NOT EXISTS {_q(index_name(kind, field, dim))} ON {_q(side_table(kind))} "
                f"USING hnsw (({pgv}::vector({dim})) vector_cosine_ops) WHERE vector_dims({pgv}) = {dim}"
            )


def missing_indexes(conn: Connection, dim: int) -> list[str]:
    wanted = [index_name(kind, field, dim) for kind, fields in VECTOR_FIELDS.items() for field in fields]
    found = set(
        conn.execute(
            text("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ANY(:names)"),
            {"names": wanted},
        ).scalars()
    )
    return [name for name in wanted if name not in found]


def ready(conn: Connection) -> bool:
    """Whether vectors are searched in this database: pgvector is installed and every kind has its side table
    with every vector column (migration 8 ran with the extension available)."""
    if conn.dialect.name != "postgresql" or extension_version(conn) is None:
        return False
    wanted = [f"{side_table(kind)}.{column(field)}" for kind, fields in VECTOR_FIELDS.items() for field in fields]
    found = conn.execute(
        text(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND (table_name || '.' || column_name) = ANY(:names) AND udt_name = 'vector'"
        ),
        {"names": wanted},
    ).scalar_one()
    return int(found) == len(wanted)


# ---------------------------------------------------------------------------------------------------------
# Search


def vector_literal(vec: FloatArray | Sequence[float]) -> str:
    """pgvector's text form of a vector; 9 significant digits give back the same float32."""
    return "[" + ",".join(f"{x:.9g}" for x in np.asarray(vec, dtype=np.float32).tolist()) + "]"


def set_ef_search(session: Session, k: int) -> None:
    """Let the HNSW scans of this transaction return enough rows for `k` results after filtering."""
    ef = min(MAX_EF_SEARCH, max(MIN_EF_SEARCH, 2 * k))
    session.execute(text("SELECT set_config('hnsw.ef_search', :ef, true)"), {"ef": str(ef)})


def search(
    session: Session,
    kind: str,
    field: str,
    query: FloatArray,
    k: int,
    owner: OwnerFilter | None,
    *,
    dim: int,
    min_score: float | None = None,
) -> list[tuple[str, float]]:
    """Top-`k` [(id, cosine similarity)] of live rows visible to `owner` (None: every namespace), best first.

    Call `set_ef_search` once per transaction before (a batch of) searches."""
    if k <= 0 or not np.any(query):
        return []
    values: dict[str, Any] = {"q": vector_literal(query), "k": int(k)}
    if owner is None:
        own_sql = None
        visible = "1 = 1"
    else:
        own_sql, params = owner.sql("b", shareable=False)
        visible, _ = owner.sql("b", shareable=True)
        values.update(params)
    rows = session.execute(_search_statement(kind, field, int(dim), visible), values).all()
    if len(rows) < k:  # the HNSW scan may have run out of candidates before the filters kept k
        rows = session.execute(_exact_statement(kind, field, int(dim), own_sql), values).all()
    found = [(str(row_id), float(score)) for row_id, score in rows]
    if min_score is not None:
        found = [(row_id, score) for row_id, score in found if score >= min_score]
    return found


@functools.cache
def _search_statement(kind: str, field: str, dim: int, visible_sql: str) -> TextClause:
    """Nearest rows through the HNSW index of dimension `dim` (the ORDER BY is the indexed expression), each
    joined to its base row for the filters."""
    pgv = f"v.{column(field)}"
    distance = f"({pgv}::vector({dim}) <=> CAST(:q AS vector({dim})))"
    return text(
        f"SELECT b.id, 1 - {distance} AS score FROM {_q(side_table(kind))} AS v "
        f"JOIN {_q(_table(kind).name)} AS b ON b.rid = v.rid "
        f"WHERE vector_dims({pgv}) = {dim} AND {_live(kind, 'b')} AND {visible_sql} ORDER BY {distance} LIMIT :k"
    )


@functools.cache
def _exact_statement(kind: str, field: str, dim: int, own_sql: str | None) -> TextClause:
    """Every visible row scored (ordered by an expression no index covers). The visible rows are listed first
    from the base table, the namespace's own rows and the shared rows apart so that each part uses its index
    (the owner index; the partial index of shared rows) instead of one scan for `own OR shared`, and only
    their vectors are read: the planner cannot estimate `vector_dims(…) = dim` and would otherwise start from
    the vector table and read every vector."""
    base, side, pgv = _q(_table(kind).name), _q(side_table(kind)), f"v.{column(field)}"

    def part(condition: str) -> str:
        return f"SELECT b.id, b.rid FROM {base} AS b WHERE {_live(kind, 'b')} AND {condition}"

    visible = (
        part("1 = 1")
        if own_sql is None
        else f"{part(own_sql)} UNION ALL {part(f'{_SHARED} AND ({own_sql}) IS NOT TRUE')}"
    )
    distance = f"({pgv} <=> CAST(:q AS vector))"
    return text(
        f"WITH visible AS MATERIALIZED ({visible}) "
        f"SELECT visible.id, 1 - {distance} AS score FROM visible JOIN {side} AS v ON v.rid = visible.rid "
        f"WHERE vector_dims({pgv}) = {dim} ORDER BY {distance} LIMIT :k"
    )


def stored_vectors(session: Session, kind: str, field: str, ids: Sequence[str], dim: int) -> dict[str, FloatArray]:
    """The unit vectors of live rows among `ids` (for MMR redundancy and roll-up goals), read from the BLOBs."""
    if not ids:
        return {}
    stmt = _stored_statement(kind, field)
    out: dict[str, FloatArray] = {}
    for row_id, blob in session.execute(stmt, {"ids": list(dict.fromkeys(ids))}):
        try:
            vec = from_blob(bytes(blob), dim)
        except ValueError:
            continue  # another model's dimension: the in-memory index skips these rows too
        norm = float(np.linalg.norm(vec))
        if np.isfinite(norm) and norm > 0:
            out[str(row_id)] = vec / np.float32(norm)
    return out


@functools.cache
def _stored_statement(kind: str, field: str) -> TextClause:
    return text(
        f"SELECT b.id, b.{_q(field)} FROM {_q(_table(kind).name)} AS b "
        f"WHERE b.id = ANY(:ids) AND b.{_q(field)} IS NOT NULL AND {_live(kind, 'b')}"
    )
