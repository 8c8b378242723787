"""Serve the viewer from inside the process that owns the data home (uvicorn on the service's event loop).

The viewer shares the service's event loop and core, so it needs no socket to the service and sees events
as they are emitted. uvicorn is driven through its startup / main loop / shutdown steps rather than
`serve()`, which would take over SIGINT and SIGTERM: the service already handles those and stops its
tasks (the viewer among them) in order.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from anyio.abc import TaskStatus

from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.viewer.auth import ViewerAuth

log = logging.getLogger(__name__)
DEFAULT_BIND = ("127.0.0.1", 18799)


def bind_socket(host: str, port: int, token: str | None) -> socket.socket:
    """The listening socket, checked before anything starts: a non-loopback bind needs the token, a busy
    port is one clear error."""
    auth = ViewerAuth(host, token)
    if auth.login_required and not token:
        raise MemosError(
            ErrorCode.CONFIG_INVALID,
            f"refusing to serve the viewer on {host} without a token; set transport.token (MEMOS_BRIDGE_TOKEN) or "
            "bind to 127.0.0.1",
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, UnicodeError, ValueError, OverflowError) as exc:  # busy port, unknown host, bad address
        sock.close()
        reason = getattr(exc, "strerror", None) or str(exc)
        raise MemosError(
            ErrorCode.CONFIG_INVALID, f"cannot serve the viewer on {host}:{port}: {reason}; choose another address"
        ) from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve_viewer(
    methods: Mapping[str, Callable[..., Any]],
    subscribe: Callable[[Callable[[CoreEventDTO], None]], Callable[[], None]],
    sock: socket.socket,
    token: str | None,
    *,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; reports its URL through `task_status`."""
    import uvicorn

    from memos_bridge.viewer.app import create_app
    from memos_bridge.viewer.backend import Backend

    host, port = sock.getsockname()[:2]
    backend = Backend(methods, subscribe)
    app = create_app(backend, ViewerAuth(host, token))
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False, server_header=False)
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    await server.startup(sockets=[sock])
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
    log.info("viewer on %s", url)
    task_status.started(url)
    try:
        await server.main_loop()
    finally:
        server.should_exit = True
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await server.shutdown(sockets=[sock])
        backend.close()
        sock.close()
