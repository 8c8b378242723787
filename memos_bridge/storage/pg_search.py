"""Full-text search on PostgreSQL: the database-side twin of the SQLite FTS5 indexes (`fts.py`).

`fts.py` is the public face (`fts_search`, `pattern_search`, `create_fts`, …); on PostgreSQL it hands the
work to this module. Each searchable kind's base table has a side table `<table>_search` with one row per
base row (same `rid`, deleted with it), kept current by an `AFTER INSERT OR UPDATE OF <indexed columns>`
trigger and filled for older rows by migration 8. It holds:

* `search_tsv` (tsvector, GIN index): the indexed columns through the `english` configuration (stemmed
  words, stop words dropped), each column weighted by what it is (`FtsSpec.weights`: a title or name A,
  summaries and triggers B, bodies C). Accents are folded first (`memos_fold`: é → e), as SQLite's
  `remove_diacritics 2` does, because the server may not have the `unaccent` extension;
* `search_grams` (text[], GIN index): the distinct lower-cased character 3-grams of the indexed text (grams
  containing white space are left out: a query term never contains any). A term of 3 or more characters is a
  substring of a row only if all of its 3-grams are in the row's array, so `search_grams @> grams(term)` finds
  the candidates through the index and `strpos` on the lower-cased text confirms them. This is what FTS5's
  trigram tokenizer does (identifiers, paths, CJK text) and needs no extension: `pg_trgm` is not bundled with
  every server (pgserver's PostgreSQL 16 has pgvector but not pg_trgm), and it could not serve the one case
  the grams cannot, terms under 3 characters, either; those keep their LIKE scan (`fts.pattern_search`).

Why a side table, as SQLite's FTS5 tables are: PostgreSQL adds an entry to every index of a table for each
UPDATE it cannot do in place, and a row's 3-grams are a thousand GIN keys. Trace rows are updated all the
time (value, priority, strength, access counts); with the search data on the base table each such update
cost about 5 ms of GIN maintenance, here only a change of the indexed text does.

The 3-grams are computed by three global regular-expression passes (`...` from offsets 1, 2 and 3), which is
linear in the text's length; `substr` by position is quadratic on multi-byte text and took 1.5 s for 12 000
characters. Each column contributes at most `MAX_INDEXED_CHARS` characters, which keeps a tsvector far below
PostgreSQL's 1 MB limit (a longer text would otherwise make the INSERT fail).

Ranking follows the SQLite path's contract (`[(id, score)]`, higher is better, positive, only comparable
within one query) and its formula: BM25 (k1 1.2, b 0.75), summed over the query terms. The idf comes from the
terms' document frequencies among all matches (every namespace, archived rows too, as FTS5's bm25 counts its
whole index) and the table's row count; a word's frequency is its number of positions in the tsvector (read
off `ts_rank`, see `_occurrences`), weighted by column class (`WEIGHT_FACTORS`: FTS5 weighs columns alike,
here a title word counts 1.5 times); a 3-gram term's frequency is its occurrences as a substring. The mean
length is taken over the matches, not the whole table.
Terms are never parsed as query syntax: each goes through `phraseto_tsquery` (its words must be adjacent, like
a quoted FTS5 phrase) or is compared as a plain string.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause

from memos_bridge.storage.owner import OwnerFilter

if TYPE_CHECKING:
    from memos_bridge.storage.fts import FtsSpec

TSV_COLUMN = "search_tsv"
GRAMS_COLUMN = "search_grams"
MAX_INDEXED_CHARS = 100_000
TEXT_CONFIG = "english"

BM25_K1 = 1.2
BM25_B = 0.75
"""FTS5's bm25 constants."""

LEN_COLUMN = "search_len"

WEIGHT_FACTORS: dict[str, float] = {"D": 1.0, "C": 1.0, "B": 1.25, "A": 1.5}
"""How much an occurrence counts in a column of each weight class (`FtsSpec.weights`), in the order of
`ts_rank`'s weights array (D, C, B, A). Bodies count as in FTS5 (1), a word in a title half as much again.
Kept mild on purpose: titles are short, so a strong factor would let any title word outrank a body about
the query (on a test corpus, A = 2 left 60 % of SQLite's top ten in place, A = 1.5 69 %, no weights 74 %)."""

ZETA_2 = 1.64493406685
"""π²/6, the limit `ts_rank` divides by (see `_occurrences`)."""


def _q(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _fold_table() -> tuple[str, str]:
    """Latin letters with diacritics (U+00C0–U+024F) and their base letters, for `translate`."""
    source: list[str] = []
    target: list[str] = []
    for code in range(0xC0, 0x250):
        char = chr(code)
        base = "".join(c for c in unicodedata.normalize("NFD", char) if not unicodedata.combining(c))
        if len(base) == 1 and base != char:
            source.append(char)
            target.append(base)
    return "".join(source), "".join(target)


def _functions() -> list[str]:
    fold_from, fold_to = _fold_table()
    return [
        # IMMUTABLE: the index and the triggers rely on the same text always giving the same result.
        "CREATE OR REPLACE FUNCTION memos_fold(t text) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE "
        f"AS $fn$ SELECT translate(t, {_literal(fold_from)}, {_literal(fold_to)}) $fn$",
        "CREATE OR REPLACE FUNCTION memos_tsv_length(v tsvector) RETURNS integer LANGUAGE sql IMMUTABLE STRICT "
        "PARALLEL SAFE AS $fn$ SELECT coalesce(sum(cardinality(positions)), 0)::integer FROM unnest(v) $fn$",
        "CREATE OR REPLACE FUNCTION memos_grams(t text) RETURNS text[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE "
        "AS $fn$ SELECT coalesce(array_agg(DISTINCT m[1]), '{}') "
        "FROM (SELECT lower(t) AS s) AS x, generate_series(1, 3) AS k, regexp_matches(substr(x.s, k), '...', 'g') AS m "
        "WHERE m[1] !~ '\\s' $fn$",
    ]


# ---------------------------------------------------------------------------------------------------------
# Expressions over one row (`row` is NEW in a trigger, a table alias elsewhere)


def _column_text(row: str, column: str) -> str:
    return f"left({row}.{_q(column)}::text, {MAX_INDEXED_CHARS})"


def tsv_expression(spec: FtsSpec, row: str) -> str:
    """The weighted tsvector of a row: one `setweight(to_tsvector(…))` per weight class present."""
    parts: list[str] = []
    for weight in "ABCD":
        columns = [c for c, w in zip(spec.columns, spec.weights, strict=True) if w == weight]
        if columns:
            joined = ", ".join(_column_text(row, c) for c in columns)
            parts.append(
                f"setweight(to_tsvector('{TEXT_CONFIG}', memos_fold(concat_ws(E'\\n', {joined}))), '{weight}')"
            )
    return " || ".join(parts)


def document_expression(spec: FtsSpec, row: str) -> str:
    """The lower-cased indexed text of a row (what the 3-grams are made of and substrings are checked in)."""
    return f"lower(concat_ws(E'\\n', {', '.join(_column_text(row, c) for c in spec.columns)}))"


def grams_expression(spec: FtsSpec, row: str) -> str:
    return f"memos_grams({document_expression(spec, row)})"


# ---------------------------------------------------------------------------------------------------------
# DDL


def side_table(spec: FtsSpec) -> str:
    """The table holding a kind's search data, one row per base row (same `rid`)."""
    return f"{spec.base_table.name}_search"


def _names(spec: FtsSpec) -> dict[str, str]:
    table = spec.base_table.name
    side = side_table(spec)
    return {
        "table": table,
        "side": side,
        "function": f"memos_search_text_{table}",
        "trigger": f"{table}_search_text",
        "tsv_index": f"ix_{side}_{TSV_COLUMN}",
        "grams_index": f"ix_{side}_{GRAMS_COLUMN}",
    }


def _exists(conn: Connection, table: str) -> bool:
    return bool(conn.execute(text("SELECT to_regclass(:name) IS NOT NULL"), {"name": _q(table)}).scalar())


def create(conn: Connection, specs: Sequence[FtsSpec]) -> None:
    """Create the functions, side tables, triggers and GIN indexes that do not exist yet, and fill a new side
    table from the rows written before (idempotent: a second run changes nothing but the function bodies)."""
    for stmt in _functions():
        conn.exec_driver_sql(stmt)
    for spec in specs:
        names = _names(spec)
        table, side = _q(names["table"]), _q(names["side"])
        new = not _exists(conn, names["side"])
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {side} (rid integer PRIMARY KEY REFERENCES {table} (rid) ON DELETE CASCADE, "
            f"{TSV_COLUMN} tsvector NOT NULL, {GRAMS_COLUMN} text[] NOT NULL, {LEN_COLUMN} integer NOT NULL)"
        )
        if new:
            _fill(conn, spec)
        # compared as text: json has no equality operator
        unchanged = " AND ".join(f"NEW.{_q(c)}::text IS NOT DISTINCT FROM OLD.{_q(c)}::text" for c in spec.columns)
        conn.exec_driver_sql(
            f"CREATE OR REPLACE FUNCTION {names['function']}() RETURNS trigger LANGUAGE plpgsql AS $fn$ "
            "DECLARE words tsvector; BEGIN "
            f"IF TG_OP = 'UPDATE' AND {unchanged} THEN RETURN NULL; END IF; "
            f"words := {tsv_expression(spec, 'NEW')}; "
            f"INSERT INTO {side} (rid, {TSV_COLUMN}, {GRAMS_COLUMN}, {LEN_COLUMN}) "
            f"VALUES (NEW.rid, words, {grams_expression(spec, 'NEW')}, memos_tsv_length(words)) "
            f"ON CONFLICT (rid) DO UPDATE SET {_UPSERT}; RETURN NULL; END $fn$"
        )
        columns = ", ".join(_q(c) for c in spec.columns)
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {_q(names['trigger'])} ON {table}")
        conn.exec_driver_sql(
            f"CREATE TRIGGER {_q(names['trigger'])} AFTER INSERT OR UPDATE OF {columns} ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {names['function']}()"
        )
        conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {_q(names['tsv_index'])} ON {side} USING gin ({TSV_COLUMN})")
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS {_q(names['grams_index'])} ON {side} USING gin ({GRAMS_COLUMN})"
        )


_UPSERT = ", ".join(f"{c} = EXCLUDED.{c}" for c in (TSV_COLUMN, GRAMS_COLUMN, LEN_COLUMN))


def _fill(conn: Connection, spec: FtsSpec) -> None:
    """Recompute the search row of every base row (inserting missing ones)."""
    base = _q(spec.base_table.name)
    conn.exec_driver_sql(
        f"INSERT INTO {_q(side_table(spec))} (rid, {TSV_COLUMN}, {GRAMS_COLUMN}, {LEN_COLUMN}) "
        f"SELECT b.rid, x.words, {grams_expression(spec, 'b')}, memos_tsv_length(x.words) FROM {base} AS b, "
        f"LATERAL (SELECT {tsv_expression(spec, 'b')} AS words) AS x ON CONFLICT (rid) DO UPDATE SET {_UPSERT}"
    )


def rebuild(conn: Connection, specs: Sequence[FtsSpec]) -> None:
    for spec in specs:
        if _exists(conn, side_table(spec)):
            _fill(conn, spec)


def integrity_errors(conn: Connection, specs: Sequence[FtsSpec]) -> list[str]:
    """`<side table>` for each kind whose search rows are missing or disagree with their base row's text."""
    bad: list[str] = []
    for spec in specs:
        side = side_table(spec)
        if not _exists(conn, side):
            bad.append(side)
            continue
        stale = conn.exec_driver_sql(
            f"SELECT count(*) FROM {_q(spec.base_table.name)} AS b LEFT JOIN {_q(side)} AS s ON s.rid = b.rid "
            f"WHERE s.rid IS NULL OR s.{TSV_COLUMN} IS DISTINCT FROM ({tsv_expression(spec, 'b')}) "
            f"OR s.{GRAMS_COLUMN} IS DISTINCT FROM {grams_expression(spec, 'b')} "
            f"OR s.{LEN_COLUMN} IS DISTINCT FROM memos_tsv_length(s.{TSV_COLUMN})"
        ).scalar_one()
        if int(stale):
            bad.append(side)
    return bad


def full_text_ready(conn: Connection, specs: Sequence[FtsSpec]) -> bool:
    """Whether every kind has its tsvector GIN index (what `core.health` reports as `fullText`)."""
    wanted = [_names(spec)["tsv_index"] for spec in specs]
    found = conn.execute(
        text("SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ANY(:names)"),
        {"names": wanted},
    ).scalar_one()
    return int(found) == len(wanted)


# ---------------------------------------------------------------------------------------------------------
# Search


def _idf(df: str, table: str) -> str:
    """BM25's idf (always positive). The row count is the larger of the caller's (cached) count and the
    planner's estimate (kept current by autovacuum), and never below the document frequency."""
    estimate = f"(SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass({_literal(_q(table))}))"
    rows = f"GREATEST(:n_rows, {estimate}, {df})"
    # float8 throughout: a bare 0.5 is `numeric` in PostgreSQL, whose arithmetic is several times slower
    return f"ln(1 + ({rows} - {df} + 0.5::float8) / ({df} + 0.5::float8))"


def _carried(alias: str) -> str:
    """The columns the ranking steps carry: keys, and what the archive and namespace filters read."""
    names = ("rid", "id", "archived_at", "owner_agent_kind", "owner_profile_id", "owner_workspace_id", "share_scope")
    return ", ".join(f"{alias}.{name}" for name in names)


def _owner(owner: OwnerFilter | None, alias: str) -> tuple[str, dict[str, Any]]:
    return ("1 = 1", {}) if owner is None else owner.sql(alias, shareable=True)


def _values(terms: Sequence[str], owner_params: dict[str, Any], rows: int, limit: int) -> dict[str, Any]:
    """The bound parameters every search statement takes: the terms, the owner predicate's, counts."""
    return {**owner_params, **{f"t{i}": term for i, term in enumerate(terms)}, "n_rows": rows, "limit": limit}


def _run(
    session: Session, stmt: TextClause, terms: Sequence[str], owner_params: dict[str, Any], rows: int, limit: int
) -> list[tuple[str, float]]:
    values = _values(terms, owner_params, rows, limit)
    return [(str(row_id), float(score)) for row_id, score in session.execute(stmt, values)]


#: The word search ranks this many of the best matches (at least) before it reads their base rows.
WORD_INNER_FACTOR = 5
WORD_INNER_MIN = 100


def word_search(
    session: Session, spec: FtsSpec, terms: Sequence[str], owner: OwnerFilter | None, *, rows: int, limit: int
) -> list[tuple[str, float]]:
    """Rows whose tsvector matches any term (a phrase of the term's words), ranked by Σ idf × ts_rank;
    `rows` is the table's row count (for the idf).

    Ranked in two steps, as the SQLite path is: every match is scored from the side table alone, and only the
    best `inner` are joined to their base rows for the archive and namespace filters. Reading the base row
    of every match cost most of a common word's search (170 ms p50 at 100k traces). When fewer than `limit`
    of those are visible and there were more matches (the namespace owns few of the best ones), every match
    is ranked with the filters applied, which returns what one exhaustive statement would.
    """
    inner = max(limit * WORD_INNER_FACTOR, WORD_INNER_MIN)
    owner_sql, owner_params = _owner(owner, "b")
    values = {**_values(terms, owner_params, rows, limit), "inner": inner}
    found = session.execute(_ranked_word_statement(spec, len(terms), owner_sql), values).all()
    if len(found) >= limit or (found and int(found[0].matches) <= inner):
        return [(str(row.id), float(row.score)) for row in found]
    owner_sql, owner_params = _owner(owner, "m")
    return _run(session, _word_statement(spec, len(terms), owner_sql), terms, owner_params, rows, limit)


def _phrase(i: int) -> str:
    return f"phraseto_tsquery('{TEXT_CONFIG}', memos_fold(CAST(:t{i} AS text)))"


def _bm25(tf: str, length: str, idf: str) -> str:
    """One term's BM25 contribution, in float8 (`numeric` arithmetic per matching row cost as much as the
    whole index scan)."""
    k1, b = f"{BM25_K1}::float8", f"{BM25_B}::float8"
    saturation = f"{k1} * (1 - {b} + {b} * {length} / GREATEST(d.avgdl::float8, 1))"
    return f"{idf} * {tf} * ({k1} + 1) / ({tf} + {saturation})"


def _occurrences(flat: str) -> str:
    """How often a one-word term occurs in a row, from `ts_rank` with every weight 1 and no normalisation.

    For a one-word query `ts_rank` is H(n) / (π²/6), H(n) = Σ_{j≤n} 1/j², over the word's n positions: a
    strictly increasing function of n. π²/6 − H(n) is 1/n − 1/(2n²) + …, so 1/((π²/6)(1 − rank)) − ½ is n
    plus less than a tenth, and rounds to n exactly (up to the 255 positions a tsvector keeps; checked by a
    test on the server). One C call per row instead of unnesting the tsvector, which cost 20 times more.
    A phrase of several words is ranked differently by `ts_rank` (by proximity, up to 1): the bounds keep the
    estimate between 1 and 255 and the division defined.
    """
    return f"GREATEST(1, LEAST(255, round(1 / ({ZETA_2}::float8 * GREATEST(1 - {flat}, 0.0001::float8)) - 0.5)))"


def _word_parts(spec: FtsSpec, n_terms: int) -> tuple[str, str, str, str, str]:
    """The pieces both word statements share: the terms' queries, any-term match, each term's presence and
    ranks per matching row (m), the document frequencies (d) and the BM25 score.

    A term's frequency is its occurrence count (`_occurrences`) scaled by the ratio of the weighted to the
    plain rank, which is 1 for a body word and up to `WEIGHT_FACTORS['A']` for a word in the title (the first
    occurrences weigh most in `ts_rank`, and the title's come first). The ranks are computed only for the
    terms a row matches (most rows match one or two of the terms)."""
    each = range(n_terms)
    queries = ", ".join(f"{_phrase(i)} AS q{i}" for i in each)
    any_term = " || ".join(f"q.q{i}" for i in each)
    top = max(WEIGHT_FACTORS.values())  # ts_rank takes weights in [0, 1]: scaled down here, back up in `tf`
    weights = "'{" + ",".join(str(v / top) for v in WEIGHT_FACTORS.values()) + "}'"
    tsv = f"s.{TSV_COLUMN}"
    per_term = ", ".join(
        f"({tsv} @@ q.q{i}) AS h{i}, "
        f"CASE WHEN {tsv} @@ q.q{i} THEN ts_rank('{{1,1,1,1}}', {tsv}, q.q{i}, 0) ELSE 0 END AS r{i}, "
        f"CASE WHEN {tsv} @@ q.q{i} THEN ts_rank({weights}, {tsv}, q.q{i}, 0) ELSE 0 END AS rw{i}"
        for i in each
    )
    table = spec.base_table.name
    # each term's document frequency, and its idf computed once here rather than for every matching row
    frequencies = ", ".join(
        f"count(*) FILTER (WHERE h{i}) AS df{i}, {_idf(f'count(*) FILTER (WHERE h{i})', table)} AS idf{i}" for i in each
    )
    tf = [f"({_occurrences(f'm.r{i}')} * {top} * m.rw{i} / m.r{i})" for i in each]
    score = " + ".join(
        f"(CASE WHEN m.h{i} AND m.r{i} > 0 THEN {_bm25(tf[i], 'm.len', f'd.idf{i}')} ELSE 0 END)" for i in each
    )
    return queries, any_term, per_term, frequencies, score


@functools.cache
def _ranked_word_statement(spec: FtsSpec, n_terms: int, owner_sql: str) -> TextClause:
    """Every match scored from the side table (m, d), the best `:inner` kept (top), then only those joined
    to their base rows and filtered; each row also carries the number of matches (cached per kind, term
    count and owner predicate shape)."""
    base, side = _q(spec.base_table.name), _q(side_table(spec))
    queries, any_term, per_term, frequencies, score = _word_parts(spec, n_terms)
    return text(
        f"WITH m AS MATERIALIZED (SELECT s.rid, s.{LEN_COLUMN} AS len, {per_term} FROM {side} AS s, "
        f"(SELECT {queries}) AS q WHERE s.{TSV_COLUMN} @@ ({any_term})), "
        f"d AS MATERIALIZED (SELECT {frequencies}, avg(len) AS avgdl, count(*) AS matches FROM m), "
        f"top AS MATERIALIZED (SELECT m.rid, {score} AS score, d.matches FROM m, d "
        "ORDER BY score DESC, m.rid DESC LIMIT :inner) "
        f"SELECT b.id, top.score, top.matches FROM top JOIN {base} AS b ON b.rid = top.rid "
        f"WHERE b.archived_at IS NULL AND {owner_sql} ORDER BY top.score DESC, top.rid DESC LIMIT :limit"
    )


@functools.cache
def _word_statement(spec: FtsSpec, n_terms: int, owner_sql: str) -> TextClause:
    """Every match joined to its base row (m), the frequencies (d), then the visible rows by BM25: the
    exhaustive form, for when the best matches are mostly outside the namespace (cached like the above)."""
    base, side = _q(spec.base_table.name), _q(side_table(spec))
    queries, any_term, per_term, frequencies, score = _word_parts(spec, n_terms)
    return text(
        f"WITH m AS MATERIALIZED (SELECT {_carried('b')}, s.{LEN_COLUMN} AS len, {per_term} FROM {side} AS s "
        f"JOIN {base} AS b ON b.rid = s.rid, (SELECT {queries}) AS q WHERE s.{TSV_COLUMN} @@ ({any_term})), "
        f"d AS MATERIALIZED (SELECT {frequencies}, avg(len) AS avgdl FROM m) "
        f"SELECT m.id, {score} AS score FROM m, d WHERE m.archived_at IS NULL AND {owner_sql} "
        "ORDER BY score DESC, m.rid DESC LIMIT :limit"
    )


def trigram_search(
    session: Session, spec: FtsSpec, terms: Sequence[str], owner: OwnerFilter | None, *, rows: int, limit: int
) -> list[tuple[str, float]]:
    """Rows holding any term (≥ 3 characters) as a case-insensitive substring, ranked by BM25 over the
    substrings' occurrences."""
    owner_sql, owner_params = _owner(owner, "h")
    return _run(session, _trigram_statement(spec, len(terms), owner_sql), terms, owner_params, rows, limit)


@functools.cache
def _trigram_statement(spec: FtsSpec, n_terms: int, owner_sql: str) -> TextClause:
    """Candidates from the 3-gram index (m), each term's occurrences in them (h, 0 = a false candidate), the
    terms' document frequencies and the mean length (d), then the visible rows by BM25."""
    base, side = _q(spec.base_table.name), _q(side_table(spec))
    each = range(n_terms)
    term = [f"lower(CAST(:t{i} AS text))" for i in each]
    # A term whose grams came out empty would be "contained" in every row: it is left to the substring test.
    contains = " OR ".join(
        f"(cardinality(memos_grams({term[i]})) > 0 AND s.{GRAMS_COLUMN} @> memos_grams({term[i]}))" for i in each
    )
    occurrences = ", ".join(
        f"(length(m.doc) - length(replace(m.doc, {term[i]}, ''))) / GREATEST(length({term[i]}), 1)::float8 AS tf{i}"
        for i in each
    )
    frequencies = ", ".join(f"count(*) FILTER (WHERE tf{i} > 0) AS df{i}" for i in each)
    any_match = " OR ".join(f"tf{i} > 0" for i in each)
    any_row_match = " OR ".join(f"h.tf{i} > 0" for i in each)
    table = spec.base_table.name
    score = " + ".join(
        f"(CASE WHEN h.tf{i} > 0 THEN {_bm25(f'h.tf{i}', 'length(h.doc)', _idf(f'd.df{i}', table))} ELSE 0 END)"
        for i in each
    )
    return text(
        f"WITH m AS MATERIALIZED (SELECT {_carried('b')}, {document_expression(spec, 'b')} AS doc FROM {side} AS s "
        f"JOIN {base} AS b ON b.rid = s.rid WHERE {contains}), h AS MATERIALIZED (SELECT m.*, {occurrences} FROM m), "
        f"d AS MATERIALIZED (SELECT {frequencies}, avg(length(doc)) AS avgdl FROM h WHERE {any_match}) "
        f"SELECT h.id, {score} AS score FROM h, d WHERE ({any_row_match}) "
        f"AND h.archived_at IS NULL AND {owner_sql} ORDER BY score DESC, h.rid DESC LIMIT :limit"
    )


def term_frequency(session: Session, spec: FtsSpec, term: str, cap: int) -> int:
    """Rows whose tsvector matches `term`, counting no further than `cap` (for `fts.CommonTerms`)."""
    side = _q(side_table(spec))
    stmt = text(
        f"SELECT count(*) FROM (SELECT 1 FROM {side} AS s WHERE s.{TSV_COLUMN} @@ {_phrase(0)} LIMIT :cap) AS f"
    )
    return int(session.execute(stmt, {"t0": term, "cap": cap}).scalar_one())
