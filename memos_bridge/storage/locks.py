"""Coordination between several services that share one database (PostgreSQL), and what it costs on SQLite.

SQLite has one owner process per data home (`transport/owner.py`) and one writer at a time, so nothing here
changes its behaviour: row locks compile to nothing there, advisory locks are always granted. On PostgreSQL
any number of services may serve one memory, and three tools keep them from stepping on each other:

* **Row locks** (`lock_rows`): `SELECT … FOR UPDATE` on a session or an episode before a read-then-write on
  it, so two services capturing the same turn (a host retrying against another service) take turns, and the
  second one sees what the first one stored instead of storing it again.
* **First writer wins** (`write_first_wins`): where rows are made unique by a key (a turn's `turnKey`, a
  verdict's `evidenceId`, a step's content key), a write that loses a race ends in a unique violation. Its
  transaction is rolled back and the unit of work runs once more; it reads before it inserts, so this time it
  finds the winner's row and returns that one. Nothing is stored twice and the caller gets the same answer.
* **Advisory locks** (`AdvisoryLock`): a named, database-wide lock that jobs of which one run at a time is
  enough (the decay job) try to take; a service that does not get it skips its turn.
* **Keyed transaction locks** (`lock_key`): where no unique key can say "the same" (a remembered statement is
  the same by its scope, type and normalised text, and is merged, not refused), a read-then-insert takes a
  lock named after that key for the rest of its transaction, so the second service waits, then reads the
  first one's row and merges into it.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from memos_bridge.storage.database import Database

log = logging.getLogger(__name__)

T = TypeVar("T")

UNIQUE_VIOLATION = "23505"
"""PostgreSQL's SQLSTATE for a duplicate key."""
LOCK_CONFLICTS = frozenset({"40P01", "40001"})
"""PostgreSQL's SQLSTATEs for a deadlock and a serialization failure: the statement may succeed when run again
in a later transaction."""

WRITE_ATTEMPTS = 3


def is_shared(engine: Engine | Connection) -> bool:
    """Whether several services may use this database at once (PostgreSQL), so they must coordinate."""
    return engine.dialect.name == "postgresql"


def is_unique_violation(exc: BaseException) -> bool:
    """True when `exc` says a row with the same unique key exists already (on PostgreSQL or SQLite)."""
    if not isinstance(exc, IntegrityError):
        return False
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == UNIQUE_VIOLATION:
        return True
    if isinstance(orig, sqlite3.IntegrityError):
        message = str(orig)
        return message.startswith("UNIQUE constraint failed") or "PRIMARY KEY" in message
    return False


def is_lock_conflict(exc: BaseException) -> bool:
    """True when the database cancelled a statement because another transaction held its rows (deadlock), also
    when that error is the cause of the one raised (a stage that wraps the driver's error)."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain is short; the bound guards against a cycle
        if seen is None:
            return False
        if isinstance(seen, DBAPIError) and getattr(seen.orig, "sqlstate", None) in LOCK_CONFLICTS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def lock_rows(db: Session, model: Any, ids: Iterable[str]) -> None:
    """Lock these rows of `model` (keyed by `id`) until the transaction ends; a no-op on SQLite.

    Rows are locked in key order, so two transactions locking overlapping sets cannot deadlock each other."""
    wanted = sorted(set(ids))
    if not wanted or db.get_bind().dialect.name == "sqlite":
        return
    db.execute(select(model.id).where(model.id.in_(wanted)).order_by(model.id).with_for_update())


async def write_first_wins(db: Database, fn: Callable[[Session], T], *, what: str = "write") -> T:
    """`db.write(fn)`, run again when it loses a unique-key race to another service (see the module docstring).

    `fn` must read before it inserts (find the row by its key, create it only when missing) and keep no state
    between runs: the second run starts from a fresh transaction that sees the winner's committed row."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return await db.write(fn)
        except IntegrityError as exc:
            if attempt == WRITE_ATTEMPTS or not is_unique_violation(exc):
                raise
            log.info("%s lost a unique-key race (attempt %d); reading the stored row", what, attempt)
    raise AssertionError("unreachable")


def lock_key(db: Session, name: str) -> None:
    """Hold a database-wide lock named `name` until `db`'s transaction ends, waiting for it when another
    transaction holds it (`pg_advisory_xact_lock`); a no-op on SQLite, whose single writer serialises already.
    Take it before the read of a read-then-write: under READ COMMITTED the read after the wait sees the row the
    other transaction committed."""
    if db.get_bind().dialect.name == "sqlite":
        return
    db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key(name)})


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for a lock name (the same in every service and every Python)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class AdvisoryLock:
    """A database-wide lock by name, taken without waiting (`pg_try_advisory_lock`); always granted on SQLite.

    The lock belongs to one database connection, held from `try_acquire` to `release` outside any
    transaction (so the pass it guards does not keep a transaction open); if the service dies the server
    ends the connection and the lock with it. Synchronous: call it from a worker thread."""

    def __init__(self, engine: Engine, name: str) -> None:
        self._engine = engine
        self.name = name
        self.key = advisory_key(name)
        self._conn: Connection | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    def try_acquire(self) -> bool:
        if not is_shared(self._engine):
            return True
        if self._conn is not None:
            raise RuntimeError(f"advisory lock {self.name!r} is already held")
        conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar())
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        self._conn = conn
        return True

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
        except DBAPIError:
            # Closing the database connection for good releases every lock it held.
            log.warning("advisory lock %r: unlock failed; dropping its connection releases it", self.name)
            conn.invalidate()
        finally:
            conn.close()
