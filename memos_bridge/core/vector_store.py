"""The in-memory vector indexes of the service, one per (kind, vector field).

Each index is loaded from the database on first use (streamed once, never a per-query table scan) and
then kept current as rows are inserted, updated or archived, so a query is one matrix product with a
vectorised namespace mask. Loading happens in a worker thread and only once per index, even when several
turns race to be first.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
from sqlalchemy.orm import Session

from memos_bridge.storage import repos
from memos_bridge.storage.database import Database
from memos_bridge.storage.owner import OwnerFilter, OwnerKey
from memos_bridge.storage.vectors import VectorIndex, from_blob

log = logging.getLogger(__name__)

FIELDS: dict[str, tuple[str, ...]] = {
    "trace": ("vec_summary", "vec_action"),
    "policy": ("vec",),
    "skill": ("vec",),
    "world_model": ("vec",),
    "memory": ("vec",),
}
TRACE_FIELDS = FIELDS["trace"]


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


class VectorStore:
    def __init__(self, db: Database, dim: int) -> None:
        self._db = db
        self.dim = dim
        self._indexes: dict[tuple[str, str], VectorIndex] = {}
        self._loaded: set[tuple[str, str]] = set()
        self._lock = anyio.Lock()
        self.invalidate()

    async def ensure_loaded(self, kind: str, field: str) -> VectorIndex:
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
        result = self._indexes[(kind, field)].load(repos.iter_vectors(db, kind, field))
        if result.skipped:
            log.warning("vector index %s.%s: %d rows skipped (wrong dimension or invalid)", kind, field, result.skipped)
        return result.loaded

    def upsert(self, kind: str, row: Any) -> None:
        """Keep loaded indexes current after an insert or update; unloaded ones read the row later anyway."""
        owner = OwnerKey.of_row(row)
        archived = row.archived_at is not None or getattr(row, "status", None) == "archived"
        for field in FIELDS[kind]:
            if (kind, field) not in self._loaded:
                continue
            blob = getattr(row, field)
            if blob is None or archived:
                self._indexes[(kind, field)].remove(row.id)
            else:
                self._indexes[(kind, field)].upsert(row.id, from_blob(blob, self.dim), owner)

    def remove(self, kind: str, row_id: str) -> None:
        for field in FIELDS[kind]:
            if (kind, field) in self._loaded:
                self._indexes[(kind, field)].remove(row_id)

    async def search(
        self,
        kind: str,
        field: str,
        query: np.ndarray,
        k: int,
        owner: OwnerFilter | None,
        min_score: float | None = None,
    ) -> list[tuple[str, float]]:
        index = await self.ensure_loaded(kind, field)
        return index.search(query, k, owner, min_score=min_score)

    async def search_many(
        self, jobs: list[VectorJob], query: np.ndarray, owner: OwnerFilter | None
    ) -> list[list[tuple[str, float]]]:
        """Several searches with one query vector, in ONE worker-thread hop: a matrix product over 100k
        rows takes milliseconds, which must not stall the event loop, and a hop per index costs more than
        the small indexes' searches themselves."""
        indexes = [await self.ensure_loaded(job.kind, job.field) for job in jobs]

        def run() -> list[list[tuple[str, float]]]:
            return [
                index.search(query, job.k, job.owner if job.own_owner else owner, min_score=job.min_score)
                for index, job in zip(indexes, jobs, strict=True)
            ]

        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)

    def vectors_of(self, kind: str, field: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Stored vectors of loaded rows (for MMR redundancy), without touching the database."""
        index = self._indexes[(kind, field)]
        return {i: v for i in ids if (v := index.get(i)) is not None}

    def invalidate(self) -> None:
        """Forget the loaded indexes (e.g. after bulk visibility changes); the next search reloads."""
        self._indexes = {(kind, field): VectorIndex(self.dim) for kind, fields in FIELDS.items() for field in fields}
        self._loaded.clear()
