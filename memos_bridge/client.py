"""A small synchronous JSON-RPC client for memos-bridge (stdio subprocess or TCP).

Used by the demo, the benchmarks and the end-to-end tests, and by adapters that want a blocking API. It
matches responses by id (the service answers out of order), serves server→client requests such as
`host.llm.complete` through registered handlers on a worker pool, and fails every in-flight call with
`TransportClosed` the moment the connection ends.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import IO, Any

RequestHandler = Callable[[Any], Any]
NotificationHandler = Callable[[str, Any], None]


class RpcError(Exception):
    """The service answered with a JSON-RPC error."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        self.code: int = int(error.get("code", 0))
        self.data: Any = error.get("data")
        self.message: str = str(error.get("message", ""))
        self.memos_code: str | None = self.data.get("code") if isinstance(self.data, dict) else None
        super().__init__(f"{self.code} {self.memos_code or ''}: {self.message}")


class TransportClosed(ConnectionError):
    """The connection ended before the answer arrived."""


class ServiceClient:
    def __init__(
        self,
        reader: IO[bytes],
        writer: IO[bytes],
        *,
        on_close: Callable[[], int | None] | None = None,
        handler_threads: int = 4,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._on_close = on_close
        self._ids = itertools.count(1)
        self._pending: dict[Any, Future[Any]] = {}
        self._pending_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._handlers: dict[str, RequestHandler] = {}
        self._notification_handlers: list[NotificationHandler] = []
        self.notifications: deque[tuple[str, Any]] = deque(maxlen=10_000)
        self._pool = ThreadPoolExecutor(max_workers=handler_threads, thread_name_prefix="memos-client-handler")
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read_loop, name="memos-client-reader", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ construction

    @classmethod
    def spawn(
        cls,
        home: str | Path,
        *,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        stderr: Any = None,
    ) -> ServiceClient:
        """Start `memos-bridge serve` on stdio as a child process with its own data home."""
        child_env = {**os.environ, **(env or {}), "MEMOS_BRIDGE_HOME": str(home)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "memos_bridge", "serve", "--home", str(home), *(extra_args or [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            env=child_env,
        )
        assert proc.stdin is not None and proc.stdout is not None

        def close() -> int | None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
            try:
                return proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait()

        client = cls(proc.stdout, proc.stdin, on_close=close)
        client.process = proc
        return client

    @classmethod
    def connect_tcp(cls, host: str, port: int, *, timeout: float = 10.0) -> ServiceClient:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.settimeout(None)
        reader = sock.makefile("rb")
        writer = sock.makefile("wb")

        def close() -> None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            return None

        return cls(reader, writer, on_close=close)

    process: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------ API

    def on_request(self, method: str, handler: RequestHandler) -> None:
        """Serve a server→client request (e.g. `host.llm.complete`); the handler gets the params."""
        self._handlers[method] = handler

    def on_notification(self, handler: NotificationHandler) -> None:
        self._notification_handlers.append(handler)

    def send_raw(self, data: bytes) -> None:
        with self._write_lock:
            self._writer.write(data)
            self._writer.flush()

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self.send_raw(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")
        except (OSError, ValueError) as exc:
            raise TransportClosed("connection closed") from exc

    def call_async(self, method: str, params: Any = None) -> Future[Any]:
        request_id = next(self._ids)
        future: Future[Any] = Future()
        with self._pending_lock:
            if self._closed.is_set():
                future.set_exception(TransportClosed("connection closed"))
                return future
            self._pending[request_id] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            self._send(message)
        except TransportClosed as exc:
            with self._pending_lock:
                self._pending.pop(request_id, None)
            future.set_exception(exc)
        return future

    def call(self, method: str, params: Any = None, timeout: float = 60.0) -> Any:
        future = self.call_async(method, params)
        try:
            return future.result(timeout=timeout)
        except FutureTimeout as exc:
            raise TimeoutError(f"{method} did not answer within {timeout}s") from exc

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def close(self) -> int | None:
        """Close the connection (EOF to the service) and return the child's exit code when spawned."""
        with contextlib.suppress(OSError):
            self._writer.close()
        code = self._on_close() if self._on_close else None
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        return code

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ reader

    def _read_loop(self) -> None:
        try:
            for raw in self._reader:
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
            self._closed.set()
            with self._pending_lock:
                pending, self._pending = self._pending, {}
            for future in pending.values():
                if not future.done():
                    future.set_exception(TransportClosed("connection closed before the answer"))

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message:
            if "id" in message and message["id"] is not None:
                self._pool.submit(self._serve_request, message)
            else:
                self.notifications.append((message["method"], message.get("params")))
                for handler in self._notification_handlers:
                    handler(message["method"], message.get("params"))
            return
        with self._pending_lock:
            future = self._pending.pop(message.get("id"), None)
        if future is None:
            return
        if "error" in message:
            future.set_exception(RpcError(message["error"]))
        else:
            future.set_result(message.get("result"))

    def _serve_request(self, message: dict[str, Any]) -> None:
        handler = self._handlers.get(message["method"])
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if handler is None:
            reply["error"] = {"code": -32601, "message": f"no handler for {message['method']}"}
        else:
            try:
                reply["result"] = handler(message.get("params"))
            except Exception as exc:
                reply["error"] = {"code": -32000, "message": str(exc)}
        with contextlib.suppress(TransportClosed):
            self._send(reply)
