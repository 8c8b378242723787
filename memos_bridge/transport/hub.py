"""`PeerHub`: the live connections, for code that is not answering any particular request.

Events (`events.notify`) go to the connected hosts that work in the event's namespace, and background
work (topic finalisation, startup recovery) may need a host LLM although no request is running. Such work
asks `host_peer()`: the connection of the request being served if there is one (so a request's LLM calls
go back to its own host), otherwise the host heard from most recently, as the one most likely to still be
there.

Event scoping: an event whose params carry a `namespace` ({profileId, workspaceId}) reaches a connection
only when that connection has joined the namespace (it opened a session there, ran a turn or gave
feedback in it, or subscribed to it), so one tenant's trace summaries never reach another tenant's host.
Every connection starts in the default namespace, the one a call that names none works in; events
without a namespace (the service started or stopped) reach everyone; a connection that subscribed to
`"*"` receives all of them.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import anyio
import anyio.lowlevel

from memos_bridge.timeutil import now_ms
from memos_bridge.transport.context import current_peer
from memos_bridge.transport.dispatch import encode_notification
from memos_bridge.transport.peer import Peer

logger = logging.getLogger(__name__)

EVENT_METHOD = "events.notify"

EventScope = tuple[str, str | None]
"""An event's namespace as the hub compares it: (profile id, workspace id)."""

DEFAULT_EVENT_SCOPE: EventScope = ("default", None)
ALL_SCOPES = "*"


def event_scope_of(params: Any) -> EventScope | None:
    """The namespace of an `events.notify` params object, or None for an event about the whole service."""
    namespace = params.get("namespace") if isinstance(params, dict) else None
    if not isinstance(namespace, dict):
        return None
    return (str(namespace.get("profileId") or "default"), namespace.get("workspaceId"))


class PeerHub:
    """Registry of live peers. Pass `hub.add` as `on_peer` to `serve_stdio` / `serve_tcp`."""

    def __init__(self) -> None:
        self._peers: dict[Peer, None] = {}  # insertion-ordered set
        self._event_seq = itertools.count(1)
        self._scopes: dict[Peer, set[EventScope]] = {}  # namespaces joined besides the default one
        self._watch_all: set[Peer] = set()

    def add(self, peer: Peer) -> None:
        """Register `peer`; it is removed again when its `serve()` finishes."""
        self._peers[peer] = None
        peer.on_close(self.remove)

    def remove(self, peer: Peer) -> None:
        self._peers.pop(peer, None)
        self._scopes.pop(peer, None)
        self._watch_all.discard(peer)

    def join(self, scope: EventScope | str, peer: Peer | None = None) -> None:
        """`peer` (default: the connection of the request being served) receives `scope`'s events from now on;
        `"*"` for every namespace. Outside a request there is nobody to join: nothing happens."""
        peer = peer if peer is not None else current_peer.get()
        if peer is None or peer not in self._peers:
            return
        if scope == ALL_SCOPES:
            self._watch_all.add(peer)
        elif isinstance(scope, tuple):
            self._scopes.setdefault(peer, set()).add(scope)

    def sees(self, peer: Peer, scope: EventScope | None) -> bool:
        """Whether an event of `scope` (None = about the whole service) is sent to `peer`."""
        if scope is None or scope == DEFAULT_EVENT_SCOPE or peer in self._watch_all:
            return True
        return scope in self._scopes.get(peer, ())

    @property
    def peers(self) -> list[Peer]:
        """Registered peers that can still be talked to and are authenticated."""
        return [peer for peer in self._peers if peer.is_alive and peer.authenticated]

    def __len__(self) -> int:
        return len(self.peers)

    def host_peer(self) -> Peer | None:
        """The peer to ask the host something: the current request's, else the most recently active."""
        peer = current_peer.get()
        if peer is not None and peer.is_alive:
            return peer
        candidates = self.peers
        return max(candidates, key=lambda p: p.last_active) if candidates else None

    async def broadcast(self, method: str, params: Any = None) -> int:
        """Notify every live authenticated peer; returns how many accepted it (see `broadcast_many`)."""
        return await self.broadcast_many(method, [params])

    async def broadcast_many(self, method: str, params_list: list[Any]) -> int:
        """Send one notification per item of `params_list`, in order, to every live authenticated peer.

        The lines are encoded once and queued on each connection as one chunk without waiting: with many
        hosts connected a burst of events costs one encoding and one socket write per host, not a task,
        an encoding and a write per event and host. A peer that is closed or has stopped reading (its
        queue past the high-water mark) misses them: one slow host must not hold up the others or the
        service. Returns how many peers accepted the chunk.
        """
        chunk = b"".join(encode_notification(method, params) for params in params_list)
        delivered = sum(1 for peer in self.peers if peer.notify_encoded_nowait(chunk))
        await anyio.lowlevel.checkpoint()
        return delivered

    async def send_events(self, params_list: list[Any]) -> int:
        """Send `events.notify` per item of `params_list` (in order) to each peer that may see it.

        Each line is encoded once; a peer gets the lines of its namespaces as one chunk (the same
        non-waiting queueing as `broadcast_many`). Returns how many peers accepted a chunk."""
        lines = [(encode_notification(EVENT_METHOD, params), event_scope_of(params)) for params in params_list]
        delivered = 0
        for peer in self.peers:
            chunk = b"".join(line for line, scope in lines if self.sees(peer, scope))
            if chunk and peer.notify_encoded_nowait(chunk):
                delivered += 1
        await anyio.lowlevel.checkpoint()
        return delivered

    async def emit_event(self, event_type: str, payload: Any = None) -> int:
        """Broadcast `events.notify` with `{type, ts, seq, payload}`; `seq` grows by one per event."""
        params = {"type": event_type, "ts": now_ms(), "seq": next(self._event_seq), "payload": payload}
        return await self.broadcast(EVENT_METHOD, params)
