"""TCP transport: a daemon that several hosts connect to, one `Peer` per connection; and the data home's
local socket, which later processes on the same home attach to (`transport/owner.py`).

Memories are private, so the daemon refuses to listen beyond loopback without a shared token, and with a
token configured every connection must call `auth` before anything else (see `Peer.authenticate`).
A failing connection is contained: its handler logs and returns, other connections carry on.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
from collections.abc import Callable, Mapping

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

from memos_bridge.config import TransportSettings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.transport.dispatch import Method, MethodTable, prepare_methods
from memos_bridge.transport.framing import ByteSource
from memos_bridge.transport.peer import Peer

logger = logging.getLogger(__name__)

READ_CHUNK = 1 << 16


def is_loopback_host(host: str | None) -> bool:
    """True for `localhost` and loopback addresses; any other name counts as reachable from outside."""
    if host is None:
        return False
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind_allowed(host: str | None, token: str | None) -> None:
    """Refuse a non-loopback bind without a token: anyone on the network could read the memories."""
    if not token and not is_loopback_host(host):
        raise MemosError(
            ErrorCode.CONFIG_INVALID,
            f"refusing to listen on {host or 'all interfaces'} without a token; "
            "set transport.token (MEMOS_BRIDGE_TOKEN) or bind to 127.0.0.1",
            {"host": host},
        )


class PortInUse(OSError):
    """The TCP address is taken by another process (a runtime fault: exit 1, nothing created)."""


def check_port_free(host: str, port: int) -> None:
    """Fail at once, before the data home is opened, when `host:port` cannot be bound."""
    import socket

    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host.strip("[]"), port))
    except OSError as exc:
        raise PortInUse(
            exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}; stop what uses it or choose another port"
        ) from exc
    finally:
        probe.close()


def _stream_source(stream: SocketStream) -> ByteSource:
    async def receive() -> bytes:
        try:
            return await stream.receive(READ_CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return b""

    return receive


async def _serve_stream(
    stream: SocketStream,
    table: MethodTable,
    settings: TransportSettings,
    connection_id: str,
    transport: str,
    token: str | None,
    on_peer: Callable[[Peer], object] | None,
) -> None:
    """One connection as one `Peer`, until either side ends it; a failure stays within the connection."""
    try:
        async with stream:
            peer = Peer(
                _stream_source(stream),
                stream.send,
                table,
                settings,
                connection_id=connection_id,
                transport=transport,
                token=token,
            )
            if on_peer is not None:
                on_peer(peer)
            await peer.serve()
    except Exception:
        logger.exception("connection %s failed", connection_id)
    finally:
        logger.info("connection %s closed", connection_id)


async def serve_tcp(
    host: str,
    port: int,
    methods: Mapping[str, Method] | MethodTable,
    settings: TransportSettings,
    *,
    on_peer: Callable[[Peer], object] | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on `host:port` and serve every connection until cancelled.

    With `port=0` the system picks a port; the bound port is reported through `task_status`, so
    `port = await task_group.start(serve_tcp, ...)` returns once the server accepts connections.
    """
    token = settings.token or None
    check_bind_allowed(host, token)
    table = prepare_methods(methods)
    counter = itertools.count(1)
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)

    async def handle(stream: SocketStream) -> None:
        connection_id = f"tcp-{next(counter)}"
        logger.info("connection %s from %s", connection_id, stream.extra(SocketAttribute.remote_address, None))
        await _serve_stream(stream, table, settings, connection_id, "tcp", token, on_peer)

    async with listener:
        bound_port = listener.listeners[0].extra(SocketAttribute.local_port)
        logger.info("listening on %s:%d", host, bound_port)
        task_status.started(bound_port)
        await listener.serve(handle)


async def serve_unix(
    path: str,
    methods: Mapping[str, Method] | MethodTable,
    settings: TransportSettings,
    *,
    on_peer: Callable[[Peer], object] | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the data home's local socket (mode 600): processes of the same user that attach to this owner.

    No token: the socket's permissions already limit it to the user who owns the home, as stdio is.
    """
    table = prepare_methods(methods)
    counter = itertools.count(1)
    listener = await anyio.create_unix_listener(path, mode=0o600)

    async def handle(stream: SocketStream) -> None:
        connection_id = f"local-{next(counter)}"
        logger.info("connection %s attached", connection_id)
        await _serve_stream(stream, table, settings, connection_id, "local", None, on_peer)

    async with listener:
        task_status.started()
        await listener.serve(handle)
