"""Search on both backends: the vector store's two implementations (in-memory index; pgvector in PostgreSQL)
give the same answers, and what PostgreSQL adds — triggers that keep the search and vector tables current for
every service on the database, HNSW indexes, BM25 ranking, migration 8's back-fill, the health report — works
on a real server. The PostgreSQL tests run on the session's server (`postgres` in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from memos_bridge.core.vector_store import DatabaseVectors, MemoryVectors, VectorJob, VectorStore
from memos_bridge.storage import pg_vectors
from memos_bridge.storage.database import Database
from memos_bridge.storage.engine import backend_info, create_db_engine
from memos_bridge.storage.fts import FTS_SPECS, fts_integrity_errors, fts_search, rebuild_fts
from memos_bridge.storage.migrations import migrate
from memos_bridge.storage.models import MemoryRow, PolicyRow, TraceRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import to_blob

from .factories import OTHER, OWNER, add_policy, add_trace, seed_episode

pytestmark = pytest.mark.anyio
DIM = 8


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def database(backend_url: str) -> Iterator[Database]:
    db = Database(backend_url, busy_timeout_ms=2000, read_threads=2)
    db.open()
    yield db
    db.close()


def unit(rng: np.random.Generator) -> np.ndarray:
    vec = rng.standard_normal(DIM).astype(np.float32)
    return vec / np.linalg.norm(vec)


def seed(db: Database, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, OwnerFilter, bool]]:
    """Policies in two namespaces (some shared, some archived) and traces with two vectors; returns every
    live policy's (vector, owner, shared)."""
    live: dict[str, tuple[np.ndarray, OwnerFilter, bool]] = {}

    def write(session: Session) -> None:
        seed_episode(session)
        seed_episode(session, OTHER, suffix="other")
        for i in range(40):
            owner = OWNER if i % 3 else OTHER
            vec = unit(rng)
            shared = i % 10 == 0
            archived = i % 7 == 0
            add_policy(
                session,
                f"po_{i}",
                owner,
                vec=to_blob(vec),
                share_scope="public" if shared else "private",
                status="archived" if archived else "active",
            )
            if not archived:
                live[f"po_{i}"] = (vec, owner, shared)
        add_policy(session, "po_novec", OWNER)
        for i in range(6):
            add_trace(session, f"tr_{i}", vec_summary=to_blob(unit(rng)), vec_action=to_blob(unit(rng)))

    db.write_sync(write)
    return live


def expected(
    live: dict[str, tuple[np.ndarray, OwnerFilter, bool]], query: np.ndarray, owner: OwnerFilter | None, k: int
) -> list[str]:
    scored = [
        (float(vec @ query), row_id)
        for row_id, (vec, row_owner, shared) in live.items()
        if owner is None or shared or row_owner == owner
    ]
    return [row_id for _, row_id in sorted(scored, reverse=True)[:k]]


# ---------------------------------------------------------------------------------------------------------
# The vector store, on both backends


async def test_both_vector_backends_find_the_same_neighbours(database: Database) -> None:
    rng = np.random.default_rng(7)
    live = seed(database, rng)
    store = VectorStore(database, DIM)
    postgres = database.engine.dialect.name == "postgresql"
    assert isinstance(store.backend, DatabaseVectors if postgres else MemoryVectors)
    assert store.in_database is postgres
    for _ in range(5):
        query = unit(rng)
        for owner in (OWNER, OTHER, None):
            hits = await store.search("policy", "vec", query, 5, owner)
            assert [row_id for row_id, _ in hits] == expected(live, query, owner, 5)
            want = {row_id: float(live[row_id][0] @ query) for row_id, _ in hits}
            assert all(score == pytest.approx(want[row_id], abs=1e-5) for row_id, score in hits)
    query = unit(rng)
    floor = await store.search("policy", "vec", query, 40, OWNER, min_score=0.3)
    assert floor and all(score >= 0.3 for _, score in floor)
    batch = await store.search_many(
        [VectorJob("trace", "vec_summary", 3), VectorJob("trace", "vec_action", 3), VectorJob("policy", "vec", 2)],
        query,
        OWNER,
    )
    assert [len(hits) for hits in batch] == [3, 3, 2]
    stored = database.read_sync(lambda s: store.stored_vectors(s, "policy", "vec", ["po_1", "po_7", "po_novec"]))
    assert set(stored) == {"po_1"}  # po_7 is archived, po_novec has no vector
    assert np.allclose(stored["po_1"], live["po_1"][0], atol=1e-6)
    assert set(store.vectors_of("policy", "vec", ["po_1", "po_7"])) == {"po_1"}


async def test_zero_and_wrong_sized_queries_behave_alike(database: Database) -> None:
    seed(database, np.random.default_rng(1))
    store = VectorStore(database, DIM)
    assert await store.search("policy", "vec", np.zeros(DIM, dtype=np.float32), 5, OWNER) == []
    with pytest.raises(ValueError):
        await store.search("policy", "vec", np.ones(DIM + 1, dtype=np.float32), 5, OWNER)
    with pytest.raises(ValueError):
        await store.search("policy", "vec", np.full(DIM, np.nan, dtype=np.float32), 5, OWNER)


# ---------------------------------------------------------------------------------------------------------
# PostgreSQL: what the database does itself


@pytest.fixture
def pg_database(postgres_url: str) -> Iterator[Database]:
    db = Database(postgres_url, busy_timeout_ms=2000, read_threads=2)
    db.open()
    yield db
    db.close()


async def test_a_second_service_finds_what_the_first_wrote_at_once(postgres_url: str) -> None:
    """Two services on one database: no index to load or reload, writes are searchable at once, and archiving
    or deleting a row takes it out of every service's search."""
    first, second = Database(postgres_url), Database(postgres_url)
    first.open()
    second.open()
    try:
        writer, reader = VectorStore(first, DIM), VectorStore(second, DIM)
        rng = np.random.default_rng(3)
        vec = unit(rng)

        def write(session: Session) -> None:
            seed_episode(session)
            add_policy(session, "po_new", vec=to_blob(vec))

        first.write_sync(write)
        assert (await reader.search("policy", "vec", vec, 1, OWNER))[0] == ("po_new", pytest.approx(1.0, abs=1e-6))
        moved = unit(rng)
        first.write_sync(
            lambda s: s.execute(update(PolicyRow).where(PolicyRow.id == "po_new").values(vec=to_blob(moved)))
        )
        assert (await reader.search("policy", "vec", moved, 1, OWNER))[0][1] == pytest.approx(1.0, abs=1e-6)
        first.write_sync(lambda s: s.execute(update(PolicyRow).values(status="archived")))
        assert await reader.search("policy", "vec", moved, 1, OWNER) == []
        first.write_sync(lambda s: s.execute(update(PolicyRow).values(status="active", vec=None)))
        assert await reader.search("policy", "vec", moved, 1, OWNER) == []
        first.write_sync(lambda s: s.execute(update(PolicyRow).values(vec=to_blob(moved))))
        first.write_sync(lambda s: s.execute(delete(PolicyRow)))
        assert await reader.search("policy", "vec", moved, 1, OWNER) == []
        writer.invalidate()  # nothing to forget: the database holds the vectors
    finally:
        first.close()
        second.close()


def test_blobs_are_decoded_exactly_and_unusable_vectors_are_left_out(pg_database: Database) -> None:
    values = np.array([1.0, -2.0, 0.1, 1e-42, -3.4e38, 1.17e-38, -0.0, 7.5], dtype=np.float32)

    def decode(session: Session, blob: bytes) -> Any:
        return session.execute(text("SELECT memos_blob_vector(:b)::text"), {"b": blob}).scalar()

    decoded = pg_database.read_sync(lambda s: decode(s, to_blob(values)))
    assert np.array_equal(np.array(decoded.strip("[]").split(","), dtype=np.float32), values)
    nan = values.copy()
    nan[2] = np.nan
    for blob in (nan.tobytes(), np.zeros(DIM, dtype="<f4").tobytes(), b"", b"\x00\x00\x80"):
        assert pg_database.read_sync(lambda s, blob=blob: decode(s, blob)) is None

    def write(session: Session) -> None:
        seed_episode(session)
        add_policy(session, "po_ok", vec=to_blob(np.ones(DIM)))
        add_policy(session, "po_other_model", vec=to_blob(np.ones(DIM * 2)))  # another model's dimension

    pg_database.write_sync(write)
    store = VectorStore(pg_database, DIM)
    found = pg_database.read_sync(
        lambda s: pg_vectors.search(s, "policy", "vec", np.ones(DIM, dtype=np.float32), 5, None, dim=DIM)
    )
    assert [row_id for row_id, _ in found] == ["po_ok"]
    assert set(store.vectors_of("policy", "vec", ["po_ok", "po_other_model"])) == {"po_ok"}


def test_hnsw_indexes_serve_the_search_and_filtered_scans_fall_back_to_exact(pg_database: Database) -> None:
    rng = np.random.default_rng(11)
    mine = [unit(rng) for _ in range(3)]

    def write(session: Session) -> None:
        seed_episode(session)
        seed_episode(session, OTHER, suffix="other")
        for i in range(300):
            add_policy(session, f"po_o{i}", OTHER, vec=to_blob(unit(rng)))
        for i, vec in enumerate(mine):
            add_policy(session, f"po_m{i}", OWNER, vec=to_blob(vec))
        add_policy(session, "po_public", OTHER, vec=to_blob(unit(rng)), share_scope="public")  # visible to all

    pg_database.write_sync(write)
    VectorStore(pg_database, DIM)  # creates the HNSW indexes of an 8-dimensional store
    query = mine[0]

    def plan(session: Session) -> str:
        session.execute(text("SET LOCAL enable_seqscan = off"))
        sql = pg_vectors._search_statement("policy", "vec", DIM, "1 = 1")
        rows = session.execute(text(f"EXPLAIN {sql.text}"), {"q": pg_vectors.vector_literal(query), "k": 5})
        return "\n".join(str(r[0]) for r in rows)

    assert pg_vectors.index_name("policy", "vec", DIM) in pg_database.read_sync(plan)

    def search(session: Session) -> list[tuple[str, float]]:
        for setting in ("enable_seqscan", "enable_sort"):  # the HNSW scan first, even on a small table
            session.execute(text(f"SET LOCAL {setting} = off"))
        session.execute(text("SET LOCAL hnsw.ef_search = 10"))  # far too few candidates for one namespace
        owner_sql, params = OWNER.sql("b", shareable=True)
        ann = pg_vectors._search_statement("policy", "vec", DIM, owner_sql)
        values = {**params, "q": pg_vectors.vector_literal(query), "k": 5}
        explained = "\n".join(str(r[0]) for r in session.execute(text(f"EXPLAIN {ann.text}"), values))
        assert pg_vectors.index_name("policy", "vec", DIM) in explained
        first_pass = session.execute(ann, values).all()
        assert len(first_pass) < 4  # the index scan ran out of candidates before the namespace filter kept 4
        return pg_vectors.search(session, "policy", "vec", query, 5, OWNER, dim=DIM)

    assert {row_id for row_id, _ in pg_database.read_sync(search)} == {"po_m0", "po_m1", "po_m2", "po_public"}
    in_workspace = OwnerFilter(OWNER.agent_kind, OWNER.profile_id, "ws-1")  # owns nothing: shared rows only
    found = pg_database.read_sync(lambda s: pg_vectors.search(s, "policy", "vec", query, 5, in_workspace, dim=DIM))
    assert [row_id for row_id, _ in found] == ["po_public"]


def test_health_reports_full_text_and_pgvector(postgres_url: str, tmp_path: Any) -> None:
    engine = create_db_engine(postgres_url, busy_timeout_ms=2000)
    try:
        info = backend_info(engine)
        assert info["dialect"] == "postgresql" and info["full_text"] is True
        assert str(info["vector_extension"]).startswith("0.")
    finally:
        engine.dispose()
    sqlite = create_db_engine(f"sqlite:///{tmp_path / 'memos.db'}", busy_timeout_ms=2000)
    try:
        migrate(sqlite)
        assert backend_info(sqlite)["vector_extension"] is None and backend_info(sqlite)["full_text"] is True
    finally:
        sqlite.dispose()


def test_without_pgvector_the_in_memory_index_serves(postgres: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server where `CREATE EXTENSION vector` fails: full text still runs in the database, the vectors are
    searched in memory, and the health report says no vector extension is used."""
    monkeypatch.setattr(pg_vectors, "install", lambda conn, dim=pg_vectors.DEFAULT_DIM: False)
    url = postgres.create(migrated=False)
    db = Database(url)
    try:
        db.open()
        assert db.backend()["vector_extension"] is None and db.backend()["full_text"] is True
        assert isinstance(VectorStore(db, DIM).backend, MemoryVectors)
    finally:
        db.close()
        postgres.drop(url)


def test_install_reports_an_extension_the_role_may_not_create(postgres: Any) -> None:
    """The real failure (not a stub): a role that may not create the extension gets False and no change."""
    url = postgres.create(migrated=False)
    admin = create_db_engine(url, busy_timeout_ms=2000)
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql("DROP ROLE IF EXISTS memos_plain")
            conn.exec_driver_sql("CREATE ROLE memos_plain LOGIN")
            conn.exec_driver_sql("GRANT ALL ON SCHEMA public TO memos_plain")
        plain = create_db_engine(url.replace("postgres@", "memos_plain@", 1), busy_timeout_ms=2000)
        try:
            with plain.begin() as conn:
                assert pg_vectors.install(conn) is False
                assert pg_vectors.extension_version(conn) is None
        finally:
            plain.dispose()
    finally:
        admin.dispose()
        postgres.drop(url)
        with create_db_engine(postgres.url("postgres"), busy_timeout_ms=2000).begin() as conn:
            conn.exec_driver_sql("DROP ROLE IF EXISTS memos_plain")


def test_migration_8_backfills_rows_written_before_it(postgres: Any) -> None:
    url = postgres.create(migrated=False)
    engine = create_db_engine(url, busy_timeout_ms=2000)
    try:
        assert migrate(engine, target=7) == [1, 2, 3, 4, 5, 6, 7]
        vec = np.ones(DIM, dtype=np.float32)
        with Session(engine) as session:
            seed_episode(session)
            add_trace(session, "tr_old", summary="legacy parsing of infoTable rows", agent_text="解析每个持仓")
            add_policy(session, "po_old", vec=to_blob(vec))
            session.commit()
        migrate(engine)
        with Session(engine) as session:
            assert fts_search(session, "trace", "parse", owner=OWNER, tokenizer="word")[0][0] == "tr_old"
            assert [h[0] for h in fts_search(session, "trace", "解析每", owner=OWNER, tokenizer="trigram")] == [
                "tr_old"
            ]
            found = pg_vectors.search(session, "policy", "vec", vec, 3, OWNER, dim=DIM)
            assert [row_id for row_id, _ in found] == ["po_old"]
            assert fts_integrity_errors(session.connection()) == []
    finally:
        engine.dispose()
        postgres.drop(url)


def test_integrity_check_finds_drift_and_rebuild_repairs_it(pg_database: Database) -> None:
    def write(session: Session) -> None:
        seed_episode(session)
        add_trace(session, "tr_1", summary="rotate the nginx logs")

    pg_database.write_sync(write)
    pg_database.write_sync(lambda s: s.execute(text("UPDATE traces_search SET search_grams = '{}'")))
    with pg_database.engine.begin() as conn:
        assert fts_integrity_errors(conn) == ["traces_search"]
        conn.exec_driver_sql("DELETE FROM traces_search")
        assert fts_integrity_errors(conn) == ["traces_search"]
        rebuild_fts(conn)
        assert fts_integrity_errors(conn) == []


def test_postgres_ranking_weighs_titles_and_rare_terms(pg_database: Database) -> None:
    """What FTS5's bm25 does with its column-blind weights, plus the tsvector weights: a title match outranks
    a body match, a rare term outweighs a common one, and tsquery syntax in a query is plain text."""

    def write(session: Session) -> None:
        seed_episode(session)
        add_policy(session, "po_title", title="Rotate nginx logs", procedure="run the job")
        add_policy(session, "po_body", title="Weekly chores", procedure="rotate nginx logs with logrotate")
        for i in range(8):
            add_trace(session, f"tr_common{i}", summary=f"deploy build {i}")
        add_trace(session, "tr_rare", summary="kubectl rollout")
        add_trace(session, "tr_ops", agent_text="a & b | !c <-> d:* 'e'")
        session.add(
            MemoryRow(
                id="me_1",
                content="Release notes go in docs/CHANGES.md",
                created_at=1,
                updated_at=1,
                **OWNER.as_columns(),
            )
        )

    pg_database.write_sync(write)

    def search(session: Session, kind: Any, query: str, tokenizer: Any = "word") -> list[str]:
        return [row_id for row_id, _ in fts_search(session, kind, query, owner=OWNER, tokenizer=tokenizer)]

    assert pg_database.read_sync(lambda s: search(s, "policy", "rotating nginx")) == ["po_title", "po_body"]
    assert pg_database.read_sync(lambda s: search(s, "trace", "deploy kubectl"))[0] == "tr_rare"
    assert pg_database.read_sync(lambda s: search(s, "trace", "!c <-> d:*", "trigram")) == ["tr_ops"]
    assert pg_database.read_sync(lambda s: search(s, "trace", "'e' & b")) == ["tr_ops"]
    assert pg_database.read_sync(lambda s: search(s, "memory", "docs/CHANGES.md", "trigram")) == ["me_1"]
    visible = pg_database.read_sync(lambda s: fts_search(s, "trace", "kubectl", owner=OTHER))
    assert visible == []


def test_trace_updates_touch_the_derived_search_data_only_when_its_source_changes(pg_database: Database) -> None:
    """The triggers fire for the indexed columns only: a priority update leaves the search and vector side rows
    (and so their GIN and HNSW index entries) alone; a new summary or vector replaces only its own."""

    def write(session: Session) -> None:
        seed_episode(session)
        add_trace(session, "tr_1", summary="configure the webserver", vec_summary=to_blob(np.ones(DIM)))

    pg_database.write_sync(write)
    read = text(
        "SELECT s.xmin::text, s.search_tsv::text, v.xmin::text, v.vec_summary_pgv::text "
        "FROM traces_search s JOIN traces_pgv v USING (rid)"
    )
    before = pg_database.read_sync(lambda s: s.execute(read).one())
    pg_database.write_sync(lambda s: s.execute(update(TraceRow).values(priority=0.9, value=1.0)))
    assert pg_database.read_sync(lambda s: s.execute(read).one()) == before
    pg_database.write_sync(lambda s: s.execute(update(TraceRow).values(summary="rotate logs")))
    after_text = pg_database.read_sync(lambda s: s.execute(read).one())
    assert after_text[1] != before[1] and after_text[2:] == before[2:]  # new words, the same vector row
    pg_database.write_sync(lambda s: s.execute(update(TraceRow).values(vec_summary=to_blob(-np.ones(DIM)))))
    assert pg_database.read_sync(lambda s: s.execute(read).one())[3].startswith("[-1,")
    pg_database.write_sync(lambda s: s.execute(delete(TraceRow)))
    for side in ("traces_search", "traces_pgv"):  # deleted with their row (a purge leaves nothing behind)
        assert pg_database.read_sync(lambda s, side=side: s.execute(text(f"SELECT count(*) FROM {side}")).scalar()) == 0


def test_word_frequencies_read_off_ts_rank_are_exact(pg_database: Database) -> None:
    """BM25 on PostgreSQL counts a word's occurrences from `ts_rank` (`pg_search._occurrences`) instead of
    unnesting every matching tsvector: the count must be exact, up to the 255 positions a tsvector keeps."""
    from memos_bridge.storage import pg_search

    counts = (1, 2, 3, 7, 40, 255)

    def write(session: Session) -> None:
        seed_episode(session)
        for n in counts:
            add_trace(session, f"tr_{n}", summary="zebra " * n, agent_text="zebra and other words " * (n % 5))

    pg_database.write_sync(write)
    read = pg_search._occurrences("ts_rank('{1,1,1,1}', s.search_tsv, 'zebra'::tsquery, 0)")
    rows = pg_database.read_sync(
        lambda s: s.execute(
            text(
                f"SELECT (SELECT cardinality(u.positions) FROM unnest(s.search_tsv) u WHERE u.lexeme = 'zebra'), "
                f"{read} FROM traces_search s"
            )
        ).all()
    )
    assert len(rows) == len(counts) and all(exact == found for exact, found in rows)
    ranked = [row_id for row_id, _ in pg_database.read_sync(lambda s: fts_search(s, "trace", "zebra", owner=OWNER))]
    assert ranked[0] == "tr_255" and ranked[-1] == "tr_1"  # more occurrences rank higher (saturating)


def test_word_search_ranks_the_best_matches_first_and_falls_back_for_a_small_namespace(pg_database: Database) -> None:
    """The word search reads base rows only for the best `inner` matches; when the namespace owns fewer than
    `limit` of those it ranks every match with the filters, so the answer equals the exhaustive statement's:
    a namespace whose only matches rank below hundreds of another namespace's still finds them."""
    from memos_bridge.storage import pg_search

    def write(session: Session) -> None:
        seed_episode(session)
        seed_episode(session, OTHER, suffix="other")
        for i in range(150):  # the other namespace: the word three times, short rows (high BM25)
            add_trace(
                session,
                f"tr_o{i:03d}",
                episode_id="ep_other",
                session_id="se_other",
                owner=OTHER,
                summary=f"lighthouse lighthouse lighthouse {i}",
            )
        for i in range(3):  # ours: once each, in long rows (low BM25)
            add_trace(session, f"tr_a{i}", summary="the lighthouse " + "keeper notes the weather " * 12)
        add_trace(session, "tr_a_archived", summary="lighthouse", archived_at=5)

    pg_database.write_sync(write)
    spec = FTS_SPECS["trace"]

    def both(owner: OwnerFilter, limit: int) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        def run(session: Session) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
            two_step = pg_search.word_search(session, spec, ["lighthouse"], owner, rows=154, limit=limit)
            owner_sql, owner_params = owner.sql("m", shareable=True)
            exhaustive = pg_search._run(
                session, pg_search._word_statement(spec, 1, owner_sql), ["lighthouse"], owner_params, 154, limit
            )
            return two_step, exhaustive

        return pg_database.read_sync(run)

    ours, exhaustive = both(OWNER, 20)
    assert [row_id for row_id, _ in ours] == ["tr_a2", "tr_a1", "tr_a0"] and ours == exhaustive
    theirs, exhaustive = both(OTHER, 20)
    assert len(theirs) == 20 and theirs == exhaustive and all(row_id.startswith("tr_o") for row_id, _ in theirs)


async def test_a_step_embedded_once_is_held_once_and_still_found_through_its_action_vector(
    database: Database,
) -> None:
    """Steps whose action vector is their summary vector (embedded once) are held once in memory; the action
    search still returns exactly what it would over every row's action vector, through every kind of change."""
    rng = np.random.default_rng(11)
    rows: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}

    def write(session: Session) -> None:
        seed_episode(session)
        for i in range(12):
            summary = unit(rng)
            action = summary if i % 3 else unit(rng)  # two in three steps were embedded once
            add_trace(session, f"tr_{i}", vec_summary=to_blob(summary), vec_action=to_blob(action))
            rows[f"tr_{i}"] = (summary, action)
        add_trace(session, "tr_summary_only", vec_summary=to_blob(unit(rng)))

    database.write_sync(write)
    store = VectorStore(database, DIM)

    async def check() -> None:
        for _ in range(4):
            query = unit(rng)
            want = sorted(((float(a @ query), i) for i, (_, a) in rows.items() if a is not None), reverse=True)[:5]
            hits = await store.search("trace", "vec_action", query, 5, OWNER)
            assert [i for i, _ in hits] == [i for _, i in want]
            assert [s for _, s in hits] == pytest.approx([s for s, _ in want], abs=1e-5)
            (batched,) = await store.search_many([VectorJob("trace", "vec_action", 5)], query, OWNER)
            assert batched == hits
            both = [VectorJob("trace", "vec_summary", 5), VectorJob("trace", "vec_action", 5, min_score=0.1)]
            assert await store.search_many(both, query, OWNER) == [
                await store.search("trace", "vec_summary", query, 5, OWNER),
                await store.search("trace", "vec_action", query, 5, OWNER, min_score=0.1),
            ]
            both[1] = VectorJob("trace", "vec_action", 5)  # the same k and floor: one pass serves both
            assert await store.search_many(both, query, OWNER) == [
                await store.search("trace", "vec_summary", query, 5, OWNER),
                hits,
            ]
        some = sorted(rows)[:4]
        got = store.vectors_of("trace", "vec_action", some) if not store.in_database else {}
        for i in got:
            assert np.allclose(got[i], rows[i][1], atol=1e-6)
        assert store.in_database or set(got) == set(some)

    def held() -> int:
        backend = store.backend
        assert isinstance(backend, MemoryVectors)
        return backend.held("trace", "vec_action")

    await check()
    if not store.in_database:
        assert held() == 4  # only the steps whose action vector differs

    def change(session: Session) -> list[TraceRow]:
        by_id = {row.id: row for row in session.scalars(select(TraceRow))}
        made_apart = by_id["tr_1"]  # embedded once → its action line embedded apart
        made_one = by_id["tr_0"]  # apart → one vector
        archived = by_id["tr_2"]
        apart = unit(rng)
        made_apart.vec_action = to_blob(apart)
        rows["tr_1"] = (rows["tr_1"][0], apart)
        made_one.vec_action = made_one.vec_summary
        rows["tr_0"] = (rows["tr_0"][0], rows["tr_0"][0])
        archived.archived_at = 5
        del rows["tr_2"]
        return [made_apart, made_one, archived]

    for row in database.write_sync(change):
        store.upsert("trace", row)
    await check()
    if not store.in_database:
        assert held() == 4  # tr_1 joined, tr_0 left
        fresh = VectorStore(database, DIM)  # loaded from the database: the same answers as the kept indexes
        query = unit(rng)
        assert await fresh.search("trace", "vec_action", query, 8, OWNER) == await store.search(
            "trace", "vec_action", query, 8, OWNER
        )
        assert isinstance(fresh.backend, MemoryVectors) and fresh.backend.held("trace", "vec_action") == 4
