"""Several services, one memory: what a service does when its database is shared (PostgreSQL).

Any number of `memos-bridge serve` processes, each with its own data home, may use one PostgreSQL database.
Each keeps its own event bus, learning queue and in-memory vector indexes, so three things need the other
services:

* **Events.** A host connected to service B must hear about a trace captured or a lesson learnt through
  service A, as it would if both hosts used one service. `EventRelay` sends each event this service's work
  emits to the others (`storage/relay.py`: NOTIFY on one channel) and re-emits theirs on this service's bus,
  where the server forwards them to its clients under the usual namespace rules (an event of namespace X
  reaches only the connections working in X). Re-emitted events are never sent on again, and a service
  skips its own messages, so nothing is heard twice. Events about one process (the service started or is
  stopping, its learning queue flushed, its own errors) stay in that process.
* **Vector indexes.** A memory created or changed through another service is read from the database and put
  into this service's loaded indexes when its event arrives (`follow`), so recall through B finds what A
  learnt without a restart. Memories that change without an event (written with `memory.remember`, edited)
  reach the other services' indexes when those load them again.
* **Who runs what.** An episode's learning chain is claimed in the database (`core/learning/claims.py`), and
  the decay job takes a database-wide lock (`core/strength.py`); both use the service's `node_name`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream

from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.events import EventType
from memos_bridge.core.events import EventBus, EventScope, event_scope
from memos_bridge.core.vector_store import VectorStore
from memos_bridge.storage import relay
from memos_bridge.storage.database import Database

log = logging.getLogger(__name__)

LOCAL_EVENTS = frozenset(
    {EventType.SYSTEM_STARTED, EventType.SYSTEM_SHUTDOWN, EventType.SYSTEM_ERROR, EventType.LEARNING_FLUSHED}
)
"""Events about this process alone, which other services' clients must not take for their own service's."""

OUTBOX = 10_000  # events waiting to be sent to the other services at most (more are dropped, logged)
BURST = 256  # events sent in one transaction at most
POLL_S = 0.5  # the listener's wait per call: how long stopping may take
RECONNECT_S = (0.5, 30.0)  # first and longest pause before the listener connects again

#: Event payload keys that name a memory, and the memory kind each one names.
MEMORY_KEYS = {
    "traceId": "trace",
    "policyId": "policy",
    "worldModelId": "world_model",
    "skillId": "skill",
    "memoryId": "memory",
}

Follow = Callable[[list[dict[str, Any]]], Awaitable[object]]


def node_name() -> str:
    """This process's name among the services of one database: host, pid and a random part (a restarted
    process on a reused pid is another service, whose claims and messages must not be taken for ours)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def named_memories(events: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Kind → ids of the memories the events' payloads name."""
    named: dict[str, set[str]] = defaultdict(set)
    for event in events:
        payload = event.get("payload")
        if not isinstance(payload, dict):
            continue
        for key, kind in MEMORY_KEYS.items():
            value = payload.get(key)
            if isinstance(value, str) and value:
                named[kind].add(value)
    return dict(named)


async def follow_vectors(db: Database, vectors: VectorStore, events: list[dict[str, Any]]) -> int:
    """Put the memories these (other services') events name into the loaded vector indexes, as stored now:
    new ones join, changed ones move, archived ones leave. Returns how many rows were read."""
    named = named_memories(events)
    if not named:
        return 0
    found = await db.read(lambda session: {kind: relay.rows_named(session, kind, ids) for kind, ids in named.items()})
    for kind, rows in found.items():
        for row in rows:
            vectors.upsert(kind, row)
    return sum(len(rows) for rows in found.values())


@dataclass
class RelayStats:
    sent: int = 0
    received: int = 0
    dropped: int = 0
    connects: int = 0


class EventRelay:
    """Sends this service's events to the services sharing its database and re-emits theirs (see above)."""

    def __init__(self, db: Database, events: EventBus, node: str, *, follow: Follow | None = None) -> None:
        self._db = db
        self._events = events
        self.node = node
        self._follow = follow
        self._replaying = False
        self._listen_slot = anyio.CapacityLimiter(1)  # the listener's thread never takes a worker of the pool
        self.stats = RelayStats()
        self.listening = anyio.Event()  # set once the first LISTEN is in place (tests wait for it)

    async def run(self) -> None:
        """Relay until cancelled (start it in the server's task group)."""
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](OUTBOX)

        def on_event(event: CoreEventDTO) -> None:
            if self._replaying or event.type in LOCAL_EVENTS:
                return
            try:
                send.send_nowait(event.to_wire())
            except anyio.WouldBlock:
                self.stats.dropped += 1
                log.warning("event relay outbox full; %s not sent to the other services", event.type)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # stopping

        unsubscribe = self._events.subscribe(on_event)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._send, receive)
                group.start_soon(self._listen)
        finally:
            unsubscribe()
            send.close()

    # ------------------------------------------------------------------ out

    async def _send(self, receive: MemoryObjectReceiveStream[dict[str, Any]]) -> None:
        async with receive:
            async for first in receive:
                burst = [first]
                while len(burst) < BURST:
                    try:
                        burst.append(receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                try:
                    await anyio.to_thread.run_sync(relay.publish_sync, self._db.engine, self.node, burst)
                    self.stats.sent += len(burst)
                except Exception:  # the database is unreachable: these events do not reach the other services
                    self.stats.dropped += len(burst)
                    log.warning("event relay could not send %d events", len(burst), exc_info=True)

    # ------------------------------------------------------------------ in

    async def _listen(self) -> None:
        pause = RECONNECT_S[0]
        while True:
            listener = relay.Listener(self._db.engine)
            try:
                await anyio.to_thread.run_sync(listener.connect, limiter=self._listen_slot)
                self.stats.connects += 1
                self.listening.set()
                pause = RECONNECT_S[0]
                while True:
                    payloads = await anyio.to_thread.run_sync(listener.poll, POLL_S, limiter=self._listen_slot)
                    if payloads:
                        await self.deliver(payloads)
            except Exception:
                log.warning("event relay listener lost its connection; again in %.1f s", pause, exc_info=True)
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(listener.close, limiter=self._listen_slot)
            await anyio.sleep(pause)
            pause = min(pause * 2, RECONNECT_S[1])

    async def deliver(self, payloads: list[str]) -> int:
        """Re-emit the other services' events among these notification payloads; returns how many."""
        messages: list[dict[str, Any]] = []
        for payload in payloads:
            try:
                message = json.loads(payload)
            except ValueError:
                log.warning("event relay: ignored a message that is not JSON")
                continue
            if isinstance(message, dict) and message.get("o") != self.node:
                messages.append(message)
        refs = [message["ref"] for message in messages if isinstance(message.get("ref"), int)]
        bodies = await self._db.read(lambda db: relay.relayed_events(db, refs)) if refs else {}
        events: list[dict[str, Any]] = []
        for message in messages:
            event = message.get("e") if "e" in message else bodies.get(message.get("ref"))  # type: ignore[arg-type]
            if isinstance(event, dict) and self._replay(event):
                events.append(event)
        self.stats.received += len(events)
        if events and self._follow is not None:
            try:
                await self._follow(events)
            except Exception:
                log.exception("event relay: following the other services' changes failed")
        return len(events)

    def _replay(self, event: dict[str, Any]) -> bool:
        try:
            event_type = EventType(str(event.get("type")))
        except ValueError:  # a newer service's event type: its clients know it, ours would not
            return False
        if event_type in LOCAL_EVENTS:
            return False
        payload = event.get("payload")
        correlation = event.get("correlationId")
        self._replaying = True  # our own listener must not send it back out
        token = event_scope.set(None)  # its namespace is the sender's, never the one of whatever runs here
        try:
            self._events.emit(
                event_type,
                payload if isinstance(payload, dict) else {},
                correlation if isinstance(correlation, str) else None,
                scope=_scope(event.get("namespace")),
            )
        finally:
            event_scope.reset(token)
            self._replaying = False
        return True


def _scope(namespace: Any) -> EventScope | None:
    """The event scope of a wire `namespace` ({profileId, workspaceId}); None for a service-wide event."""
    if not isinstance(namespace, dict):
        return None
    workspace = namespace.get("workspaceId")
    return (str(namespace.get("profileId") or "default"), workspace if isinstance(workspace, str) else None)
