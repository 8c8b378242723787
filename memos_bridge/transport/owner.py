"""One owner per data home: the first `serve` holds a lock in the home; later ones attach to it.

Hosts spawn the service freely — several Hermes processes, an MCP host, the CLI — often on the same home.
Two processes writing one home each keep their own in-memory vector index and learning queue, so what one
captured the other recalls only through full text, and both learn from the same episodes. So the first
process takes an exclusive OS lock on `<home>/owner.lock` (released by the kernel when the process dies,
however it dies) and listens on a local socket; a later `serve` on the same home finds the lock taken and
relays its stdio to the owner's socket byte for byte: its host talks to the one memory, the one learning
queue and the one vector index, and replies — including the owner's `host.llm.complete` requests to that
host — travel back the same way. With `--no-attach` it exits 2 naming the owner instead.

An owner whose own host has gone keeps serving while attached hosts remain. When the owner goes away anyway
(killed, crashed), each attached process notices its connection end, stops reading its host's input, takes
the lock (the first one to do so becomes the new owner; the others attach to it) and serves the rest of its
host's input itself: the hosts keep one memory without being restarted.

The socket lives in the home (mode 600 in a 700 folder: only the same user can connect), or, when the home's
path is too long for a Unix socket address, in the system's temporary folder under a name derived from the
home; the lock file records where, with the owner's pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = "owner.lock"
SOCKET_NAME = "owner.sock"
_MAX_SOCKET_PATH = 100  # sockaddr_un allows 104-108 bytes depending on the system


@dataclass(frozen=True)
class OwnerInfo:
    pid: int | None
    socket_path: str | None


class HomeLock:
    """The exclusive lock that makes this process the owner of a home (held until `release` or exit)."""

    def __init__(self, home: Path, fd: int, socket_path: str) -> None:
        self.home = home
        self.socket_path = socket_path
        self._fd = fd

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def socket_path_for(home: Path) -> str:
    """Where the owner of `home` listens (module docstring)."""
    inside = str(home / SOCKET_NAME)
    if len(inside.encode()) <= _MAX_SOCKET_PATH:
        return inside
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / f"memos-bridge-{os.getuid()}-{digest}.sock")


def try_lock(home: Path) -> HomeLock | None:
    """Become the owner of `home` (the lock file records pid and socket), or None when a live process is."""
    path = home / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    socket_path = socket_path_for(home)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "socket": socket_path}).encode(), 0)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)  # a previous owner's, left by a crash: nobody listens on it any more
    return HomeLock(home, fd, socket_path)


def read_owner(home: Path) -> OwnerInfo:
    """Who holds the lock of `home`, as its lock file says."""
    try:
        data = json.loads((home / LOCK_NAME).read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return OwnerInfo(None, None)
    pid = data.get("pid") if isinstance(data.get("pid"), int) else None
    sock = data.get("socket") if isinstance(data.get("socket"), str) else None
    return OwnerInfo(pid, sock)


def relay(socket_path: str, read_fd: int, write_fd: int, *, connect_timeout_s: float = 30.0) -> int:
    """Pipe `read_fd` → the owner's socket and the socket → `write_fd` until both directions end.

    Returns 0 when the host ended its input and the owner answered everything, 1 when the owner went away
    first (the host sees its output end, as after a crash, and may respawn).
    """
    conn = _connect(socket_path, connect_timeout_s)
    host_done = threading.Event()
    owner_gone = threading.Event()

    def upstream() -> None:
        # Reads only when input is ready and the owner is still there, so that after the owner goes away
        # nothing more is taken from the host's input: whoever serves the host next reads it whole.
        try:
            with contextlib.suppress(OSError):  # the owner's socket closed under us: the loop below sees it
                while not owner_gone.is_set():
                    ready, _, _ = select.select([read_fd], [], [], 0.2)
                    if not ready or owner_gone.is_set():
                        continue
                    chunk = os.read(read_fd, 1 << 16)
                    if not chunk:
                        host_done.set()
                        break
                    conn.sendall(chunk)
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)

    reader = threading.Thread(target=upstream, name="relay-upstream", daemon=True)
    reader.start()
    try:
        with contextlib.suppress(OSError):  # a reset connection ends the relay like a closed one
            while chunk := conn.recv(1 << 16):
                _write_all(write_fd, chunk)
    finally:
        owner_gone.set()
        reader.join()
        conn.close()
    return 0 if host_done.is_set() else 1


def _connect(socket_path: str, timeout_s: float) -> socket.socket:
    """Connect, waiting for an owner that holds the lock but is still opening its socket."""
    deadline = time.monotonic() + timeout_s
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(socket_path)
            return conn
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
