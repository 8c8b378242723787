"""The async JSON-RPC client for memos-bridge, on anyio (asyncio or trio), over stdio (spawn) or TCP.

The same contract as the sync `memos_bridge.client.ServiceClient`, for hosts that run an event loop:

* typed wrappers for every RPC (`await client.turn_start(...)`) from `memos_bridge.client_methods.RpcMethods`,
  and `await client.call(method, params, timeout=...)` for raw access;
* server→client requests (`host.llm.complete`) served by handlers registered with `on_request`, plain or
  `async def` (plain ones run in a worker thread so a blocking host model never stalls the loop), each in its
  own task so several can be in flight;
* `events.notify` delivered, in order, to `on_event` callbacks by a dedicated task — never by the reader, so
  a callback may await the client itself;
* per-call timeouts (`CallTimeout`, a `TimeoutError`);
* reconnect: when the connection ends, the calls in flight fail at once with `TransportClosed` naming the
  call (it may or may not have been applied), and the next call respawns the service / reconnects the
  socket (re-authenticating) before it is sent; `on_reconnect` callbacks run afterwards.

Use it as an async context manager, which owns the background tasks (structured concurrency)::

    async with AsyncServiceClient.spawn(home) as client:
        session = (await client.session_open("my-agent"))["sessionId"]
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import logging
import os
import subprocess
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from memos_bridge.client import (
    DEFAULT_TIMEOUT_S,
    RECONNECT_ATTEMPTS,
    RECONNECT_BACKOFF_S,
    CallTimeout,
    RpcError,
    TransportClosed,
    encode_reply,
    failure_reply,
    result_reply,
    spawn_command,
    unhandled_reply,
)
from memos_bridge.client_methods import RpcMethods
from memos_bridge.transport.framing import LineReader, Oversized

logger = logging.getLogger(__name__)

AsyncRequestHandler = Callable[[Any], Any]
"""Serves one server→client request: `handler(params)` returning the result, or an awaitable of it."""
AsyncEventHandler = Callable[[dict[str, Any]], Any]
"""Gets one `events.notify` payload; may be `async def`."""
AsyncReconnectHandler = Callable[[], Any]

MAX_LINE_BYTES = 64 * 1024 * 1024
_EVENT_BACKLOG = 10_000


@dataclass
class AsyncConnection:
    """One live byte stream: `send` bytes, `receive` a chunk (`b""` at the end), `aclose` → exit code."""

    send: Callable[[bytes], Awaitable[None]]
    receive: Callable[[], Awaitable[bytes]]
    aclose: Callable[[], Awaitable[int | None]]
    process: anyio.abc.Process | None = None


AsyncConnector = Callable[[], Awaitable[AsyncConnection]]


def _receiver(stream: anyio.abc.ByteReceiveStream) -> Callable[[], Awaitable[bytes]]:
    async def receive() -> bytes:
        try:
            return await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return b""

    return receive


def async_spawn_connector(
    home: str | Path,
    *,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    stderr: Any = None,
) -> AsyncConnector:
    """Start `memos-bridge serve` on stdio as a child process (again on every reconnect)."""

    async def connect() -> AsyncConnection:
        child_env = {**os.environ, **(env or {}), "MEMOS_BRIDGE_HOME": str(home)}
        process = await anyio.open_process(
            spawn_command(home, extra_args),
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            env=child_env,
        )
        stdin, stdout = process.stdin, process.stdout
        assert stdin is not None and stdout is not None

        async def aclose() -> int | None:
            code: int | None = None
            with anyio.CancelScope(shield=True):  # a cancelled caller must still reap the child
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    await stdin.aclose()
                with anyio.move_on_after(30):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                code = await process.wait()
                await process.aclose()
            return code

        return AsyncConnection(stdin.send, _receiver(stdout), aclose, process)

    return connect


def async_tcp_connector(host: str, port: int, *, timeout: float = 10.0) -> AsyncConnector:
    """Connect to a `memos-bridge serve --tcp` daemon."""

    async def connect() -> AsyncConnection:
        with anyio.fail_after(timeout):
            stream = await anyio.connect_tcp(host, port)

        async def aclose() -> None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            return None

        return AsyncConnection(stream.send, _receiver(stream), aclose)

    return connect


@dataclass
class _Link:
    connection: AsyncConnection
    generation: int
    dead: bool = False
    closed: bool = False
    exit_code: int | None = None

    async def shut(self) -> int | None:
        if not self.closed:
            self.closed = True
            self.dead = True
            self.exit_code = await self.connection.aclose()
        return self.exit_code


@dataclass
class _Pending:
    method: str
    generation: int
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: BaseException | None = None


class AsyncServiceClient(RpcMethods[Awaitable[dict[str, Any]], Awaitable[dict[str, Any] | None]]):
    """Async client; enter it (`async with`) before calling."""

    def __init__(
        self,
        connector: AsyncConnector,
        *,
        reconnect: bool = True,
        token: str | None = None,
        default_timeout: float = DEFAULT_TIMEOUT_S,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self._connector = connector
        self._reconnect = reconnect
        self._token = token
        self.default_timeout = default_timeout
        self._max_line_bytes = max_line_bytes
        self._ids = itertools.count(1)
        self._generations = itertools.count(1)
        self._pending: dict[Any, _Pending] = {}
        self._handlers: dict[str, AsyncRequestHandler] = {}
        self._event_handlers: list[tuple[AsyncEventHandler, frozenset[str] | None]] = []
        self._notification_handlers: list[Callable[[str, Any], Any]] = []
        self._reconnect_handlers: list[AsyncReconnectHandler] = []
        self.notifications: deque[tuple[str, Any]] = deque(maxlen=_EVENT_BACKLOG)
        self._events: deque[tuple[str, Any]] = deque(maxlen=_EVENT_BACKLOG)
        self._events_ready = anyio.Event()
        self._link: _Link | None = None
        self._link_lock = anyio.Lock()
        self._write_lock = anyio.Lock()
        self._stack: AsyncExitStack | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._closing = False
        self.reconnects = 0

    # ------------------------------------------------------------ construction

    @classmethod
    def spawn(
        cls,
        home: str | Path,
        *,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        stderr: Any = None,
        reconnect: bool = True,
        default_timeout: float = DEFAULT_TIMEOUT_S,
    ) -> AsyncServiceClient:
        """A client that serves `home` from a child process it spawns (and respawns) itself."""
        connector = async_spawn_connector(home, extra_args=extra_args, env=env, stderr=stderr)
        return cls(connector, reconnect=reconnect, default_timeout=default_timeout)

    @classmethod
    def tcp(
        cls,
        host: str,
        port: int,
        *,
        token: str | None = None,
        connect_timeout: float = 10.0,
        reconnect: bool = True,
        default_timeout: float = DEFAULT_TIMEOUT_S,
    ) -> AsyncServiceClient:
        """A client of a TCP daemon; with `token`, it authenticates on every (re)connect."""
        connector = async_tcp_connector(host, port, timeout=connect_timeout)
        return cls(connector, reconnect=reconnect, token=token, default_timeout=default_timeout)

    async def __aenter__(self) -> AsyncServiceClient:
        stack = AsyncExitStack()
        self._group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        try:
            self._group.start_soon(self._event_loop)
            async with self._link_lock:
                await self._connect_locked("connect", attempts=1)
        except BaseException:
            self._group.cancel_scope.cancel()
            await stack.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None

    # ------------------------------------------------------------ registration

    def on_request(self, method: str, handler: AsyncRequestHandler) -> None:
        """Serve a server→client request such as `host.llm.complete` (plain or async handler)."""
        self._handlers[method] = handler

    def on_event(self, handler: AsyncEventHandler, types: Collection[str] | None = None) -> None:
        """Receive `events.notify` payloads (optionally only these `type`s), in order."""
        self._event_handlers.append((handler, frozenset(types) if types is not None else None))

    def on_notification(self, handler: Callable[[str, Any], Any]) -> None:
        """Receive every notification `(method, params)`, in order."""
        self._notification_handlers.append(handler)

    def on_reconnect(self, handler: AsyncReconnectHandler) -> None:
        """Run (plain or async) after each successful reconnect; errors are logged."""
        self._reconnect_handlers.append(handler)

    @property
    def connected(self) -> bool:
        return self._link is not None and not self._link.dead

    @property
    def process(self) -> anyio.abc.Process | None:
        """The spawned service of the current connection (`None` over TCP)."""
        return self._link.connection.process if self._link is not None else None

    # ------------------------------------------------------------ calls

    async def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Call and wait; `CallTimeout` after `timeout` s (default `default_timeout`)."""
        limit = self.default_timeout if timeout is None else timeout
        request_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        data = json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"
        pending: _Pending | None = None
        try:
            with anyio.fail_after(limit):
                for attempt in range(2):
                    link = await self._ensure_link(method)
                    pending = _Pending(method, link.generation)
                    self._pending[request_id] = pending
                    try:
                        await self._write(link, data)
                        break
                    except TransportClosed:
                        self._pending.pop(request_id, None)
                        link.dead = True
                        if attempt == 0 and self._reconnect and not self._closing:
                            continue  # never reached the service: send it again on a fresh connection
                        raise
                assert pending is not None
                await pending.done.wait()
        except TimeoutError as exc:
            raise CallTimeout(method, limit) from exc
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _invoke(self, method: str, params: dict[str, Any], timeout: float | None) -> Awaitable[dict[str, Any]]:
        async def run() -> dict[str, Any]:
            result = await self.call(method, params, timeout=timeout)
            return result if isinstance(result, dict) else {"result": result}

        return run()

    def _invoke_nullable(
        self, method: str, params: dict[str, Any], timeout: float | None
    ) -> Awaitable[dict[str, Any] | None]:
        async def run() -> dict[str, Any] | None:
            result = await self.call(method, params, timeout=timeout)
            if result is None or isinstance(result, dict):
                return result
            return {"result": result}

        return run()

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        link = await self._ensure_link(method)
        await self._write(link, json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (for protocol tests)."""
        link = await self._ensure_link("send_raw")
        await self._write(link, data)

    async def aclose(self) -> int | None:
        """End the connection (EOF to a spawned service) and stop the background tasks; → exit code."""
        if self._closing:
            return self._link.exit_code if self._link is not None else None
        self._closing = True
        link = self._link
        code = await link.shut() if link is not None else None
        self._fail_pending(None, "client closed")
        if self._group is not None:
            self._group.cancel_scope.cancel()
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.__aexit__(None, None, None)
        return code

    # ------------------------------------------------------------ connection management

    async def _ensure_link(self, method: str) -> _Link:
        link = self._link
        if link is not None and not link.dead:
            return link
        async with self._link_lock:
            link = self._link
            if link is not None and not link.dead:
                return link
            if self._closing or self._group is None:
                raise TransportClosed(f"client is not open; {method} was not sent", method=method)
            if not self._reconnect:
                raise TransportClosed(f"connection to memos-bridge closed; {method} was not sent", method=method)
            if link is not None:
                await link.shut()
            link = await self._connect_locked(method, attempts=RECONNECT_ATTEMPTS)
            self.reconnects += 1
        for handler in list(self._reconnect_handlers):
            try:
                outcome = handler()
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                logger.exception("memos-bridge on_reconnect handler failed")
        return link

    async def _connect_locked(self, method: str, *, attempts: int) -> _Link:
        assert self._group is not None
        last: BaseException | None = None
        for attempt in range(attempts):
            try:
                link = _Link(await self._connector(), next(self._generations))
                self._link = link
                self._group.start_soon(self._read_loop, link)
                if self._token:
                    await self._authenticate(link)
                return link
            except (OSError, TimeoutError, RpcError, TransportClosed) as exc:
                last = exc
                if attempts == 1:
                    raise
                logger.warning("memos-bridge reconnect attempt %d failed: %s", attempt + 1, exc)
                await anyio.sleep(RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)])
        raise TransportClosed(
            f"connection to memos-bridge closed and {attempts} reconnect attempts failed ({last}); {method} was not "
            "sent",
            method=method,
        )

    async def _authenticate(self, link: _Link) -> None:
        request_id = next(self._ids)
        pending = _Pending("auth", link.generation)
        self._pending[request_id] = pending
        message = {"jsonrpc": "2.0", "id": request_id, "method": "auth", "params": {"token": self._token}}
        try:
            await self._write(link, json.dumps(message).encode("utf-8") + b"\n")
            with anyio.fail_after(self.default_timeout):
                await pending.done.wait()
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error

    async def _write(self, link: _Link, data: bytes) -> None:
        if link.dead:
            raise TransportClosed("connection closed")
        try:
            async with self._write_lock:
                await link.connection.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise TransportClosed("connection closed while sending") from exc

    def _fail_pending(self, generation: int | None, reason: str) -> None:
        for request_id, pending in list(self._pending.items()):
            if generation is not None and pending.generation != generation:
                continue
            del self._pending[request_id]
            if not pending.done.is_set():
                pending.error = TransportClosed(
                    f"{reason} while {pending.method} (request {request_id}) was in flight; it may or may not have "
                    "been applied",
                    method=pending.method,
                    in_flight=True,
                )
                pending.done.set()

    # ------------------------------------------------------------ reader and dispatch

    async def _read_loop(self, link: _Link) -> None:
        reader = LineReader(link.connection.receive, self._max_line_bytes)
        try:
            while True:
                line = await reader.next_line()
                if line is None:
                    break
                if isinstance(line, Oversized):
                    logger.warning("memos-bridge sent a line over %d bytes; dropped", line.limit)
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                for item in message if isinstance(message, list) else [message]:
                    if isinstance(item, dict):
                        self._dispatch(item)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the stream broke: the pending calls fail below
        finally:
            link.dead = True
            self._fail_pending(link.generation, "connection to memos-bridge closed")

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message:
            if "id" in message and message["id"] is not None:
                if self._group is not None:
                    self._group.start_soon(self._serve_request, message)
            else:
                item = (message["method"], message.get("params"))
                self.notifications.append(item)
                self._events.append(item)
                self._events_ready.set()
            return
        pending = self._pending.get(message.get("id"))
        if pending is None or pending.done.is_set():
            return
        if "error" in message:
            error = message["error"]
            pending.error = RpcError(error if isinstance(error, dict) else {"message": str(error)})
        else:
            pending.result = message.get("result")
        pending.done.set()

    async def _event_loop(self) -> None:
        while True:
            await self._events_ready.wait()
            self._events_ready = anyio.Event()
            while self._events:
                method, params = self._events.popleft()
                for notification_handler in list(self._notification_handlers):
                    await self._run_callback(notification_handler, method, params)
                if method != "events.notify" or not isinstance(params, dict):
                    continue
                for handler, types in list(self._event_handlers):
                    if types is None or params.get("type") in types:
                        await self._run_callback(handler, params)

    @staticmethod
    async def _run_callback(callback: Callable[..., Any], *args: Any) -> None:
        try:
            outcome = callback(*args)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            logger.exception("memos-bridge event callback failed")

    async def _serve_request(self, message: dict[str, Any]) -> None:
        handler = self._handlers.get(message["method"])
        if handler is None:
            reply = unhandled_reply(message)
        else:
            try:
                params = message.get("params")
                if inspect.iscoroutinefunction(handler):
                    result = await handler(params)
                else:
                    result = await anyio.to_thread.run_sync(handler, params, abandon_on_cancel=True)
                    if inspect.isawaitable(result):
                        result = await result
                reply = result_reply(message, result)
            except Exception as exc:
                reply = failure_reply(message, exc)
        link = self._link
        if link is None:
            return
        data = encode_reply(message, reply)
        with contextlib.suppress(TransportClosed):
            await self._write(link, data)
