"""How a command that is not the service reaches the one memory of a data home.

One process owns a data home and keeps state the database alone does not show: the in-memory vector index
that finds memories by meaning, and the learning queue. A second process on the same home would search with an
index that misses what the owner wrote since it loaded, and the owner would search with one that misses the
second process's writes. So the CLI, the MCP server and the hook commands all connect here: to the owner's
local socket when a process serves the home, else to a service they start for themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from memos_bridge.client import ServiceClient


def owner_socket(home: Path) -> str | None:
    """The socket of the process serving `home`, when one is there and accepts a connection."""
    import socket

    from memos_bridge.transport import owner

    path = owner.read_owner(home).socket_path
    if path is None:
        return None
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(2.0)
        probe.connect(path)
        return path
    except OSError:
        return None
    finally:
        probe.close()


def open_client(home: Path, service_log: IO[bytes] | None = None) -> ServiceClient:
    """A client of the service of `home`: its owner's socket when a process serves the home, else a service
    started for this command.

    Why not open the database directly, or always start a service: one process owns a data home and keeps
    state the database alone does not show — the in-memory vector index that finds memories by meaning, and
    the learning queue. A second process on the same home would search with an index that misses what the
    owner wrote since it loaded, and the owner would search with one that misses the CLI's writes. So when
    the owner's socket answers, the CLI speaks NDJSON JSON-RPC over it, like an attached host.

    When nobody serves the home, the CLI starts `memos-bridge serve --home HOME` on stdio; that process takes
    the home's lock and becomes its owner for the length of the command, then exits when the CLI closes its
    input, leaving the home free. Should an owner appear between the check and the start, the started
    `serve` attaches to it and relays (`transport/owner.py`), so the command still reaches the one memory.
    `service_log` receives that service's stderr (shown when it fails to start).

    Neither client reconnects by itself: a command whose service went away fails with one clear line
    rather than silently starting another one.
    """
    from memos_bridge.client import ServiceClient, unix_connector

    socket_path = owner_socket(home)
    if socket_path is not None:
        return ServiceClient(connector=unix_connector(socket_path), reconnect=False)
    return ServiceClient.spawn(home, reconnect=False, stderr=service_log)
