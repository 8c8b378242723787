"""Embedding back-fill: vectors that could not be computed at capture time are computed later.

When the embedder is unavailable, `turn.end` still stores the steps (they are searchable by text at
once) and queues their vectors in `embedding_retry_queue`. This worker embeds due rows in batches,
writes the vectors, adds them to the in-memory index and deletes the queue rows; a failure backs off
exponentially (1 min doubling to 1 h) and gives up after `max_attempts`, leaving the row marked `failed`
for `doctor` to report. Nothing is dropped silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

import anyio
import numpy as np
from sqlalchemy.orm import Session

from memos_bridge.contract.errors import MemosError
from memos_bridge.core.vector_store import VectorStore
from memos_bridge.embedding.base import Embedder
from memos_bridge.storage import repos
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import EmbeddingRetryRow, TraceRow
from memos_bridge.storage.vectors import to_blob
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

BASE_DELAY_MS = 60_000
MAX_DELAY_MS = 3_600_000


@dataclass
class BackfillResult:
    embedded: int = 0
    failed: int = 0


class EmbeddingBackfill:
    def __init__(self, db: Database, embedder: Embedder, vectors: VectorStore, batch: int = 64) -> None:
        self._db = db
        self._embedder = embedder
        self._vectors = vectors
        self._batch = batch

    async def run_due(self, now: int | None = None) -> BackfillResult:
        """Process every queue row due at `now` (default: the current time), batch by batch."""
        result = BackfillResult()
        moment = now if now is not None else now_ms()
        while True:
            rows = await self._db.read(lambda db: repos.due_embedding_retries(db, moment, self._batch))
            rows = [row for row in rows if row.target_kind == "trace"]
            if not rows:
                return result
            try:
                matrix = await self._embedder.embed([row.source_text for row in rows], role="document")
            except MemosError as exc:
                postpone = partial(self._postpone, ids=[row.id for row in rows], error=exc.message, now=moment)
                await self._db.write(postpone)
                result.failed += len(rows)
                return result  # the embedder is still down: try again later, not in a tight loop
            blobs = {row.id: to_blob(np.asarray(matrix[i])) for i, row in enumerate(rows)}
            updated = await self._db.write(partial(self._apply, rows=rows, blobs=blobs))
            for trace in updated:
                self._vectors.upsert("trace", trace)
            result.embedded += len(rows)

    @staticmethod
    def _apply(db: Session, rows: list[EmbeddingRetryRow], blobs: dict[int, bytes]) -> list[TraceRow]:
        touched: dict[str, TraceRow] = {}
        for row in rows:
            trace = repos.get_trace(db, row.target_id)
            if trace is not None and row.vector_field in ("vec_summary", "vec_action"):
                setattr(trace, row.vector_field, blobs[row.id])
                touched[trace.id] = trace
            queued = db.get(EmbeddingRetryRow, row.id)
            if queued is not None:
                db.delete(queued)
        db.flush()
        return list(touched.values())

    @staticmethod
    def _postpone(db: Session, ids: list[int], error: str, now: int) -> None:
        for row_id in ids:
            row = db.get(EmbeddingRetryRow, row_id)
            if row is None:
                continue
            row.attempts += 1
            row.last_error = error[:500]
            row.updated_at = now
            row.next_attempt_at = now + min(BASE_DELAY_MS * 2 ** (row.attempts - 1), MAX_DELAY_MS)
            if row.attempts >= row.max_attempts:
                row.status = "failed"

    async def run_forever(self, interval_s: float = 60.0) -> None:
        """Background loop started by the server; cheap when the queue is empty."""
        while True:
            try:
                pending = await self._db.read(repos.pending_embedding_retries)
                if pending:
                    outcome = await self.run_due()
                    if outcome.embedded or outcome.failed:
                        log.info("embedding back-fill: %d embedded, %d postponed", outcome.embedded, outcome.failed)
            except Exception:
                log.exception("embedding back-fill failed")
            await anyio.sleep(interval_s)
