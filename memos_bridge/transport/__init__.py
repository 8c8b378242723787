"""JSON-RPC 2.0 over newline-delimited JSON, on stdio (spawned by a host) or TCP (daemon).

Layers, bottom up: `framing` (bounded NDJSON lines), `dispatch` (method guard and jsonrpcserver glue),
`outbox` (the batching single writer), `peer` (one connection, both directions), `stdio` / `tcp` (the
two ways to get connections), `hub` (the set of live connections). Importing this package prints
nothing, so `claim_stdio()` may be imported from it before the noisy imports.
"""

from memos_bridge.transport.context import CallContext, current_peer
from memos_bridge.transport.dispatch import AUTH_METHOD, Method, MethodTable, prepare_methods
from memos_bridge.transport.framing import LineReader, Oversized
from memos_bridge.transport.hub import EVENT_METHOD, PeerHub
from memos_bridge.transport.peer import Peer, RemoteError
from memos_bridge.transport.stdio import StdioChannel, claim_stdio, serve_stdio
from memos_bridge.transport.tcp import check_bind_allowed, is_loopback_host, serve_tcp

__all__ = [
    "AUTH_METHOD",
    "EVENT_METHOD",
    "CallContext",
    "LineReader",
    "Method",
    "MethodTable",
    "Oversized",
    "Peer",
    "PeerHub",
    "RemoteError",
    "StdioChannel",
    "check_bind_allowed",
    "claim_stdio",
    "current_peer",
    "is_loopback_host",
    "prepare_methods",
    "serve_stdio",
    "serve_tcp",
]
