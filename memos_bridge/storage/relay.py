"""Events between services that share one PostgreSQL database: `NOTIFY` out, `LISTEN` in.

Each service sends the events its own work produced on one channel (`CHANNEL`) and listens on it for the
others' (`core/cluster.py` decides which events travel and re-emits what arrives). A message is JSON:
`{"o": <sending service>, "e": <the event as sent to clients>}`, so a service can skip its own messages.
PostgreSQL refuses a notification payload of 8000 bytes or more; an event too large for that is stored in
`relayed_events` by the same transaction that notifies, and the message only names it
(`{"o": …, "ref": <row id>}`): the listeners read it from there. Those rows are kept a few minutes.

Notifications are delivered when the sending transaction commits, in commit order, to the connections that
were listening at that moment; a service that is not connected then does not get them later. That is the
delivery events to clients have always had (a client that is not connected misses events), now between
services too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select
from sqlalchemy.orm import Session

from memos_bridge.storage.models import RelayedEventRow
from memos_bridge.storage.repos import SEARCHABLE_MODELS
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

CHANNEL = "memos_bridge_events"
PAYLOAD_LIMIT = 7900
"""Bytes of a notification payload at most (PostgreSQL's limit is 8000, less some room)."""
KEEP_RELAYED_MS = 10 * 60_000
"""How long a large event's stored body stays readable by the listeners."""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def publish_sync(engine: Engine, origin: str, events: Sequence[dict[str, Any]]) -> int:
    """Notify `events` (wire dicts) in order, in one transaction; returns how many were stored as rows."""
    stored = 0
    with engine.begin() as conn:
        for event in events:
            message = _dumps({"o": origin, "e": event})
            if len(message.encode()) > PAYLOAD_LIMIT:
                now = now_ms()
                if not stored:
                    conn.execute(delete(RelayedEventRow).where(RelayedEventRow.created_at < now - KEEP_RELAYED_MS))
                row_id = conn.execute(
                    insert(RelayedEventRow)
                    .values(created_at=now, origin=origin, body_json=event)
                    .returning(RelayedEventRow.id)
                ).scalar_one()
                message = _dumps({"o": origin, "ref": row_id})
                stored += 1
            conn.execute(select(func.pg_notify(CHANNEL, message)))
    return stored


def relayed_events(db: Session, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The stored bodies of large events, by row id (missing: expired)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = db.execute(select(RelayedEventRow.id, RelayedEventRow.body_json).where(RelayedEventRow.id.in_(wanted)))
    return {int(row_id): body for row_id, body in rows}


def rows_named(db: Session, kind: str, ids: Iterable[str]) -> list[Any]:
    """The memories of one searchable kind with these ids (rows another service changed)."""
    wanted = sorted(set(ids))
    if not wanted or kind not in SEARCHABLE_MODELS:
        return []
    model = SEARCHABLE_MODELS[kind]
    return list(db.scalars(select(model).where(model.id.in_(wanted))))


class Listener:
    """One dedicated connection that LISTENs on `CHANNEL` (not a pooled one: it stays open for the service's
    life and must never be handed to a unit of work). Synchronous: use it from one worker thread at a time."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._conn: Any = None  # a psycopg.Connection (the driver is imported only where PostgreSQL is used)
        self._raw: Any = None

    def connect(self) -> None:
        import psycopg

        raw = self._engine.raw_connection()
        conn = raw.driver_connection
        raw.detach()  # ours alone from now on; closing it closes the database connection
        if not isinstance(conn, psycopg.Connection):
            raw.close()
            raise TypeError(f"LISTEN needs the psycopg driver, not {type(conn).__name__}")
        conn.rollback()
        conn.autocommit = True
        conn.execute(f"LISTEN {CHANNEL}")
        self._raw, self._conn = raw, conn

    def poll(self, timeout_s: float) -> list[str]:
        """The payloads that arrive within `timeout_s` (returns at the first one, with any others queued)."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("listener is not connected")
        payloads = [note.payload for note in conn.notifies(timeout=timeout_s, stop_after=1)]
        if payloads:
            payloads.extend(note.payload for note in conn.notifies(timeout=0.0))
        return payloads

    def close(self) -> None:
        raw, self._raw, self._conn = self._raw, None, None
        if raw is not None:
            try:
                raw.close()
            except Exception:  # already broken: nothing left to release
                log.debug("event listener connection did not close cleanly", exc_info=True)
