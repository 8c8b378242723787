"""Where the facade reports each LLM call: the `api_logs` table in production, memory in tests.

The facade calls `sink.record(entry)` synchronously after every attempt, so a sink must never block
the event loop: the LLM calls that matter most (intent, relevance filter) sit on a turn's deadline, and a
log line must not queue behind a large capture write for SQLite's single writer slot. The database sink
therefore hands entries to one worker thread that writes them in batches through the same writer lock
as every other write (`Database.write_sync`, the synchronous twin of `Database.write`). The queue is
bounded; when it overflows, entries are dropped and counted rather than slowing anything down.
Entries never contain the API key or the prompt text (only ids, sizes and the parsed result).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from sqlalchemy.orm import Session

from memos_bridge.storage.database import Database
from memos_bridge.storage.models import ApiLogRow
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

QUEUE_LIMIT: Final = 10_000
BATCH_LIMIT: Final = 200
#: The worker thread exits after this long without entries and is restarted by the next one.
IDLE_EXIT_S: Final = 5.0


@dataclass(frozen=True)
class ApiLogEntry:
    """One LLM call attempt, in the shape of an `api_logs` row."""

    tool_name: str
    input: dict[str, Any]
    output: dict[str, Any]
    duration_ms: int
    success: bool
    called_at: int = field(default_factory=now_ms)


class ApiLogSink(Protocol):
    def record(self, entry: ApiLogEntry) -> None:
        """Accept one entry without blocking; must never raise."""
        ...

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Block (in a worker thread) until accepted entries are stored; True when nothing is left."""
        ...


class NullApiLogSink:
    """Discards entries (no database: the CLI's `llm.test`, unit tests that do not inspect logs)."""

    def record(self, entry: ApiLogEntry) -> None:
        return None

    def drain(self, timeout_s: float = 5.0) -> bool:
        return True


class MemoryApiLogSink:
    """Keeps entries in a list, for tests."""

    def __init__(self) -> None:
        self.entries: list[ApiLogEntry] = []

    def record(self, entry: ApiLogEntry) -> None:
        self.entries.append(entry)

    def drain(self, timeout_s: float = 5.0) -> bool:
        return True


class DatabaseApiLogSink:
    """Writes entries to `api_logs` from a worker thread, in batches, without blocking the caller."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._queue: queue.Queue[ApiLogEntry] = queue.Queue(QUEUE_LIMIT)
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self.dropped = 0
        self.failed = 0

    def record(self, entry: ApiLogEntry) -> None:
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self.dropped += 1
            return
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="memos-api-log", daemon=True)
                self._worker.start()

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued entry is written (or given up on); True when the queue is empty."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.005)
        return self._queue.unfinished_tasks == 0

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._worker = None
                        return
                continue
            batch = [first]
            while len(batch) < BATCH_LIMIT:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._write(batch)
            for _ in batch:
                self._queue.task_done()

    def _write(self, batch: list[ApiLogEntry]) -> None:
        def work(session: Session) -> None:
            session.add_all(
                ApiLogRow(
                    tool_name=entry.tool_name,
                    input_json=entry.input,
                    output_json=entry.output,
                    duration_ms=entry.duration_ms,
                    success=entry.success,
                    called_at=entry.called_at,
                )
                for entry in batch
            )

        try:
            self._db.write_sync(work)
        except Exception:  # a closed database at shutdown, a full disk: logging must not take the service down
            self.failed += len(batch)
            log.debug("could not write %d api log entries", len(batch), exc_info=True)
