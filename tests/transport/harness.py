"""Test-side plumbing: raw NDJSON connections to a server under test, over stdio, TCP or memory.

The tests talk raw bytes on purpose (not through `Peer`), so that framing, ids and error payloads are
checked as a real host would see them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import Process, SocketStream

from memos_bridge.config import TransportSettings
from memos_bridge.transport import PeerHub, serve_tcp

from .toy_server import build_methods

TOY_SERVER = Path(__file__).with_name("toy_server.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TIMEOUT = 5.0


class Conn:
    """A raw line-oriented client connection."""

    def __init__(
        self,
        send_bytes: Callable[[bytes], Awaitable[None]],
        receive_bytes: Callable[[], Awaitable[bytes]],
        close_input: Callable[[], Awaitable[None]],
    ) -> None:
        self._send_bytes = send_bytes
        self._receive_bytes = receive_bytes
        self._close_input = close_input
        self._buffer = bytearray()
        self._eof = False
        self._next_id = 0

    @property
    def last_id(self) -> int:
        """The id of the most recent request sent with an automatic id."""
        return self._next_id

    async def send_raw(self, data: bytes) -> None:
        await self._send_bytes(data)

    async def send(self, message: Any) -> None:
        await self._send_bytes(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: Any = None, id: Any = None) -> Any:
        """Send a request; returns its id."""
        if id is None:
            self._next_id += 1
            id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return id

    async def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def call(self, method: str, params: Any = None, timeout: float = DEFAULT_TIMEOUT) -> Any:
        """Request and wait for the matching reply (anything else arriving first is a test failure)."""
        request_id = await self.request(method, params)
        reply = await self.recv(timeout)
        assert isinstance(reply, dict) and reply.get("id") == request_id, reply
        return reply

    async def recv_line(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        with anyio.fail_after(timeout):
            while b"\n" not in self._buffer:
                if self._eof:
                    raise EOFError(f"connection closed; unterminated data: {bytes(self._buffer)!r}")
                chunk = await self._receive_bytes()
                if not chunk:
                    self._eof = True
                self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line

    async def recv(self, timeout: float = DEFAULT_TIMEOUT) -> Any:
        return json.loads(await self.recv_line(timeout))

    async def expect_eof(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Assert that the server closes its output without sending anything more."""
        with anyio.fail_after(timeout):
            while not self._eof:
                chunk = await self._receive_bytes()
                if not chunk:
                    self._eof = True
                self._buffer += chunk
        assert not self._buffer, bytes(self._buffer)

    async def expect_silence(self, seconds: float) -> None:
        """Assert that nothing arrives for `seconds`."""
        with anyio.move_on_after(seconds):
            line = await self.recv_line(seconds + 1)
            raise AssertionError(f"unexpected line: {line!r}")

    async def close_input(self) -> None:
        await self._close_input()


def _stream_conn(send_stream: Any, receive_stream: Any, close_input: Callable[[], Awaitable[None]]) -> Conn:
    async def receive() -> bytes:
        try:
            data: bytes = await receive_stream.receive()
            return data
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return b""

    return Conn(send_stream.send, receive, close_input)


def tcp_conn(stream: SocketStream) -> Conn:
    return _stream_conn(stream, stream, stream.send_eof)


@dataclass
class StdioServer:
    """The toy server as a real subprocess speaking on its stdin/stdout."""

    process: Process
    conn: Conn
    stderr_file: IO[bytes]
    args: list[str] = field(default_factory=list)

    async def wait(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        with anyio.fail_after(timeout):
            return await self.process.wait()

    def stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read().decode(errors="replace")


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "0"
    return env


@asynccontextmanager
async def stdio_server(*args: str) -> AsyncIterator[StdioServer]:
    with tempfile.TemporaryFile() as stderr_file:
        process = await anyio.open_process(
            [sys.executable, str(TOY_SERVER), *args], stderr=stderr_file, env=subprocess_env()
        )
        assert process.stdin is not None and process.stdout is not None
        conn = _stream_conn(process.stdin, process.stdout, process.stdin.aclose)
        try:
            yield StdioServer(process, conn, stderr_file, list(args))
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
                await process.aclose()


@dataclass
class TcpServer:
    host: str
    port: int
    hub: PeerHub | None = None

    async def connect(self) -> Conn:
        stream = await anyio.connect_tcp(self.host, self.port)
        return tcp_conn(stream)


@asynccontextmanager
async def tcp_server(settings: TransportSettings | None = None, host: str = "127.0.0.1") -> AsyncIterator[TcpServer]:
    """The toy table served by `serve_tcp` inside the test's own event loop (port 0)."""
    settings = settings or TransportSettings.model_validate({"shutdown_timeout_s": 5.0})
    hub = PeerHub()
    async with anyio.create_task_group() as group:
        port = await group.start(partial(serve_tcp, host, 0, build_methods(hub), settings, on_peer=hub.add))
        try:
            yield TcpServer(host, port, hub)
        finally:
            group.cancel_scope.cancel()


@asynccontextmanager
async def open_conn(kind: str, **options: Any) -> AsyncIterator[tuple[Conn, StdioServer | None]]:
    """One connection to a fresh toy server: `kind` is "stdio" (subprocess) or "tcp" (in-process).

    `options` are settings: max_line_bytes, host_request_timeout_s, shutdown_timeout_s, token.
    """
    if kind == "stdio":
        flags = {
            "max_line_bytes": "--max-line-bytes",
            "host_request_timeout_s": "--host-timeout",
            "shutdown_timeout_s": "--shutdown-timeout",
            "token": "--token",
            "max_concurrent_requests": "--max-concurrent",
        }
        args = [item for key, value in options.items() for item in (flags[key], str(value))]
        async with stdio_server(*args) as server:
            yield server.conn, server
    else:
        settings = TransportSettings.model_validate({"shutdown_timeout_s": 5.0, **options})
        async with tcp_server(settings) as server:
            yield await server.connect(), None
