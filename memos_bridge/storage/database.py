"""Async facade over synchronous SQLAlchemy sessions.

The service is async (anyio) but SQLAlchemy's sync ORM on `sqlite3` is the simplest robust stack, so each
unit of work is a plain function `fn(session) -> T` run in a worker thread:

* `read(fn)` runs up to `read_threads` at once. With WAL, readers see a consistent snapshot and never
  block the writer or each other;
* `write(fn)` runs one at a time, because SQLite has exactly one writer: queuing writers here is cheaper and
  fairer than letting them spin on `busy_timeout`. Both queues admit work a host is waiting on first
  (`storage.priority`), so a `turn.start` never stands behind other hosts' capture. It commits when
  `fn` returns and rolls back (then re-raises) when it raises. A cancelled `await` still lets the thread
  finish, so a write is never half-done.

`read_sync` / `write_sync` are the same operations for synchronous callers (CLI, tests); they share the
writer lock with the async path. Sessions use `expire_on_commit=False` so returned ORM objects stay usable
after the session is closed. An in-memory `sqlite://` database is one shared connection, so there every
operation, reads included, goes through the writer lock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Self, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
from sqlalchemy import Engine, func, make_url, select
from sqlalchemy.orm import Session, sessionmaker

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.storage.engine import backend_info, create_db_engine, is_memory_sqlite, writer
from memos_bridge.storage.migrations import current_version, migrate
from memos_bridge.storage.models import Base
from memos_bridge.storage.priority import PrioritySlots, yield_to_interactive

T = TypeVar("T")


class Database:
    """The storage entry point: engine, migrations, and serialised writes / concurrent reads."""

    def __init__(self, url: str, *, busy_timeout_ms: int = 5000, read_threads: int = 4) -> None:
        if read_threads < 1:
            raise ValueError("read_threads must be ≥ 1")
        self.url = url
        self._busy_timeout_ms = busy_timeout_ms
        self._shared_connection = is_memory_sqlite(make_url(url))
        self._read_threads = 1 if self._shared_connection else read_threads
        self._engine: Engine | None = None
        self._read_sessions: sessionmaker[Session] | None = None
        self._write_sessions: sessionmaker[Session] | None = None
        # Re-entrant so a read nested in a write on the same thread cannot deadlock the in-memory case.
        self._write_lock = threading.RLock()
        self._slots: tuple[anyio.lowlevel.EventLoopToken, PrioritySlots, PrioritySlots] | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    def open(self) -> list[int]:
        """Create the engine and bring the schema up to date; returns the migrations applied now.

        Synchronous on purpose: it runs once at start-up, before the event loop serves requests.
        """
        if self._engine is not None:
            return []
        engine = create_db_engine(self.url, busy_timeout_ms=self._busy_timeout_ms, pool_size=self._read_threads + 2)
        try:
            applied = migrate(engine)
        except BaseException:
            engine.dispose()
            raise
        self._engine = engine
        self._read_sessions = sessionmaker(bind=engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(bind=writer(engine), expire_on_commit=False)
        return applied

    def close(self) -> None:
        """Release every pooled connection. Safe to call twice; `open()` may be called again after."""
        engine, self._engine = self._engine, None
        self._read_sessions = self._write_sessions = None
        if engine is not None:
            engine.dispose()

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        return self._engine is not None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise MemosError(ErrorCode.NOT_INITIALIZED, "database is not open")
        return self._engine

    # -- sync units of work ------------------------------------------------------------------------------

    def _reader_guard(self) -> contextlib.AbstractContextManager[object]:
        return self._write_lock if self._shared_connection else contextlib.nullcontext()

    @staticmethod
    def _factory(maker: sessionmaker[Session] | None) -> sessionmaker[Session]:
        if maker is None:
            raise MemosError(ErrorCode.NOT_INITIALIZED, "database is not open")
        return maker

    def read_sync(self, fn: Callable[[Session], T]) -> T:
        """Run `fn` in a read transaction (rolled back afterwards: reads never commit)."""
        maker = self._factory(self._read_sessions)
        with self._reader_guard(), maker() as session:
            return fn(session)

    def write_sync(self, fn: Callable[[Session], T]) -> T:
        """Run `fn` in the single write slot: commit on return, roll back and re-raise on error."""
        maker = self._factory(self._write_sessions)
        with self._write_lock, maker() as session:
            try:
                result = fn(session)
                session.commit()
            except BaseException:
                session.rollback()
                raise
            return result

    # -- async units of work -----------------------------------------------------------------------------

    def _current_slots(self) -> tuple[PrioritySlots, PrioritySlots]:
        """Per-event-loop read and write slots (their events must not outlive the loop that made them)."""
        token = anyio.lowlevel.current_token()
        if self._slots is None or self._slots[0] != token:
            self._slots = (token, PrioritySlots(self._read_threads), PrioritySlots(1))
        return self._slots[1], self._slots[2]

    async def read(self, fn: Callable[[Session], T], *, abandon_on_cancel: bool = False) -> T:
        """`read_sync` in a worker thread; at most `read_threads` run concurrently.

        Work a host is waiting on (`storage.priority.interactive`) is admitted before queued background
        reads. With `abandon_on_cancel`, a cancelled caller stops waiting at once and the read finishes
        unseen in its thread (for deadline-bound work that would rather use what is ready than wait); its
        slot is freed at once, as a thread cannot be interrupted.
        """
        read_slots, _ = self._current_slots()
        await yield_to_interactive()
        async with read_slots.slot():
            return await anyio.to_thread.run_sync(self.read_sync, fn, abandon_on_cancel=abandon_on_cancel)

    async def write(self, fn: Callable[[Session], T]) -> T:
        """`write_sync` in a worker thread; writes are serialised, interactive ones admitted first."""
        _, write_slots = self._current_slots()
        await yield_to_interactive()
        async with write_slots.slot():
            return await anyio.to_thread.run_sync(self.write_sync, fn)

    # -- diagnostics -------------------------------------------------------------------------------------

    def waiting(self) -> dict[str, int]:
        """Units of work queued for a read or the write slot in this event loop (health, tests)."""
        if self._slots is None:
            return {"read": 0, "write": 0}
        return {"read": self._slots[1].waiting, "write": self._slots[2].waiting}

    def backend(self) -> dict[str, str | bool | None]:
        """Dialect, server version, full-text and vector support of the database (`engine.backend_info`)."""
        with self._reader_guard():
            return backend_info(self.engine)

    def schema_version(self) -> int:
        with self._reader_guard():
            return current_version(self.engine)

    def counts(self) -> dict[str, int]:
        """Rows per table (for `doctor`), keyed by table name."""

        def count_all(session: Session) -> dict[str, int]:
            return {
                table.name: int(session.execute(select(func.count()).select_from(table)).scalar_one())
                for table in Base.metadata.sorted_tables
            }

        return self.read_sync(count_all)
