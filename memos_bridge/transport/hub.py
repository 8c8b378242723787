"""`PeerHub`: the live connections, for code that is not answering any particular request.

Events (`events.notify`) go to every connected host, and background work (topic finalisation, startup
recovery) may need a host LLM although no request is running. Such work asks `host_peer()`: the
connection of the request being served if there is one (so a request's LLM calls go back to its own
host), otherwise the host heard from most recently, as the one most likely to still be there.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import anyio

from memos_bridge.timeutil import now_ms
from memos_bridge.transport.context import current_peer
from memos_bridge.transport.peer import Peer

logger = logging.getLogger(__name__)

EVENT_METHOD = "events.notify"


class PeerHub:
    """Registry of live peers. Pass `hub.add` as `on_peer` to `serve_stdio` / `serve_tcp`."""

    def __init__(self) -> None:
        self._peers: dict[Peer, None] = {}  # insertion-ordered set
        self._event_seq = itertools.count(1)

    def add(self, peer: Peer) -> None:
        """Register `peer`; it is removed again when its `serve()` finishes."""
        self._peers[peer] = None
        peer.on_close(self.remove)

    def remove(self, peer: Peer) -> None:
        self._peers.pop(peer, None)

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
        """Notify every live authenticated peer concurrently; returns how many accepted it.

        A peer that fails (closed meanwhile, broken pipe) is skipped: one dead host must not keep the
        others from hearing about an event.
        """
        delivered = 0

        async def send(peer: Peer) -> None:
            nonlocal delivered
            try:
                await peer.notify(method, params)
            except Exception as exc:
                logger.debug("broadcast of %s to %s failed: %r", method, peer.connection_id, exc)
            else:
                delivered += 1

        async with anyio.create_task_group() as group:
            for peer in self.peers:
                group.start_soon(send, peer)
        return delivered

    async def emit_event(self, event_type: str, payload: Any = None) -> int:
        """Broadcast `events.notify` with `{type, ts, seq, payload}`; `seq` grows by one per event."""
        params = {"type": event_type, "ts": now_ms(), "seq": next(self._event_seq), "payload": payload}
        return await self.broadcast(EVENT_METHOD, params)
