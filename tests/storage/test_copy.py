"""Copying a whole memory between databases (`storage/copy.py`, what `memos-bridge migrate` runs).

The source is a memory written by the real service (a session, a turn with a tool call, feedback, a remembered
memory and its strength evidence, the learning chain drained), so every table the service fills is covered.
Each copy is checked row by row, not only by counts; a service started on the copy must find the remembered
memory and the episode's steps. The PostgreSQL tests run on a real server (`tests/postgres.py`: one per module,
a fresh database per test); without `pgserver` they are skipped, except where `MEMOS_BRIDGE_REQUIRE_POSTGRES=1`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert, make_url, select, text
from sqlalchemy.orm import Session

from memos_bridge.client import ServiceClient
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.storage.copy import COPY_STATE, NUL_REPLACEMENT, TableProgress, copied_tables, copy_memory
from memos_bridge.storage.engine import create_db_engine
from memos_bridge.storage.fts import fts_integrity_errors
from memos_bridge.storage.migrations import LATEST_VERSION, migrate
from memos_bridge.storage.models import Base, SchemaMigrationRow

from ..postgres import postgres_server
from .factories import add_trace, seed_episode

SERVICE_ENV = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}
REMEMBERED = "Release notes go in docs/CHANGES.md"


def fill_memory(home: Path) -> dict[str, str]:
    """A memory written through the service: returns the ids a test looks for afterwards."""
    with ServiceClient.spawn(home, env=SERVICE_ENV) as client:
        session = client.call("session.open", {"agent": "tester", "namespace": {"workspaceId": "shop"}})["sessionId"]
        started = client.call(
            "turn.start",
            {"agent": "tester", "sessionId": session, "userText": "total the parcel weights in kilograms", "ts": 1000},
        )
        episode = started["query"]["episodeId"]
        calls = [{"name": "bash", "input": {"cmd": "python sum.py parcels.csv"}, "output": "1234.5"}]
        end = {"agent": "tester", "sessionId": session, "episodeId": episode, "agentText": "1234.5 kg", "ts": 1001}
        client.call("turn.end", {**end, "toolCalls": calls})
        lesson = "The weight column is in pounds, not kilograms: multiply by 0.4536 to get kilograms."
        client.call("feedback.submit", {"episodeId": episode, "polarity": "negative", "rationale": lesson})
        kept = client.call("memory.remember", {"content": REMEMBERED, "sessionId": session})["id"]
        evidence = {"id": kept, "kind": "memory", "evidence": "user_confirmed", "evidenceId": "ev-1"}
        client.call("memory.reinforce", evidence)
        client.call("memory.flush", {}, timeout=300)
    return {"session": session, "episode": episode, "memory": kept}


def check_service_finds(home: Path, ids: dict[str, str], env: dict[str, str] | None = None) -> None:
    """A service started on a copy recalls the remembered memory, lists the episode's steps, and can write."""
    with ServiceClient.spawn(home, env={**SERVICE_ENV, **(env or {})}) as client:
        found = client.call("memory.search", {"query": "where do the release notes go", "sessionId": ids["session"]})
        assert ids["memory"] in {hit["refId"] for hit in found["hits"]}
        steps = client.call("memory.timeline", {"episodeId": ids["episode"], "sessionId": ids["session"]})["traces"]
        assert steps and any("1234.5" in (step.get("agentText") or "") for step in steps)
        # new rows take fresh integer keys (on PostgreSQL only because the copy set the sequences)
        added = client.call("memory.remember", {"content": "Deploys happen on Tuesdays", "sessionId": ids["session"]})
        assert added["id"] != ids["memory"]


def rows(engine: Engine) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """Every copied table's rows keyed by primary key (key order differs between dialects, so no lists)."""
    out: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    with engine.connect() as conn:
        for table in copied_tables():
            key = [c.name for c in table.primary_key.columns]
            out[table.name] = {
                tuple(row[k] for k in key): dict(row) for row in conn.execute(select(table)).mappings().all()
            }
    return out


def sqlite_engine(path: Path) -> Engine:
    return create_db_engine(f"sqlite:///{path}", busy_timeout_ms=2000)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, dict[str, str]]]:
    home = tmp_path_factory.mktemp("source") / "home"
    ids = fill_memory(home)
    engine = sqlite_engine(home / "memos.db")
    yield engine, ids
    engine.dispose()


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a private PostgreSQL server's `postgres` database (one server for the module)."""
    with postgres_server(tmp_path_factory.mktemp("pg")) as url:
        yield url


_databases = itertools.count(1)


@pytest.fixture
def pg_url(postgres: str) -> str:
    """A fresh, empty database on the module's server."""
    import psycopg

    server = make_url(postgres)
    name = f"copy_{next(_databases)}"
    with psycopg.connect(f"host={server.query['host']} user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.set(database=name).render_as_string(hide_password=False)


# ---------------------------------------------------------------------------------------------------------
# SQLite → SQLite


def test_a_copy_holds_every_row_and_the_service_finds_the_memory_in_it(
    source: tuple[Engine, dict[str, str]], tmp_path: Path
) -> None:
    src, ids = source
    home = tmp_path / "copy"
    target = sqlite_engine(home / "memos.db")
    seen: list[TableProgress] = []
    try:
        report = copy_memory(src, target, source_label="laptop", on_progress=seen.append)
        assert report.ok and not report.resumed
        original, copy = rows(src), rows(target)
        assert copy == original
        filled = {name for name, table_rows in original.items() if table_rows}
        assert {"sessions", "episodes", "turns", "traces", "feedback", "memories", "strength_events"} <= filled
        assert report.copied == sum(len(table_rows) for table_rows in original.values())
        assert {step.table for step in seen if step.finished} == {table.name for table in copied_tables()}
        with target.connect() as conn:
            assert fts_integrity_errors(conn) == []  # the copy's full-text indexes agree with its rows
            assert conn.execute(select(COPY_STATE.c.finished_at)).scalar() is not None
    finally:
        target.dispose()
    check_service_finds(home, ids)


def test_a_second_run_writes_nothing_and_verifies(source: tuple[Engine, dict[str, str]], tmp_path: Path) -> None:
    src, _ids = source
    target = sqlite_engine(tmp_path / "copy.db")
    try:
        copy_memory(src, target, source_label="laptop")
        again = copy_memory(src, target, source_label="laptop")
        assert again.ok and again.resumed and again.copied == 0
        assert again.notes == []  # nothing copied, nothing to rebuild
        assert rows(target) == rows(src)
    finally:
        target.dispose()


def test_an_interrupted_copy_continues_without_duplicates(
    source: tuple[Engine, dict[str, str]], tmp_path: Path
) -> None:
    src, _ids = source
    target = sqlite_engine(tmp_path / "copy.db")

    def stop_after_first_batch(step: TableProgress) -> None:
        if step.done == 1 and not step.finished:
            raise KeyboardInterrupt  # what Ctrl-C does between two batches

    try:
        with pytest.raises(KeyboardInterrupt):
            copy_memory(src, target, source_label="laptop", batch_rows=1, on_progress=stop_after_first_batch)
        partial = {name: len(table_rows) for name, table_rows in rows(target).items()}
        assert sum(partial.values()) == 1  # the first batch was committed, nothing after it
        resumed = copy_memory(src, target, source_label="laptop", batch_rows=1)
        assert resumed.ok and resumed.resumed
        total = sum(count.source for count in resumed.tables)
        assert resumed.copied == total - 1
        assert rows(target) == rows(src)
    finally:
        target.dispose()


def test_a_target_holding_another_memory_is_refused_unless_forced(
    source: tuple[Engine, dict[str, str]], tmp_path: Path
) -> None:
    src, _ids = source
    target = sqlite_engine(tmp_path / "other.db")
    try:
        migrate(target)
        with Session(target) as db:
            seed_episode(db)
            db.commit()
        with pytest.raises(MemosError) as refused:
            copy_memory(src, target, source_label="laptop")
        assert refused.value.code is ErrorCode.CONFLICT
        assert "export" in refused.value.message and "--force" in refused.value.message
        assert refused.value.details == {"tables": ["sessions", "episodes"]}
        forced = copy_memory(src, target, source_label="laptop", force=True)
        assert not forced.ok  # the other memory's session and episode are still there: the counts differ
        assert {count.table for count in forced.tables if not count.ok} == {"sessions", "episodes"}
        # a copy made from another source into this target is refused too
        other = sqlite_engine(tmp_path / "second-source.db")
        try:
            migrate(other)
            with pytest.raises(MemosError, match="another memory"):
                copy_memory(other, target, source_label="elsewhere")
        finally:
            other.dispose()
    finally:
        target.dispose()


def test_a_source_from_a_newer_build_is_refused(tmp_path: Path) -> None:
    newer = sqlite_engine(tmp_path / "newer.db")
    target = sqlite_engine(tmp_path / "copy.db")
    try:
        migrate(newer)
        with newer.begin() as conn:
            migrations = Base.metadata.tables[SchemaMigrationRow.__tablename__]
            conn.execute(insert(migrations).values(version=LATEST_VERSION + 1, name="future", applied_at=1))
        with pytest.raises(MemosError) as refused:
            copy_memory(newer, target, source_label="newer")
        assert refused.value.code is ErrorCode.UNSUPPORTED and "newer" in refused.value.message
    finally:
        newer.dispose()
        target.dispose()


# ---------------------------------------------------------------------------------------------------------
# SQLite → PostgreSQL → SQLite


def test_a_memory_goes_to_postgresql_and_back_unchanged(
    source: tuple[Engine, dict[str, str]], pg_url: str, tmp_path: Path
) -> None:
    src, ids = source
    server = create_db_engine(pg_url, busy_timeout_ms=2000)
    back = sqlite_engine(tmp_path / "back" / "memos.db")
    try:
        there = copy_memory(src, server, source_label="laptop")
        assert there.ok and there.nul_replaced == 0
        assert any(note.startswith("sequences set") for note in there.notes)
        assert rows(server) == rows(src)
        again = copy_memory(src, server, source_label="laptop")
        assert again.ok and again.copied == 0

        home_back = copy_memory(server, back, source_label="server")
        assert home_back.ok
        assert rows(back) == rows(src)
    finally:
        server.dispose()
        back.dispose()
    check_service_finds(tmp_path / "pg-home", ids, env={"MEMOS_BRIDGE_STORAGE__URL": pg_url})
    check_service_finds(tmp_path / "back", ids)


def test_nul_characters_become_replacement_characters_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    src = sqlite_engine(tmp_path / "nul.db")
    server = create_db_engine(pg_url, busy_timeout_ms=2000)
    try:
        migrate(src)
        with Session(src) as db:
            seed_episode(db)
            db.flush()
            add_trace(db, "tr_nul", agent_text="binary\x00output", vec_summary=b"\x00\x01\x02\x03")
            db.commit()
        report = copy_memory(src, server, source_label="nul")
        assert report.ok and report.nul_replaced == 1
        with server.connect() as conn:
            found = conn.execute(text("SELECT agent_text, vec_summary FROM traces WHERE id = 'tr_nul'")).one()
        assert found[0] == f"binary{NUL_REPLACEMENT}output"
        assert bytes(found[1]) == b"\x00\x01\x02\x03"  # vectors are bytes, left as they are
    finally:
        src.dispose()
        server.dispose()
