"""In-process event bus: core emits, the server layer forwards to clients as `events.notify`.

Listeners are called synchronously and must not block (the server's listener only schedules a send). A
failing listener is logged and never breaks the emitting operation.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.events import EventType
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

Listener = Callable[[CoreEventDTO], None]


class EventBus:
    def __init__(self) -> None:
        self._seq = itertools.count(1)
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def emit(self, event_type: EventType, payload: dict[str, Any], correlation_id: str | None = None) -> CoreEventDTO:
        with self._lock:
            event = CoreEventDTO(
                type=event_type.value,
                ts=now_ms(),
                seq=next(self._seq),
                correlation_id=correlation_id,
                payload=payload,
            )
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed for %s", event_type.value)
        return event
