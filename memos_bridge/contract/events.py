"""Event types pushed to clients as `events.notify` notifications (`{type, ts, seq, payload}`)."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    SESSION_OPENED = "session.opened"
    SESSION_CLOSED = "session.closed"
    EPISODE_OPENED = "episode.opened"
    EPISODE_CLOSED = "episode.closed"
    TRACE_CREATED = "trace.created"
    RETRIEVAL_TRIGGERED = "retrieval.triggered"
    RETRIEVAL_EMPTY = "retrieval.empty"
    RETRIEVAL_HIT = "retrieval.hit"
    SYSTEM_STARTED = "system.started"
    SYSTEM_SHUTDOWN = "system.shutdown"
    SYSTEM_ERROR = "system.error"


EVENTS_NOTIFY_METHOD = "events.notify"
HOST_LLM_COMPLETE_METHOD = "host.llm.complete"
