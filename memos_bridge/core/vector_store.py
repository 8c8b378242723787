"""The in-memory vector indexes of the service, one per (kind, vector field).

Each index is loaded from the database on first use (streamed, not a per-query table scan) and then kept
current as rows are inserted, so a query is one matrix product. Loading happens in a worker thread and
only once, even when several turns race to be first.
"""

from __future__ import annotations

import logging
import time

import anyio
import numpy as np
from sqlalchemy.orm import Session

from memos_bridge.storage import repos
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import TraceRow
from memos_bridge.storage.owner import OwnerFilter, OwnerKey
from memos_bridge.storage.vectors import VectorIndex, from_blob

log = logging.getLogger(__name__)

TRACE_FIELDS = ("vec_summary", "vec_action")


class VectorStore:
    def __init__(self, db: Database, dim: int) -> None:
        self._db = db
        self.dim = dim
        self._indexes: dict[str, VectorIndex] = {name: VectorIndex(dim) for name in TRACE_FIELDS}
        self._loaded: set[str] = set()
        self._lock = anyio.Lock()

    async def ensure_loaded(self, field: str) -> VectorIndex:
        index = self._indexes[field]
        if field in self._loaded:
            return index
        async with self._lock:
            if field not in self._loaded:
                started = time.perf_counter()
                count = await self._db.read(lambda db: self._load_sync(db, field))
                self._loaded.add(field)
                log.info(
                    "vector index %s loaded: %d rows in %.0f ms",
                    field,
                    count,
                    (time.perf_counter() - started) * 1000,
                )
        return index

    def _load_sync(self, db: Session, field: str) -> int:
        """Rows with another model's vector size are skipped (counted in the log) until re-embedded."""
        result = self._indexes[field].load(repos.iter_trace_vectors(db, field))
        if result.skipped:
            log.warning("vector index %s: %d rows skipped (wrong dimension or invalid)", field, result.skipped)
        return result.loaded

    def add_trace(self, row: TraceRow) -> None:
        """Keep loaded indexes current; unloaded ones will read the row from the database anyway."""
        owner = OwnerKey.of_row(row)
        for field in TRACE_FIELDS:
            blob = getattr(row, field)
            if blob is not None and field in self._loaded:
                self._indexes[field].upsert(row.id, from_blob(blob, self.dim), owner)

    def remove_trace(self, trace_id: str) -> None:
        for field in TRACE_FIELDS:
            if field in self._loaded:
                self._indexes[field].remove(trace_id)

    async def search(
        self, field: str, query: np.ndarray, k: int, owner: OwnerFilter | None, min_score: float | None = None
    ) -> list[tuple[str, float]]:
        index = await self.ensure_loaded(field)
        return index.search(query, k, owner, min_score=min_score)

    def invalidate(self) -> None:
        """Forget the loaded indexes (e.g. after bulk visibility changes); the next search reloads."""
        for field in TRACE_FIELDS:
            self._indexes[field] = VectorIndex(self.dim)
        self._loaded.clear()

    def size(self, field: str) -> int:
        return len(self._indexes[field]) if field in self._loaded else -1
