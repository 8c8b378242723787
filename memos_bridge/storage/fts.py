"""Full-text search over traces, policies, world models, skills and memories, in the database.

The functions here (`fts_search`, `pattern_search`, `create_fts`, `rebuild_fts`, `fts_integrity_errors`)
are the same on both backends; what serves them depends on the dialect.

SQLite (FTS5). Each searchable kind has two FTS5 *external-content* tables over its base table, keyed by the
integer `rid` column (see `models.SearchableMixin`), so the text is stored once:

* `<table>_fts_tri`  (`tokenize='trigram'`): substring matching, identifiers, CJK text of ≥ 3 characters;
* `<table>_fts_word` (`tokenize='porter unicode61 remove_diacritics 2'`): stemmed English words, for
  ranking natural-language queries.

Triggers keep both in sync on INSERT, DELETE and UPDATE OF the indexed columns, using the external-content
'delete' idiom (the old values must be given back to remove their tokens). The DDL is created by migration
2 (`migrations.py`), never by metadata events, and `rebuild_fts` back-fills rows that predate it.

PostgreSQL (`pg_search.py`, created by migration 8). A side table `<table>_search` per kind holds a weighted
`tsvector` (the "word" tokenizer's twin: english stemming, a GIN index) and an array of the text's character
3-grams with a GIN index (the "trigram" tokenizer's twin: substrings, identifiers, CJK), kept current by a
trigger on the base table. Scores follow the same contract: higher is better, positive, comparable within
one query.

Queries never pass user text as query syntax: on SQLite every term is quoted (double quotes doubled) and
the terms are OR-ed, so no input can raise an FTS5 syntax error; on PostgreSQL each term goes through
`phraseto_tsquery` or is compared as a plain string. Terms shorter than 3 characters cannot match a
trigram index; `pattern_search` covers them (2-character words, CJK bigrams) with an escaped LIKE scan
(ILIKE on PostgreSQL). Other dialects get [] from the search helpers and nothing from the DDL helpers.
"""

from __future__ import annotations

import functools
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    text,
    true,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause

from memos_bridge.storage import pg_search
from memos_bridge.storage.models import MemoryRow, PolicyRow, SearchableMixin, SkillRow, TraceRow, WorldModelRow
from memos_bridge.storage.owner import OwnerFilter

FtsKind = Literal["trace", "policy", "world_model", "skill", "memory"]
Tokenizer = Literal["word", "trigram"]

TOKENIZERS: dict[Tokenizer, tuple[str, str]] = {
    # tokenizer name -> (table suffix, FTS5 tokenize option)
    "trigram": ("fts_tri", "trigram"),
    "word": ("fts_word", "porter unicode61 remove_diacritics 2"),
}

MAX_TERMS = 32
"""Upper bound on terms per query: keeps MATCH expressions and LIKE scans bounded."""

TRIGRAM_MIN_CHARS = 3


@dataclass(frozen=True)
class FtsSpec:
    """How one searchable kind is indexed.

    `weights` gives each column's PostgreSQL tsvector weight, one letter per column: A for what names the row
    (a title, a skill's name, a step's one-line summary), B for what summarises it (a trigger, the user's
    request, tags), C for bodies (procedures, replies, guides). `ts_rank` counts an A match 5 times a C
    match. FTS5's bm25 weighs every column alike.
    """

    kind: FtsKind
    model: type[SearchableMixin]
    columns: tuple[str, ...]
    weights: str

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.columns) or set(self.weights) - set("ABCD"):
            raise ValueError(f"{self.kind}: one weight (A-D) per column")

    @property
    def base_table(self) -> Table:
        tbl = getattr(self.model, "__table__")  # noqa: B009 - mixin type does not declare __table__
        assert isinstance(tbl, Table)
        return tbl

    def fts_table(self, tokenizer: Tokenizer) -> str:
        return f"{self.base_table.name}_{TOKENIZERS[tokenizer][0]}"


FTS_SPECS: dict[FtsKind, FtsSpec] = {
    spec.kind: spec
    for spec in (
        FtsSpec("trace", TraceRow, ("user_text", "agent_text", "summary", "reflection", "tags_json"), "BCABB"),
        FtsSpec(
            "policy",
            PolicyRow,
            ("title", "trigger", "procedure", "verification", "boundary", "decision_guidance_json"),
            "ABCCCB",
        ),
        FtsSpec("world_model", WorldModelRow, ("title", "body", "domain_tags_json"), "ACB"),
        FtsSpec("skill", SkillRow, ("name", "invocation_guide"), "AC"),
        FtsSpec("memory", MemoryRow, ("content", "tags_json"), "BA"),
    )
}


# ---------------------------------------------------------------------------------------------------------
# DDL


def _q(identifier: str) -> str:
    """Quote an identifier: some indexed columns are SQL keywords (`policies.trigger`)."""
    return '"' + identifier.replace('"', '""') + '"'


def fts_ddl(spec: FtsSpec, tokenizer: Tokenizer) -> list[str]:
    """CREATE statements (virtual table + 3 triggers) for one kind and tokenizer; all IF NOT EXISTS."""
    base_name = spec.base_table.name
    fts_name = spec.fts_table(tokenizer)
    base, fts = _q(base_name), _q(fts_name)
    cols = ", ".join(_q(c) for c in spec.columns)
    new_vals = ", ".join(f"new.{_q(c)}" for c in spec.columns)
    old_vals = ", ".join(f"old.{_q(c)}" for c in spec.columns)
    tokenize = TOKENIZERS[tokenizer][1]
    insert_new = f"INSERT INTO {fts}(rowid, {cols}) VALUES (new.rid, {new_vals});"
    delete_old = f"INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.rid, {old_vals});"
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5("
        f"{cols}, content='{base_name}', content_rowid='rid', tokenize='{tokenize}')",
        f"CREATE TRIGGER IF NOT EXISTS {_q(fts_name + '_ai')} AFTER INSERT ON {base} BEGIN {insert_new} END",
        f"CREATE TRIGGER IF NOT EXISTS {_q(fts_name + '_ad')} AFTER DELETE ON {base} BEGIN {delete_old} END",
        f"CREATE TRIGGER IF NOT EXISTS {_q(fts_name + '_au')} AFTER UPDATE OF {cols} ON {base} "
        f"BEGIN {delete_old} {insert_new} END",
    ]


def fts_table_names() -> list[str]:
    return [spec.fts_table(tok) for spec in FTS_SPECS.values() for tok in TOKENIZERS]


def create_fts(conn: Connection) -> None:
    """Create every full-text index and trigger that does not exist yet (SQLite FTS5 tables; on PostgreSQL
    the derived columns, their triggers and GIN indexes, back-filled)."""
    if conn.dialect.name == "postgresql":
        pg_search.create(conn, list(FTS_SPECS.values()))
        return
    if conn.dialect.name != "sqlite":
        return
    for spec in FTS_SPECS.values():
        for tokenizer in TOKENIZERS:
            for stmt in fts_ddl(spec, tokenizer):
                conn.exec_driver_sql(stmt)


def rebuild_fts(conn: Connection) -> None:
    """Re-read every base table into its FTS indexes: back-fill after creation, or repair after drift."""
    if conn.dialect.name == "postgresql":
        pg_search.rebuild(conn, list(FTS_SPECS.values()))
        return
    if conn.dialect.name != "sqlite":
        return
    for name in fts_table_names():
        conn.exec_driver_sql(f"INSERT INTO {name}({name}) VALUES ('rebuild')")


def fts_integrity_errors(conn: Connection) -> list[str]:
    """Names of FTS tables whose index disagrees with their base table ([] when all agree; for `doctor`).

    Uses FTS5 'integrity-check' with rank 1, which also compares the index with the external content.
    The check runs in a savepoint so a failure does not abort the caller's transaction. On PostgreSQL each
    row's derived columns are recomputed and compared (`<table>.search` names a kind that disagrees).
    """
    if conn.dialect.name == "postgresql":
        return pg_search.integrity_errors(conn, list(FTS_SPECS.values()))
    if conn.dialect.name != "sqlite":
        return []
    bad: list[str] = []
    for name in fts_table_names():
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(f"INSERT INTO {name}({name}, rank) VALUES ('integrity-check', 1)")
        except DBAPIError:
            bad.append(name)
    return bad


# ---------------------------------------------------------------------------------------------------------
# Query text → safe terms

_STRIPPED_CATEGORIES = {"Cc", "Cs"}  # control characters (incl. NUL) and lone surrogates
_EDGE_PUNCT = {"Ps", "Pe", "Pi", "Pf", "Po"}  # brackets, quotes, commas... (not '_' or '-')


def _clean(text: str) -> str:
    return "".join(" " if unicodedata.category(ch) in _STRIPPED_CATEGORIES else ch for ch in text)


def _strip_edges(term: str) -> str:
    start, end = 0, len(term)
    while start < end and unicodedata.category(term[start]) in _EDGE_PUNCT:
        start += 1
    while end > start and unicodedata.category(term[end - 1]) in _EDGE_PUNCT:
        end -= 1
    return term[start:end]


def _distinct(terms: Iterable[str]) -> list[str]:
    """Non-empty terms, de-duplicated case-insensitively in order, at most MAX_TERMS."""
    seen: set[str] = set()
    out: list[str] = []
    for term in terms:
        folded = term.casefold()
        if term and folded not in seen:
            seen.add(folded)
            out.append(term)
            if len(out) >= MAX_TERMS:
                break
    return out


def query_terms(query_text: str) -> list[str]:
    """Split free text into distinct search terms.

    Splits on whitespace, drops control characters and surrogates (they cannot be bound or would end an
    FTS string early), trims surrounding punctuation ("(foo)," → "foo"), de-duplicates case-insensitively
    and keeps at most MAX_TERMS.
    """
    return _distinct(_strip_edges(raw) for raw in _clean(query_text).split())


def _usable(term: str, tokenizer: Tokenizer) -> bool:
    if tokenizer == "trigram":
        return len(term) >= TRIGRAM_MIN_CHARS
    # unicode61 only indexes letters and digits; a term without any would be an empty phrase.
    return any(ch.isalnum() for ch in term)


def match_expression(terms: Iterable[str], tokenizer: Tokenizer) -> str | None:
    """A MATCH expression OR-ing the quoted terms, or None when no term can match this tokenizer."""
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms if _usable(t, tokenizer)]
    return " OR ".join(quoted) if quoted else None


# ---------------------------------------------------------------------------------------------------------
# Search


def _dialect(session: Session) -> str:
    return session.get_bind().dialect.name


INNER_FACTOR = 5
INNER_MIN = 100
SMALL_TABLE_RECOUNT_S = 2.0
"""`fts_search` ranks the best max(limit·5, 100) index matches before joining the base table; only when
namespace/archive filtering leaves fewer than `limit` of a saturated inner set does it rank every match."""


def fts_search(
    session: Session,
    kind: FtsKind,
    query_text: str,
    *,
    owner: OwnerFilter | None,
    tokenizer: Tokenizer = "word",
    limit: int = 20,
) -> list[tuple[str, float]]:
    """Ranked full-text matches of `query_text`: [(row id, score)], best first.

    The score is −bm25 on SQLite, a BM25-style sum on PostgreSQL (`pg_search`); either way higher is better
    and scores are only comparable within one query and tokenizer. Rows outside the owner's namespace (unless
    shared; `owner=None` = no filter) and archived rows are excluded. Returns [] on other databases.

    Why two steps: joining the base table for *every* match before ranking cost 2–6 ms for common words at
    10k traces (a B-tree lookup per match); ranking inside the index first and joining only the best few
    halves that. A namespace that owns few of the top matches falls back to the exhaustive form.
    """
    dialect = _dialect(session)
    if limit <= 0 or dialect not in ("sqlite", "postgresql"):
        return []
    terms = query_terms(query_text)
    if tokenizer == "word":
        terms = COMMON_TERMS.prune(session, kind, terms)
    if dialect == "postgresql":
        return _pg_search(session, kind, terms, owner, tokenizer, limit)
    expr = match_expression(terms, tokenizer)
    if expr is None:
        return []
    inner = max(limit * INNER_FACTOR, INNER_MIN)
    params: dict[str, Any] = {"expr": expr, "limit": limit, "inner": inner}
    owner_sql = "1 = 1"
    if owner is not None:
        owner_sql, owner_params = owner.sql("b", shareable=True)
        params.update(owner_params)
    top = session.execute(_fts_statement(kind, tokenizer, owner_sql, exhaustive=False), params).all()
    # A table with no more rows than the inner set cannot have lost matches to it (rows counted at most
    # SMALL_TABLE_RECOUNT_S ago: a table that just grew past it is checked again within that time).
    if (
        len(top) < limit
        and COMMON_TERMS.rows(session, kind, SMALL_TABLE_RECOUNT_S) > inner
        and _saturated(session, kind, tokenizer, expr, inner)
    ):
        top = session.execute(_fts_statement(kind, tokenizer, owner_sql, exhaustive=True), params).all()
    return [(str(row_id), -float(score)) for row_id, score in top]


def _pg_search(
    session: Session, kind: FtsKind, terms: list[str], owner: OwnerFilter | None, tokenizer: Tokenizer, limit: int
) -> list[tuple[str, float]]:
    """The PostgreSQL form of `fts_search`: one statement ranks every match (no index-first step is needed,
    the GIN index and the namespace predicate are on the same table)."""
    usable = [t for t in terms if _usable(t, tokenizer)]
    if not usable:
        return []
    spec = FTS_SPECS[kind]
    rows = COMMON_TERMS.rows(session, kind)  # for the idf only: the statement also reads the planner's estimate
    search = pg_search.word_search if tokenizer == "word" else pg_search.trigram_search
    return search(session, spec, usable, owner, rows=rows, limit=limit)


class CommonTerms:
    """Drops very common words from large word-index queries, keeping the rarest ones.

    bm25 must score every row a term matches, so a word found in a twentieth of 100k traces costs more
    than all the rare words of the query together, while its IDF (ln(20) ≈ 3 against ≈ 10 for a rare word)
    barely moves the ranking. On a table of at least `min_rows` rows, a term matching more than `share` of
    them is dropped, unless it is among the `keep` rarest terms of the query. Document frequencies are
    counted with a bounded MATCH (never more than `share` × rows + 1 rows visited) and cached for
    `ttl_s`; row counts too. Small tables are never pruned: exact ranking costs little there.
    """

    def __init__(self, *, min_rows: int = 20_000, share: float = 0.05, keep: int = 2, ttl_s: float = 600.0) -> None:
        self.min_rows, self.share, self.keep, self.ttl_s = min_rows, share, keep, ttl_s
        self._df: dict[tuple[str, str, str], tuple[int, float]] = {}
        self._rows: dict[tuple[str, str], tuple[int, float]] = {}
        self._lock = threading.Lock()

    def _cached(
        self, cache: dict[Any, tuple[int, float]], key: Any, compute: Callable[[], int], max_age_s: float | None = None
    ) -> int:
        """The cached value when it is younger than `max_age_s` (default `ttl_s`), else a fresh one."""
        now = time.monotonic()
        with self._lock:
            hit = cache.get(key)
        if hit is not None and now - hit[1] < (self.ttl_s if max_age_s is None else max_age_s):
            return hit[0]
        value = compute()
        with self._lock:
            if len(cache) > 50_000:
                cache.clear()
            cache[key] = (value, now)
        return value

    def rows(self, session: Session, kind: FtsKind, max_age_s: float | None = None) -> int:
        """Rows of `kind`'s base table, counted at most `max_age_s` (default `ttl_s`) ago."""
        base = _q(FTS_SPECS[kind].base_table.name)
        database = str(session.get_bind().engine.url)  # caches are per database (tests open many)
        return self._cached(
            self._rows,
            (database, base),
            lambda: int(session.execute(text(f"SELECT count(*) FROM {base}")).scalar_one()),
            max_age_s,
        )

    def prune(self, session: Session, kind: FtsKind, terms: list[str]) -> list[str]:
        if len(terms) <= self.keep:
            return terms
        spec = FTS_SPECS[kind]
        fts = _q(spec.fts_table("word"))
        database = str(session.get_bind().engine.url)
        rows = self.rows(session, kind)
        if rows < self.min_rows:
            return terms
        ceiling = int(rows * self.share)
        probe = text(f"SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH :term LIMIT :cap)")
        postgres = _dialect(session) == "postgresql"

        def count(term: str) -> int:
            quoted = match_expression([term], "word")
            if quoted is None:
                return 0
            if postgres:
                return pg_search.term_frequency(session, spec, term, ceiling + 1)
            return int(session.execute(probe, {"term": quoted, "cap": ceiling + 1}).scalar_one())

        frequency = {
            t: self._cached(self._df, (database, fts, t.casefold()), functools.partial(count, t)) for t in terms
        }
        rarest = set(sorted(terms, key=lambda t: frequency[t])[: self.keep])
        return [t for t in terms if t in rarest or frequency[t] <= ceiling]


COMMON_TERMS = CommonTerms()


@functools.cache
def _fts_statement(kind: FtsKind, tokenizer: Tokenizer, owner_sql: str, *, exhaustive: bool) -> TextClause:
    """The (cached) ranking statement for one kind, tokenizer and owner predicate shape."""
    spec = FTS_SPECS[kind]
    base, fts = _q(spec.base_table.name), _q(spec.fts_table(tokenizer))
    if exhaustive:
        source = f"SELECT rowid AS rid, bm25({fts}) AS score FROM {fts} WHERE {fts} MATCH :expr"
    else:
        source = (
            f"SELECT rowid AS rid, bm25({fts}) AS score FROM {fts} WHERE {fts} MATCH :expr ORDER BY score LIMIT :inner"
        )
    return text(
        f"SELECT b.id, s.score FROM ({source}) AS s JOIN {base} AS b ON b.rid = s.rid "
        f"WHERE b.archived_at IS NULL AND {owner_sql} ORDER BY s.score, b.rid DESC LIMIT :limit"
    )


def _saturated(session: Session, kind: FtsKind, tokenizer: Tokenizer, expr: str, inner: int) -> bool:
    """Whether the index holds more than `inner` matches (so the first step may have cut some off)."""
    fts = _q(FTS_SPECS[kind].fts_table(tokenizer))
    stmt = text(f"SELECT count(*) FROM (SELECT rowid FROM {fts} WHERE {fts} MATCH :expr LIMIT :probe)")
    return int(session.execute(stmt, {"expr": expr, "probe": inner + 1}).scalar_one()) > inner


def _visible(owner: OwnerFilter | None, spec: FtsSpec) -> ColumnElement[bool]:
    """Namespace predicate; None means the operator's unfiltered view."""
    return true() if owner is None else owner.clause(spec.model)


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def pattern_search(
    session: Session,
    kind: FtsKind,
    terms: Sequence[str],
    *,
    owner: OwnerFilter | None,
    limit: int = 20,
) -> list[tuple[str, float]]:
    """Substring (LIKE) matches for terms the trigram index cannot serve (2-char words, CJK bigrams).

    Score is the share of distinct terms found in any indexed column (1.0 = all), best first; ties go to
    the newest row. `%` and `_` in terms match literally. A scan, so callers should keep it for short
    terms. SQLite's LIKE ignores the case of ASCII letters only, PostgreSQL's ILIKE of every letter.
    Returns [] on other databases.
    """
    dialect = _dialect(session)
    if limit <= 0 or dialect not in ("sqlite", "postgresql"):
        return []
    wanted = _distinct(_clean(t).strip() for t in terms)
    if not wanted:
        return []
    params: dict[str, Any] = {f"t{i}": _like_pattern(term) for i, term in enumerate(wanted)}
    params["limit"] = limit
    owner_sql = "1 = 1"
    if owner is not None:
        owner_sql, owner_params = owner.sql("b", shareable=True)
        params.update(owner_params)
    total = float(len(wanted))
    like = "ILIKE" if dialect == "postgresql" else "LIKE"
    rows = session.execute(_pattern_statement(kind, len(wanted), owner_sql, like), params)
    return [(str(row_id), int(count) / total) for row_id, count in rows]


@functools.cache
def _pattern_statement(kind: FtsKind, n_terms: int, owner_sql: str, like: str = "LIKE") -> TextClause:
    """Count, per row, how many of the n LIKE patterns any indexed column contains (cached per shape)."""
    spec = FTS_SPECS[kind]
    cols = [f"CAST(b.{_q(name)} AS TEXT)" for name in spec.columns]
    hits = " + ".join(
        "(CASE WHEN " + " OR ".join(f"{col} {like} :t{i} ESCAPE '\\'" for col in cols) + " THEN 1 ELSE 0 END)"
        for i in range(n_terms)
    )
    base = _q(spec.base_table.name)
    return text(
        f"SELECT id, matched FROM (SELECT b.id AS id, b.rid AS rid, {hits} AS matched FROM {base} AS b "
        f"WHERE b.archived_at IS NULL AND {owner_sql}) AS p WHERE matched > 0 "
        "ORDER BY matched DESC, rid DESC LIMIT :limit"
    )
