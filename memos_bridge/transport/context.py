"""What a method learns about the call it is serving, and how deep code finds the calling connection.

Methods receive a `CallContext` as their first argument (jsonrpcserver passes its `context` first). Code
far below a method (the LLM facade, say) should not need the context threaded through every call just to
ask the host something, so the transport also publishes the connection in the `current_peer` context
variable for the duration of each method call. asyncio copies context variables into tasks, so work a
method spawns inherits it too.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memos_bridge.transport.peer import Peer

current_peer: ContextVar[Peer | None] = ContextVar("memos_bridge_current_peer", default=None)
"""The connection whose request is being served in this task, or None outside a method call."""


@dataclass(frozen=True, slots=True)
class CallContext:
    """Per-dispatch facts about the caller.

    A new one is made for every incoming line (a batch shares one), so `authenticated` is a snapshot taken
    when the line was dispatched.
    """

    peer: Peer
    connection_id: str
    transport: str
    """"stdio", "tcp", or whatever label the caller of `Peer` chose."""
    authenticated: bool
