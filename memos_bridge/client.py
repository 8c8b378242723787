"""A synchronous JSON-RPC client for memos-bridge (stdio subprocess, TCP, or a home owner's socket), thread-safe.

Used by the demo, the benchmarks, the end-to-end tests and adapters that want a blocking API (the Hermes
provider runs on host threads). It matches responses by id (the service answers out of order), serves
server→client requests such as `host.llm.complete` through registered handlers on a worker pool, delivers
`events.notify` to callbacks on one ordered dispatcher thread (so a callback may itself call the service
without deadlocking the reader), and fails every in-flight call with `TransportClosed` the moment the
connection ends — naming the call, because whether it was applied is unknown.

A client made by `spawn` or `connect_tcp` reconnects by itself (`reconnect=True`): the next call after the
connection ended respawns the service or reconnects the socket (re-authenticating with the token), then runs
`on_reconnect` callbacks. A request that could not even be written is sent again on the new connection (it
never reached the service); one that was in flight is not retried — the caller decides, since only the
idempotent methods (`turn.start` with a `turnKey`, `turn.end`, `feedback.submit` with an `evidenceId`) are
safe to repeat.

Typed wrappers for every RPC (`client.turn_start(...)`, `client.memory_search(...)`) come from
`memos_bridge.client_methods.RpcMethods`; `call(method, params)` remains for raw access. The asyncio/trio
twin is `memos_bridge.aclient.AsyncServiceClient`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memos_bridge.client_methods import RpcMethods

if TYPE_CHECKING:
    from memos_bridge.aclient import AsyncServiceClient

logger = logging.getLogger(__name__)

RequestHandler = Callable[[Any], Any]
"""Serves one server→client request: gets the params, returns the JSON result (or raises)."""
NotificationHandler = Callable[[str, Any], None]
"""Gets every server notification as (method, params)."""
EventHandler = Callable[[dict[str, Any]], None]
"""Gets one `events.notify` payload `{type, ts, seq, payload}`."""
ReconnectHandler = Callable[[], None]

DEFAULT_TIMEOUT_S = 60.0
RECONNECT_ATTEMPTS = 3
RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0)


class RpcError(Exception):
    """The service answered with a JSON-RPC error; `memos_code` is the stable `error.data.code`."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        self.code: int = int(error.get("code", 0))
        self.data: Any = error.get("data")
        self.message: str = str(error.get("message", ""))
        self.memos_code: str | None = self.data.get("code") if isinstance(self.data, dict) else None
        super().__init__(f"{self.code} {self.memos_code or ''}: {self.message}")


class TransportClosed(ConnectionError):
    """The connection ended before the answer arrived (or could not be re-established).

    `method` and `in_flight` say which call was hit and whether it had been sent: an in-flight call may or
    may not have been applied by the service.
    """

    def __init__(self, message: str, *, method: str | None = None, in_flight: bool = False) -> None:
        super().__init__(message)
        self.method = method
        self.in_flight = in_flight


class CallTimeout(TimeoutError):
    """A call did not answer within its timeout (the late answer, if any, is dropped)."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"{method} did not answer within {timeout}s")
        self.method = method
        self.timeout = timeout


def unhandled_reply(message: dict[str, Any]) -> dict[str, Any]:
    """The answer to a server request nobody registered a handler for (the service then stops asking)."""
    return {
        "jsonrpc": "2.0",
        "id": message["id"],
        "error": {"code": -32601, "message": f"no handler for {message['method']}"},
    }


def result_reply(message: dict[str, Any], result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def failure_reply(message: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """A handler's failure as JSON-RPC: a `HandlerError` keeps its stable code in `error.data`."""
    if isinstance(exc, HandlerError):
        error: dict[str, Any] = {
            "code": -32000,
            "message": exc.message,
            "data": {"name": "MemosError", "code": exc.code, "message": exc.message},
        }
    else:
        error = {"code": -32000, "message": str(exc)}
    return {"jsonrpc": "2.0", "id": message["id"], "error": error}


def encode_reply(message: dict[str, Any], reply: dict[str, Any]) -> bytes:
    """One NDJSON line; a result that cannot be serialised becomes an internal error, not a lost answer."""
    try:
        return json.dumps(reply, ensure_ascii=False).encode("utf-8") + b"\n"
    except (TypeError, ValueError):
        error = {"code": -32603, "message": "unserialisable result"}
        return json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).encode("utf-8") + b"\n"


class HandlerError(Exception):
    """Raised by a server→client request handler to answer with a specific `error.data.code`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Connection:
    """One live byte stream to the service; `close` ends it and returns the child's exit code if spawned."""

    reader: IO[bytes]
    writer: IO[bytes]
    close: Callable[[], int | None]
    process: subprocess.Popen[bytes] | None = None


Connector = Callable[[], Connection]
"""Opens a fresh connection: spawns the service or connects the socket (used again to reconnect)."""


@dataclass
class _Link:
    connection: Connection
    generation: int
    dead: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    exit_code: int | None = None
    closed: bool = False
    close_lock: threading.Lock = field(default_factory=threading.Lock)

    def shut(self) -> int | None:
        """Close once (idempotent) and remember the exit code."""
        with self.close_lock:
            if not self.closed:
                self.closed = True
                with contextlib.suppress(OSError, ValueError):
                    self.connection.writer.close()
                self.exit_code = self.connection.close()
            return self.exit_code


@dataclass
class _Pending:
    method: str
    future: Future[Any]
    generation: int


def spawn_command(home: str | Path, extra_args: list[str] | None = None) -> list[str]:
    """The command line that serves `home` on stdio with this interpreter (the one memos-bridge runs in)."""
    return [sys.executable, "-m", "memos_bridge", "serve", "--home", str(home), *(extra_args or [])]


def spawn_connector(
    home: str | Path,
    *,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    stderr: Any = None,
) -> Connector:
    """A connector that starts `memos-bridge serve` on stdio as a child process with its own data home."""

    def connect() -> Connection:
        child_env = {**os.environ, **(env or {}), "MEMOS_BRIDGE_HOME": str(home)}
        proc = subprocess.Popen(
            spawn_command(home, extra_args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            env=child_env,
        )
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None and stdout is not None

        def close() -> int | None:
            with contextlib.suppress(OSError):
                stdin.close()
            try:
                return proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait()
            finally:
                with contextlib.suppress(OSError):
                    stdout.close()

        return Connection(stdout, stdin, close, proc)

    return connect


def _socket_connection(sock: socket.socket) -> Connection:
    """NDJSON over a connected stream socket (TCP or Unix): the same framing as stdio."""
    sock.settimeout(None)
    reader = sock.makefile("rb")
    writer = sock.makefile("wb")

    def close() -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            reader.close()
        sock.close()
        return None

    return Connection(reader, writer, close)


def tcp_connector(host: str, port: int, *, timeout: float = 10.0) -> Connector:
    """A connector to a `memos-bridge serve --tcp` daemon."""

    def connect() -> Connection:
        return _socket_connection(socket.create_connection((host, port), timeout=timeout))

    return connect


def unix_connector(path: str, *, timeout: float = 10.0) -> Connector:
    """A connector to the local socket of the process that owns a data home (`transport/owner.py`).

    Talking to the owner, rather than spawning a second service on the same home, means the caller sees
    the owner's in-memory vector index and learning queue. The socket needs no token: its file mode already
    limits it to the user who owns the home.
    """

    def connect() -> Connection:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return _socket_connection(sock)

    return connect


class ServiceClient(RpcMethods[dict[str, Any], dict[str, Any] | None]):
    """Blocking, thread-safe client. Build it with `spawn`, `connect_tcp`, or from raw streams."""

    process: subprocess.Popen[bytes] | None = None
    """The spawned service of the current connection (replaced on respawn), `None` over TCP."""

    def __init__(
        self,
        reader: IO[bytes] | None = None,
        writer: IO[bytes] | None = None,
        *,
        on_close: Callable[[], int | None] | None = None,
        handler_threads: int = 4,
        connector: Connector | None = None,
        reconnect: bool = False,
        token: str | None = None,
        default_timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """Wrap raw streams (`reader`/`writer`, no reconnect) or open one through `connector`."""
        if (reader is None) != (writer is None) or (reader is None and connector is None):
            raise ValueError("give reader and writer, or a connector")
        self._connector = connector
        self._reconnect = reconnect and connector is not None
        self._token = token
        self.default_timeout = default_timeout
        self._ids = itertools.count(1)
        self._generations = itertools.count(1)
        self._pending: dict[Any, _Pending] = {}
        self._pending_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._link_lock = threading.RLock()
        self._handlers: dict[str, RequestHandler] = {}
        self._notification_handlers: list[NotificationHandler] = []
        self._event_handlers: list[tuple[EventHandler, frozenset[str] | None]] = []
        self._reconnect_handlers: list[ReconnectHandler] = []
        self.notifications: deque[tuple[str, Any]] = deque(maxlen=10_000)
        self.reconnects = 0
        self._pool = ThreadPoolExecutor(max_workers=handler_threads, thread_name_prefix="memos-client-handler")
        self._events: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._events_thread = threading.Thread(target=self._event_loop, name="memos-client-events", daemon=True)
        self._events_thread.start()
        self._closing = False
        self._link: _Link | None = None
        if reader is not None and writer is not None:
            self._start_link(Connection(reader, writer, on_close or (lambda: None)))
        else:
            assert connector is not None
            self._start_link(connector())
            if token:
                self._authenticate()

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
        handler_threads: int = 4,
    ) -> ServiceClient:
        """Start `memos-bridge serve` on stdio as a child process with its own data home."""
        connector = spawn_connector(home, extra_args=extra_args, env=env, stderr=stderr)
        return cls(
            connector=connector, reconnect=reconnect, default_timeout=default_timeout, handler_threads=handler_threads
        )

    @classmethod
    def connect_tcp(
        cls,
        host: str,
        port: int,
        *,
        timeout: float = 10.0,
        token: str | None = None,
        reconnect: bool = True,
        default_timeout: float = DEFAULT_TIMEOUT_S,
        handler_threads: int = 4,
    ) -> ServiceClient:
        """Connect to a daemon; with `token`, authenticate now and after every reconnect."""
        return cls(
            connector=tcp_connector(host, port, timeout=timeout),
            reconnect=reconnect,
            token=token,
            default_timeout=default_timeout,
            handler_threads=handler_threads,
        )

    @staticmethod
    def async_client() -> type[AsyncServiceClient]:
        """The async twin (`memos_bridge.aclient.AsyncServiceClient`), imported lazily (it needs anyio)."""
        from memos_bridge.aclient import AsyncServiceClient

        return AsyncServiceClient

    # ------------------------------------------------------------ registration

    def on_request(self, method: str, handler: RequestHandler) -> None:
        """Serve a server→client request (e.g. `host.llm.complete`); the handler gets the params.

        Handlers run on a small thread pool, so a slow host model never blocks the reader; raise
        `HandlerError(code, message)` to answer with a specific `error.data.code`.
        """
        self._handlers[method] = handler

    def on_notification(self, handler: NotificationHandler) -> None:
        """Receive every server notification `(method, params)`, in order, on the dispatcher thread."""
        self._notification_handlers.append(handler)

    def on_event(self, handler: EventHandler, types: Collection[str] | None = None) -> None:
        """Receive `events.notify` payloads (optionally only these event `type`s), in order."""
        self._event_handlers.append((handler, frozenset(types) if types is not None else None))

    def on_reconnect(self, handler: ReconnectHandler) -> None:
        """Run after every successful reconnect (e.g. to re-open sessions); errors are logged, not raised."""
        self._reconnect_handlers.append(handler)

    # ------------------------------------------------------------ calls

    @property
    def connected(self) -> bool:
        """Whether the current connection is alive (a closed one may still be re-established by a call)."""
        link = self._link
        return link is not None and not link.dead.is_set()

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are on the current connection (tests use it for malformed input)."""
        link = self._link
        if link is None:
            raise TransportClosed("not connected")
        self._write(link, data)

    def call_async(self, method: str, params: Any = None) -> Future[Any]:
        """Send a request and return a future for its result (`RpcError` / `TransportClosed` on failure)."""
        future: Future[Any] = Future()
        request_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            data = json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"
        except (TypeError, ValueError) as exc:
            future.set_exception(exc)
            return future
        for attempt in range(2):
            try:
                link = self._ensure_link(method)
            except TransportClosed as exc:
                future.set_exception(exc)
                return future
            with self._pending_lock:
                self._pending[request_id] = _Pending(method, future, link.generation)
            try:
                self._write(link, data)
                return future
            except TransportClosed as exc:
                with self._pending_lock:
                    self._pending.pop(request_id, None)
                link.dead.set()
                if attempt == 0 and self._reconnect and not self._closing:
                    continue  # never reached the service: safe to send again on a fresh connection
                future.set_exception(exc)
                return future
        return future  # pragma: no cover - the loop always returns

    def call(self, method: str, params: Any = None, timeout: float | None = None) -> Any:
        """Call and wait (`timeout` seconds, default `default_timeout`); raises `CallTimeout` when late."""
        limit = self.default_timeout if timeout is None else timeout
        future = self.call_async(method, params)
        try:
            return future.result(timeout=limit)
        except FutureTimeout as exc:
            with self._pending_lock:
                for key, pending in list(self._pending.items()):
                    if pending.future is future:
                        del self._pending[key]
            raise CallTimeout(method, limit) from exc

    def _invoke(self, method: str, params: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        result = self.call(method, params, timeout)
        return result if isinstance(result, dict) else {"result": result}

    def _invoke_nullable(self, method: str, params: dict[str, Any], timeout: float | None) -> dict[str, Any] | None:
        result = self.call(method, params, timeout)
        if result is None or isinstance(result, dict):
            return result
        return {"result": result}

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        link = self._ensure_link(method)
        self._write(link, json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")

    def close(self) -> int | None:
        """Close the connection (EOF to the service) and return the child's exit code when spawned."""
        with self._link_lock:
            self._closing = True
            link = self._link
        code = link.shut() if link is not None else None
        if link is not None and link.thread is not None:
            link.thread.join(timeout=10)
        self._fail_pending(None, "client closed")
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._events.put(None)
        return code

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ connection management

    def _start_link(self, connection: Connection) -> _Link:
        link = _Link(connection, next(self._generations))
        link.thread = threading.Thread(
            target=self._read_loop, args=(link,), name=f"memos-client-reader-{link.generation}", daemon=True
        )
        self._link = link
        self.process = connection.process
        link.thread.start()
        return link

    def _ensure_link(self, method: str) -> _Link:
        """The live connection, re-established first when it ended and reconnecting is on."""
        link = self._link
        if link is not None and not link.dead.is_set():
            return link
        reconnected = False
        with self._link_lock:
            link = self._link
            if link is not None and not link.dead.is_set():
                return link
            if self._closing:
                raise TransportClosed(f"client closed; {method} was not sent", method=method)
            if not self._reconnect or self._connector is None:
                raise TransportClosed(f"connection to memos-bridge closed; {method} was not sent", method=method)
            if link is not None:
                link.shut()  # reap the dead child / socket before replacing it
            link = self._reconnect_locked(method)
            reconnected = True
        if reconnected:
            self._run_reconnect_handlers()
        return link

    def _reconnect_locked(self, method: str) -> _Link:
        assert self._connector is not None
        last: BaseException | None = None
        for attempt in range(RECONNECT_ATTEMPTS):
            try:
                link = self._start_link(self._connector())
                if self._token:
                    self._authenticate()
                self.reconnects += 1
                logger.info("memos-bridge client reconnected (generation %d)", link.generation)
                return link
            except (OSError, RpcError, TransportClosed, CallTimeout) as exc:
                last = exc
                logger.warning("memos-bridge reconnect attempt %d failed: %s", attempt + 1, exc)
                time.sleep(RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)])
        raise TransportClosed(
            f"connection to memos-bridge closed and {RECONNECT_ATTEMPTS} reconnect attempts failed "
            f"({last}); {method} was not sent",
            method=method,
        )

    def _authenticate(self) -> None:
        link = self._link
        assert link is not None and self._token is not None
        request_id = next(self._ids)
        future: Future[Any] = Future()
        with self._pending_lock:
            self._pending[request_id] = _Pending("auth", future, link.generation)
        message = {"jsonrpc": "2.0", "id": request_id, "method": "auth", "params": {"token": self._token}}
        self._write(link, json.dumps(message).encode("utf-8") + b"\n")
        try:
            future.result(timeout=self.default_timeout)
        except FutureTimeout as exc:
            raise CallTimeout("auth", self.default_timeout) from exc

    def _run_reconnect_handlers(self) -> None:
        for handler in list(self._reconnect_handlers):
            try:
                handler()
            except Exception:
                logger.exception("memos-bridge on_reconnect handler failed")

    def _write(self, link: _Link, data: bytes) -> None:
        if link.dead.is_set():
            raise TransportClosed("connection closed")
        try:
            with self._write_lock:
                link.connection.writer.write(data)
                link.connection.writer.flush()
        except (OSError, ValueError) as exc:
            raise TransportClosed("connection closed while sending") from exc

    def _fail_pending(self, generation: int | None, reason: str) -> None:
        """Fail the calls of one connection (or all): their answers can no longer arrive."""
        with self._pending_lock:
            hit = {k: p for k, p in self._pending.items() if generation is None or p.generation == generation}
            for key in hit:
                del self._pending[key]
        for request_id, pending in hit.items():
            if not pending.future.done():
                pending.future.set_exception(
                    TransportClosed(
                        f"{reason} while {pending.method} (request {request_id}) was in flight; it may or may not "
                        "have been applied",
                        method=pending.method,
                        in_flight=True,
                    )
                )

    # ------------------------------------------------------------ reader and dispatch

    def _read_loop(self, link: _Link) -> None:
        try:
            for raw in link.connection.reader:
                line = raw.strip()
                if not line:
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                for item in message if isinstance(message, list) else [message]:
                    if isinstance(item, dict):
                        self._dispatch(item)
        except (OSError, ValueError):
            pass  # the stream ended or broke: every pending call fails below with TransportClosed
        finally:
            link.dead.set()
            self._fail_pending(link.generation, "connection to memos-bridge closed")

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message:
            if "id" in message and message["id"] is not None:
                with contextlib.suppress(RuntimeError):  # pool shut down: the client is closing
                    self._pool.submit(self._serve_request, message)
            else:
                self.notifications.append((message["method"], message.get("params")))
                self._events.put((message["method"], message.get("params")))
            return
        with self._pending_lock:
            pending = self._pending.pop(message.get("id"), None)
        if pending is None or pending.future.done():
            return
        if "error" in message:
            error = message["error"]
            pending.future.set_exception(RpcError(error if isinstance(error, dict) else {"message": str(error)}))
        else:
            pending.future.set_result(message.get("result"))

    def _event_loop(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            method, params = item
            for notification_handler in list(self._notification_handlers):
                try:
                    notification_handler(method, params)
                except Exception:
                    logger.exception("memos-bridge notification handler failed")
            if method != "events.notify" or not isinstance(params, dict):
                continue
            for handler, types in list(self._event_handlers):
                if types is not None and params.get("type") not in types:
                    continue
                try:
                    handler(params)
                except Exception:
                    logger.exception("memos-bridge event handler failed")

    def _serve_request(self, message: dict[str, Any]) -> None:
        handler = self._handlers.get(message["method"])
        if handler is None:
            reply = unhandled_reply(message)
        else:
            try:
                reply = result_reply(message, handler(message.get("params")))
            except Exception as exc:
                reply = failure_reply(message, exc)
        link = self._link
        if link is None:
            return
        data = encode_reply(message, reply)
        with contextlib.suppress(TransportClosed):
            self._write(link, data)
