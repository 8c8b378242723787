"""In-process event bus: core emits, the server layer forwards to clients as `events.notify`.

Listeners are called synchronously and must not block (the server's listener only schedules a send). A
failing listener is logged and never breaks the emitting operation.

Every event about a session's memory carries that session's namespace (profile and workspace), because the
server sends an event only to the connections that work in that namespace: a trace summary of namespace A
must not reach a host of namespace B. The namespace comes from the emitter when it has the row at hand,
else from `event_scope`, a context variable set for the duration of a request (`enter`) or of a learning
chain (`scoped`), so stages deep in a chain need not thread it through. Events with no namespace (the
service starting, the learning queue flushed) concern every client.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, Protocol, runtime_checkable

from memos_bridge.contract.dto import CoreEventDTO, EventNamespaceDTO
from memos_bridge.contract.events import EventType
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

Listener = Callable[[CoreEventDTO], None]

EventScope = tuple[str, str | None]
"""The namespace an event belongs to: (profile id, workspace id)."""

DEFAULT_SCOPE: EventScope = ("default", None)
"""The default namespace, which a connection that names none works in."""

event_scope: ContextVar[EventScope | None] = ContextVar("memos_bridge_event_scope", default=None)
"""The namespace of the request or learning chain being run, for events emitted without one."""


class _Owned(Protocol):
    @property
    def profile_id(self) -> str: ...
    @property
    def workspace_id(self) -> str | None: ...


@runtime_checkable
class _OwnedRow(Protocol):
    @property
    def owner_profile_id(self) -> str: ...
    @property
    def owner_workspace_id(self) -> str | None: ...


def scope_of(owner: _Owned | _OwnedRow) -> EventScope:
    """The event scope of an owner filter or of a row with owner columns."""
    if isinstance(owner, _OwnedRow):
        return (owner.owner_profile_id, owner.owner_workspace_id)
    return (owner.profile_id, owner.workspace_id)


class EventBus:
    def __init__(self) -> None:
        self._seq = itertools.count(1)
        self._listeners: list[Listener] = []
        self._joiners: list[Callable[[EventScope | Literal["*"]], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def on_enter(self, joiner: Callable[[EventScope | Literal["*"]], None]) -> None:
        """Call `joiner(scope)` whenever a request enters a namespace (the server adds it to the caller's
        connection); `"*"` when the caller asked for every namespace's events."""
        with self._lock:
            self._joiners.append(joiner)

    def enter(self, scope: EventScope) -> None:
        """The running request works in `scope`: its later events default to it, and its connection joins it.

        Called from the request's own task (not a worker thread), so the context variable stays set for the
        rest of the request and for the tasks it starts."""
        event_scope.set(scope)
        self._join(scope)

    def watch_all(self) -> None:
        """The running request's connection receives the events of every namespace from now on."""
        self._join("*")

    def _join(self, scope: EventScope | Literal["*"]) -> None:
        with self._lock:
            joiners = list(self._joiners)
        for joiner in joiners:
            try:
                joiner(scope)
            except Exception:
                log.exception("event scope joiner failed")

    @contextmanager
    def scoped(self, scope: EventScope) -> Iterator[None]:
        """Events emitted inside the block (background work for one namespace) default to `scope`."""
        token = event_scope.set(scope)
        try:
            yield
        finally:
            event_scope.reset(token)

    def emit(
        self,
        event_type: EventType,
        payload: dict[str, Any],
        correlation_id: str | None = None,
        *,
        scope: EventScope | None = None,
    ) -> CoreEventDTO:
        """Send an event to the listeners; `scope` defaults to the running request's or chain's namespace."""
        scope = scope if scope is not None else event_scope.get()
        with self._lock:
            event = CoreEventDTO(
                type=event_type.value,
                ts=now_ms(),
                seq=next(self._seq),
                correlation_id=correlation_id,
                namespace=None if scope is None else EventNamespaceDTO(profile_id=scope[0], workspace_id=scope[1]),
                payload=payload,
            )
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed for %s", event_type.value)
        return event
