"""The service's vector search: one interface, two implementations, chosen once per database.

`VectorStore(db, dim)` is what the rest of the service holds. It picks its backend when it is made (or at
first use, if the database was not open yet) from the database's dialect:

* `MemoryVectors` — SQLite, and PostgreSQL without pgvector: one in-memory index per (kind, vector field)
  (`storage/vectors.py`), loaded from the BLOB columns on first use (streamed once, never a per-query table
  scan) and then kept current as rows are inserted, updated or archived (`upsert` / `remove`), so a query is
  one matrix product with a vectorised namespace mask. Loading happens in a worker thread and only once per
  index, even when several turns race to be first. Another process writing the same database is not seen
  until the indexes are reloaded (`invalidate`);
* `DatabaseVectors` — PostgreSQL with pgvector: the database holds and searches the vectors (HNSW indexes,
  namespace predicate in SQL; `storage/pg_vectors.py`). Triggers derive the `vector` columns from the BLOBs,
  so `upsert`, `remove` and `invalidate` have nothing to do, nothing is loaded, and every service on the
  database finds what any of them wrote.

Both answer the same calls with the same meaning: cosine similarity scores, live rows only, the caller's
namespace plus shared rows. `stored_vectors` reads vectors inside a caller's read transaction (retrieval
fetches them in the same worker-thread hop as the candidates' rows); `vectors_of` is its stand-alone form.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.to_thread
import numpy as np
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from memos_bridge.storage import pg_vectors, repos
from memos_bridge.storage.database import Database
from memos_bridge.storage.owner import OwnerFilter, OwnerKey
from memos_bridge.storage.vectors import VECTOR_FIELDS, VectorIndex, VectorRow, from_blob

log = logging.getLogger(__name__)

FIELDS: dict[str, tuple[str, ...]] = VECTOR_FIELDS
TRACE_FIELDS = FIELDS["trace"]

PAIRED_FIELDS: dict[str, tuple[str, str]] = {"trace": ("vec_summary", "vec_action")}
"""Kinds whose second vector column usually repeats the first: (first, second).

A step embedded once (`embedding.step_vectors = "one"`, the default, for tool and reply steps) stores the
same vector in both columns. `MemoryVectors` keeps such a vector once: the first column's index holds every
row and *marks* the rows whose second vector is the same; the second column's index holds only the rows
whose second vector differs. A search of the second column scores both and merges them, so it returns what
a full second index would, and the process holds about half the step vectors it did (150 MiB at 100k steps).
"""

Hits = list[tuple[str, float]]


@dataclass(frozen=True)
class VectorJob:
    """One index search of a batch: which index, how many results, the similarity floor."""

    kind: str
    field: str
    k: int
    min_score: float | None = None
    #: The namespace this search reads when it differs from the batch's (see `kind_owner` in retrieval).
    owner: OwnerFilter | None = None
    own_owner: bool = False


class VectorBackend(Protocol):
    """What the service asks of a vector search backend (see the module docstring)."""

    dim: int
    in_database: bool

    async def load_all(self) -> None: ...

    def upsert(self, kind: str, row: Any) -> None: ...

    def remove(self, kind: str, row_id: str) -> None: ...

    async def search(
        self, kind: str, field: str, query: Any, k: int, owner: OwnerFilter | None, min_score: float | None = None
    ) -> Hits: ...

    async def search_many(self, jobs: list[VectorJob], query: np.ndarray, owner: OwnerFilter | None) -> list[Hits]: ...

    def vectors_of(self, kind: str, field: str, ids: list[str]) -> dict[str, np.ndarray]: ...

    def stored_vectors(self, db: Session, kind: str, field: str, ids: Sequence[str]) -> dict[str, np.ndarray]: ...

    def invalidate(self) -> None: ...

    def held_rows(self) -> int: ...


def _merged(own: Hits, repeated: Hits, k: int) -> Hits:
    """The best `k` of a second field's own hits and the first field's marked hits (no id is in both)."""
    return sorted(own + repeated, key=lambda hit: -hit[1])[:k]


def _repeats(kind: str, row: Any) -> bool:
    """Whether `row`'s second paired vector is the same as its first (then it is held once, marked)."""
    pair = PAIRED_FIELDS.get(kind)
    if pair is None:
        return False
    first = getattr(row, pair[0])
    return first is not None and first == getattr(row, pair[1])


class MemoryVectors:
    """In-memory indexes loaded from the database (SQLite, or PostgreSQL without pgvector)."""

    in_database = False

    def __init__(self, db: Database, dim: int) -> None:
        self._db = db
        self.dim = dim
        self._indexes: dict[tuple[str, str], VectorIndex] = {}
        self._loaded: set[tuple[str, str]] = set()
        self._lock = anyio.Lock()
        self.invalidate()

    async def ensure_loaded(self, kind: str, field: str) -> VectorIndex:
        first, second = PAIRED_FIELDS.get(kind, (None, None))
        if field == second and first is not None:  # its searches also score the first index's marked rows
            await self.ensure_loaded(kind, first)
        key = (kind, field)
        index = self._indexes[key]
        if key in self._loaded:
            return index
        async with self._lock:
            if key not in self._loaded:
                started = time.perf_counter()
                count = await self._db.read(lambda db: self._load_sync(db, kind, field))
                self._loaded.add(key)
                log.info(
                    "vector index %s.%s loaded: %d rows in %.0f ms",
                    kind,
                    field,
                    count,
                    (time.perf_counter() - started) * 1000,
                )
        return self._indexes[key]

    async def load_all(self) -> None:
        for kind, fields in FIELDS.items():
            for field in fields:
                await self.ensure_loaded(kind, field)

    def _load_sync(self, db: Session, kind: str, field: str) -> int:
        """Rows with another model's vector size are skipped (logged) until re-embedded."""
        first, second = PAIRED_FIELDS.get(kind, (None, None))
        if field == first:
            rows: Iterable[VectorRow] = repos.iter_vectors(db, kind, field, mark_same_as=second)
        elif field == second:
            rows = repos.iter_vectors(db, kind, field, unlike=first)
        else:
            rows = repos.iter_vectors(db, kind, field)
        result = self._indexes[(kind, field)].load(rows)
        if result.skipped:
            log.warning("vector index %s.%s: %d rows skipped (wrong dimension or invalid)", kind, field, result.skipped)
        return result.loaded

    def upsert(self, kind: str, row: Any) -> None:
        """Keep loaded indexes current after an insert or update; unloaded ones read the row later anyway."""
        owner = OwnerKey.of_row(row)
        archived = row.archived_at is not None or getattr(row, "status", None) == "archived"
        first, second = PAIRED_FIELDS.get(kind, (None, None))
        repeated = _repeats(kind, row)
        for field in FIELDS[kind]:
            if (kind, field) not in self._loaded:
                continue
            blob = getattr(row, field)
            if blob is None or archived or (repeated and field == second):
                self._indexes[(kind, field)].remove(row.id)
            else:
                vector = from_blob(blob, self.dim)
                self._indexes[(kind, field)].upsert(row.id, vector, owner, marked=repeated and field == first)

    def remove(self, kind: str, row_id: str) -> None:
        for field in FIELDS[kind]:
            if (kind, field) in self._loaded:
                self._indexes[(kind, field)].remove(row_id)

    async def search(
        self,
        kind: str,
        field: str,
        query: Any,
        k: int,
        owner: OwnerFilter | None,
        min_score: float | None = None,
    ) -> Hits:
        await self.ensure_loaded(kind, field)
        return self._search(kind, field, query, k, owner, min_score)

    def _search(
        self, kind: str, field: str, query: Any, k: int, owner: OwnerFilter | None, min_score: float | None
    ) -> Hits:
        """One index's top `k`; for the second of paired fields, merged with the first index's marked rows."""
        hits = self._indexes[(kind, field)].search(query, k, owner, min_score=min_score)
        first, second = PAIRED_FIELDS.get(kind, (None, None))
        if field != second or first is None:
            return hits
        repeated = self._indexes[(kind, first)].search(query, k, owner, min_score=min_score, marked_only=True)
        return _merged(hits, repeated, k)

    async def search_many(self, jobs: list[VectorJob], query: np.ndarray, owner: OwnerFilter | None) -> list[Hits]:
        """Several searches with one query vector, in ONE worker-thread hop: a matrix product over 100k
        rows takes milliseconds, which must not stall the event loop, and a hop per index costs more than
        the small indexes' searches themselves."""
        for job in jobs:
            await self.ensure_loaded(job.kind, job.field)

        def run() -> list[Hits]:
            # A batch searching both paired fields scores the first index once for both (its marked rows
            # answer for the second field too), instead of a second matrix product over the same rows.
            repeated: dict[tuple[str, int, float | None, OwnerFilter | None], Hits] = {}
            results: list[Hits] = []
            for job in jobs:
                job_owner = job.owner if job.own_owner else owner
                first, second = PAIRED_FIELDS.get(job.kind, (None, None))
                key = (job.kind, job.k, job.min_score, job_owner)
                if job.field == first and any(j.kind == job.kind and j.field == second for j in jobs):
                    index = self._indexes[(job.kind, job.field)]
                    hits, repeated[key] = index.search_with_marked(query, job.k, job_owner, job.min_score)
                elif job.field == second and key in repeated:
                    own = self._indexes[(job.kind, job.field)].search(query, job.k, job_owner, min_score=job.min_score)
                    hits = _merged(own, repeated[key], job.k)
                else:
                    hits = self._search(job.kind, job.field, query, job.k, job_owner, job.min_score)
                results.append(hits)
            return results

        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)

    def held(self, kind: str, field: str) -> int:
        """Rows this process holds in one index (0 before it is loaded)."""
        return len(self._indexes[(kind, field)]) if (kind, field) in self._loaded else 0

    def held_rows(self) -> int:
        """Rows all the loaded indexes hold (what their memory follows)."""
        return sum(self.held(kind, field) for kind, field in list(self._loaded))

    def vectors_of(self, kind: str, field: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Stored vectors of loaded rows (for MMR redundancy), without touching the database."""
        index = self._indexes[(kind, field)]
        found = {i: v for i in ids if (v := index.get(i)) is not None}
        first, second = PAIRED_FIELDS.get(kind, (None, None))
        if field == second and first is not None and len(found) < len(ids):
            full = self._indexes[(kind, first)]
            found.update({i: v for i in ids if i not in found and full.is_marked(i) and (v := full.get(i)) is not None})
        return found

    def stored_vectors(self, db: Session, kind: str, field: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """`vectors_of` from a worker thread (the indexes lock themselves); the session is not needed."""
        return self.vectors_of(kind, field, list(ids))

    def invalidate(self) -> None:
        """Forget the loaded indexes (e.g. after bulk visibility changes); the next search reloads."""
        self._indexes = {(kind, field): VectorIndex(self.dim) for kind, fields in FIELDS.items() for field in fields}
        self._loaded.clear()


class DatabaseVectors:
    """Vectors searched by PostgreSQL with pgvector; the service keeps no copy."""

    in_database = True

    def __init__(self, db: Database, dim: int) -> None:
        self._db = db
        self.dim = dim

    def _query(self, query: Any) -> np.ndarray:
        """The query as a float32 vector of this store's dimension (ValueError otherwise, like the index)."""
        vec = from_blob(query, self.dim) if isinstance(query, bytes) else np.asarray(query, dtype=np.float32)
        if vec.shape != (self.dim,):
            raise ValueError(f"expected a vector of shape ({self.dim},), got {vec.shape}")
        if not np.isfinite(vec).all():
            raise ValueError("vector contains NaN or infinity")
        return vec

    async def load_all(self) -> None:
        """Nothing to load: the database holds the vectors."""

    def upsert(self, kind: str, row: Any) -> None:
        """Nothing to do: a trigger derived the vector column from the BLOB the row was written with."""

    def remove(self, kind: str, row_id: str) -> None:
        """Nothing to do: a deleted or archived row is out of every search at once."""

    def invalidate(self) -> None:
        """Nothing to do: there is no copy to go stale."""

    def held_rows(self) -> int:
        """None: the database holds the vectors."""
        return 0

    async def search(
        self,
        kind: str,
        field: str,
        query: Any,
        k: int,
        owner: OwnerFilter | None,
        min_score: float | None = None,
    ) -> Hits:
        vec = self._query(query)

        def run(db: Session) -> Hits:
            pg_vectors.set_ef_search(db, k)
            return pg_vectors.search(db, kind, field, vec, k, owner, dim=self.dim, min_score=min_score)

        return await self._db.read(run)

    async def search_many(self, jobs: list[VectorJob], query: np.ndarray, owner: OwnerFilter | None) -> list[Hits]:
        """Every search of a batch in one read transaction (one worker-thread hop)."""
        vec = self._query(query)

        def run(db: Session) -> list[Hits]:
            pg_vectors.set_ef_search(db, max((job.k for job in jobs), default=1))
            return [
                pg_vectors.search(
                    db,
                    job.kind,
                    job.field,
                    vec,
                    job.k,
                    job.owner if job.own_owner else owner,
                    dim=self.dim,
                    min_score=job.min_score,
                )
                for job in jobs
            ]

        return await self._db.read(run, abandon_on_cancel=True)

    def vectors_of(self, kind: str, field: str, ids: list[str]) -> dict[str, np.ndarray]:
        """A small keyed read on the calling thread; code on the event loop should prefer `stored_vectors`
        inside a read it makes anyway."""
        return self._db.read_sync(lambda db: self.stored_vectors(db, kind, field, ids))

    def stored_vectors(self, db: Session, kind: str, field: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        return dict(pg_vectors.stored_vectors(db, kind, field, ids, self.dim))


def choose_backend(db: Database, dim: int) -> VectorBackend:
    """pgvector when the database is PostgreSQL and can serve it (`pg_vectors.prepare`), else in memory."""
    if db.engine.dialect.name == "postgresql":
        try:
            with db.engine.begin() as conn:
                in_database = pg_vectors.prepare(conn, dim)
        except SQLAlchemyError:
            log.exception("pgvector set-up failed; vectors are searched in the in-memory index")
            in_database = False
        if in_database:
            log.info("vectors are searched by PostgreSQL (pgvector HNSW, dimension %d)", dim)
            return DatabaseVectors(db, dim)
        log.warning("PostgreSQL without pgvector: vectors are searched in the service's in-memory index")
    return MemoryVectors(db, dim)


class VectorStore:
    """The service's vector search; its backend is chosen once, from the database (see the module docstring)."""

    def __init__(self, db: Database, dim: int) -> None:
        self._db = db
        self.dim = dim
        self._backend: VectorBackend | None = None
        if db.is_open:
            self._backend = choose_backend(db, dim)

    @property
    def backend(self) -> VectorBackend:
        if self._backend is None:  # made before the database was opened: choose now (raises if still closed)
            self._backend = choose_backend(self._db, self.dim)
        return self._backend

    @property
    def in_database(self) -> bool:
        """Whether the database searches the vectors (PostgreSQL with pgvector)."""
        return self.backend.in_database

    async def load_all(self) -> None:
        await self.backend.load_all()

    def upsert(self, kind: str, row: Any) -> None:
        self.backend.upsert(kind, row)

    def remove(self, kind: str, row_id: str) -> None:
        self.backend.remove(kind, row_id)

    async def search(
        self,
        kind: str,
        field: str,
        query: Any,
        k: int,
        owner: OwnerFilter | None,
        min_score: float | None = None,
    ) -> Hits:
        return await self.backend.search(kind, field, query, k, owner, min_score)

    async def search_many(self, jobs: list[VectorJob], query: np.ndarray, owner: OwnerFilter | None) -> list[Hits]:
        return await self.backend.search_many(jobs, query, owner)

    def vectors_of(self, kind: str, field: str, ids: list[str]) -> dict[str, np.ndarray]:
        return self.backend.vectors_of(kind, field, ids)

    def stored_vectors(self, db: Session, kind: str, field: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        return self.backend.stored_vectors(db, kind, field, ids)

    def invalidate(self) -> None:
        if self._backend is not None:
            self._backend.invalidate()

    def held_rows(self) -> int:
        """Vectors this process holds in memory (0 before the backend is chosen, or with pgvector)."""
        return 0 if self._backend is None else self._backend.held_rows()
