"""`Peer`: one JSON-RPC connection, in both directions.

The same connection carries the client's requests to us and our requests to the client (the host answers
`host.llm.complete`), so a peer is symmetric: it dispatches incoming requests and resolves incoming
responses against the requests it sent. jsonrpcserver is only a dispatcher, which is why the sorting of
incoming lines happens here.

Concurrency model (the same shape as pygls / python-lsp-server, plus bounds):

* one reader task frames and parses lines and routes them; responses are resolved inline, so a reply from
  the host is never stuck behind requests;
* each request (or batch) runs in its own task, at most `max_concurrent_requests` at a time. Past the
  bound, requests are parked in a short backlog and the reader keeps reading, because the line that would
  free a slot may be the host's answer to one of the running requests; once the backlog is full as well,
  the reader stops reading (back-pressure on the client);
* one writer task owns the output (`outbox.Outbox`): whole encoded lines, never interleaved, written in
  batches.

End of input: reading stops, our pending requests fail at once (their replies can no longer arrive),
running requests get `shutdown_timeout_s` to finish and are then cancelled, queued output is flushed
(also bounded), and `serve()` returns.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup

from memos_bridge.config import TransportSettings
from memos_bridge.contract.errors import SERVER_ERROR, ErrorCode, MemosError, jsonrpc_code
from memos_bridge.transport.context import CallContext
from memos_bridge.transport.dispatch import (
    AUTH_METHOD,
    Method,
    MethodTable,
    dispatch,
    encode_message,
    encode_notification,
    encode_reply,
    parse_error_response,
    prepare_methods,
    too_large_response,
)
from memos_bridge.transport.framing import ByteSource, LineReader, Oversized
from memos_bridge.transport.limits import parse_int
from memos_bridge.transport.outbox import ByteSink, Outbox

logger = logging.getLogger(__name__)

MAX_AUTH_FAILURES = 3
_BACKLOG_LINES = 32
_UNPARSABLE = object()


class RemoteError(MemosError):
    """The other side answered one of our requests with a JSON-RPC error.

    It is a `MemosError` so that an unhandled one still reaches the original caller with a meaningful
    code: the remote `data.code` when it is one of ours in the -32000 family (`llm_timeout`,
    `host_handler_busy`, ...), else `internal`. `error` holds the remote error object as received.
    """

    def __init__(self, method: str, error: Any) -> None:
        self.method = method
        self.error: dict[str, Any] = error if isinstance(error, dict) else {"message": repr(error)}
        data = self.error.get("data")
        code = _server_error_code(data.get("code") if isinstance(data, dict) else None)
        message = f"{method} failed on the remote side: {self.error.get('message', 'no message')}"
        super().__init__(code, message, {"method": method, "remote": self.error})


def _server_error_code(value: object) -> ErrorCode:
    """`value` as one of our codes of the -32000 family, else `internal`."""
    try:
        code = ErrorCode(str(value))
    except ValueError:
        return ErrorCode.INTERNAL
    return code if jsonrpc_code(code) == SERVER_ERROR else ErrorCode.INTERNAL


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


class _PendingCall:
    __slots__ = ("event", "failure", "response")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.response: dict[str, Any] | None = None
        self.failure: MemosError | None = None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _is_response(message: Any) -> bool:
    return type(message) is dict and "method" not in message and ("result" in message or "error" in message)


class Peer:
    """One connection: serves requests with `methods` and sends requests/notifications to the other side.

    `receive` returns chunks of bytes (`b""` at end of input; exceptions also count as end of input);
    `send` writes bytes. `token`, when set, makes every method but `auth` refuse until the client has
    called `auth` with it.
    """

    def __init__(
        self,
        receive: ByteSource,
        send: ByteSink,
        methods: Mapping[str, Method] | MethodTable,
        settings: TransportSettings | None = None,
        *,
        connection_id: str = "peer",
        transport: str = "stdio",
        token: str | None = None,
        id_prefix: str = "srv",
    ) -> None:
        self._receive = receive
        self._methods = prepare_methods(methods)
        self._settings = settings if settings is not None else TransportSettings.model_validate({})
        self.connection_id = connection_id
        self.transport = transport
        self.last_active = time.monotonic()
        """`time.monotonic()` of the last line received; the hub asks the most recently active host."""
        self.events_dropped = 0  # notifications skipped because this connection was not reading

        self._token_digest = hashlib.sha256(token.encode()).digest() if token is not None else None
        self._authenticated = token is None
        self._auth_failures = 0

        self._state = _State.NEW
        self._id_prefix = id_prefix
        self._ids = itertools.count(1)
        self._pending: dict[str, _PendingCall] = {}
        self._input_open = True
        self._close_requested = False
        self._inline = False
        self._read_scope: anyio.CancelScope | None = None
        self._close_callbacks: list[Callable[[Peer], object]] = []

        self._work: TaskGroup | None = None
        self._inflight = 0
        self._backlog: deque[Any] = deque()
        self._stopping = False
        self._progress_waiter: anyio.Event | None = None
        self._idle_waiter: anyio.Event | None = None

        self._outbox = Outbox(send, on_failure=self._on_output_failure, name=connection_id)

    # ----------------------------------------------------------------------------------- public state

    @property
    def is_alive(self) -> bool:
        """Serving, still reading, and able to write: a request sent now can be answered."""
        return self._state is _State.OPEN and self._input_open and self._outbox.accepting

    @property
    def is_closed(self) -> bool:
        return self._state is _State.CLOSED

    @property
    def authenticated(self) -> bool:
        """True once `auth` succeeded, or from the start when no token is required."""
        return self._authenticated

    @property
    def auth_required(self) -> bool:
        return self._token_digest is not None

    @property
    def inflight(self) -> int:
        """Requests (or batches) currently running."""
        return self._inflight

    def on_close(self, callback: Callable[[Peer], object]) -> None:
        """Call `callback(peer)` once `serve()` finishes (immediately if it already has)."""
        if self._state is _State.CLOSED:
            callback(self)
        else:
            self._close_callbacks.append(callback)

    def close(self) -> None:
        """Stop reading; `serve()` then winds down exactly as at end of input."""
        self._close_requested = True
        # The inline `auth` path runs in the reader task itself: cancelling there would lose its reply,
        # and the reader checks the flag right after it anyway.
        if self._read_scope is not None and not self._inline:
            self._read_scope.cancel()

    def authenticate(self, token: object) -> dict[str, bool]:
        """Check a token in constant time (digests of equal length); close after repeated failures."""
        if self._token_digest is None:
            return {"ok": True}
        supplied = hashlib.sha256(token.encode()).digest() if isinstance(token, str) else b""
        if hmac.compare_digest(supplied, self._token_digest):
            self._authenticated = True
            return {"ok": True}
        self._auth_failures += 1
        if self._auth_failures >= MAX_AUTH_FAILURES:
            logger.warning("connection %s: too many failed auth attempts, closing", self.connection_id)
            self.close()
            raise MemosError(ErrorCode.UNAUTHORIZED, "invalid token; closing the connection")
        raise MemosError(ErrorCode.UNAUTHORIZED, "invalid token")

    # ------------------------------------------------------------------------------ outgoing traffic

    async def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send a request to the other side and return its result.

        Raises `RemoteError` for an error reply, `MemosError(deadline_exceeded)` after `timeout` seconds
        (default `host_request_timeout_s`), `MemosError(transport_closed)` if the connection is or becomes
        closed before the reply.
        """
        if not self._input_open or not self._outbox.accepting:
            raise MemosError(ErrorCode.TRANSPORT_CLOSED, f"cannot send {method}: connection closed")
        limit = self._settings.host_request_timeout_s if timeout is None else timeout
        request_id = f"{self._id_prefix}-{next(self._ids)}"
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
        if params is not None:
            message["params"] = params
        call = _PendingCall()
        self._pending[request_id] = call
        try:
            if not await self._outbox.put(encode_message(message)):
                raise MemosError(ErrorCode.TRANSPORT_CLOSED, f"cannot send {method}: connection closed")
            with anyio.fail_after(limit):
                await call.event.wait()
        except TimeoutError:
            raise MemosError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"no reply to {method} within {limit:g} s",
                {"method": method, "timeoutS": limit},
            ) from None
        finally:
            self._pending.pop(request_id, None)
        if call.failure is not None:
            raise call.failure
        response = call.response if call.response is not None else {}
        if "error" in response:
            raise RemoteError(method, response["error"])
        return response.get("result")

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no reply expected). Raises `MemosError(transport_closed)` when closed."""
        if not await self._outbox.put(encode_notification(method, params)):
            raise MemosError(ErrorCode.TRANSPORT_CLOSED, f"cannot send {method}: connection closed")

    def notify_encoded_nowait(self, line: bytes) -> bool:
        """Queue an already encoded notification without waiting; False if it was not queued.

        For fan-out to many connections (events): one encoding for all of them, no task per connection,
        and a connection whose reader has fallen behind by more than the high-water mark misses the
        notification instead of making the sender wait (`events_dropped` counts those).
        """
        if self._outbox.backlogged:
            self.events_dropped += 1
            return False
        return self._outbox.put_nowait(line)

    # ---------------------------------------------------------------------------------------- serving

    async def serve(self) -> None:
        """Serve until end of input (or `close()`), then shut down in order. Runs once."""
        if self._state is not _State.NEW:
            raise RuntimeError("Peer.serve() can run only once")
        self._state = _State.OPEN
        try:
            async with anyio.create_task_group() as io_group:
                io_group.start_soon(self._outbox.run)
                try:
                    await self._serve_input()
                finally:
                    self._outbox.close()
                    with anyio.move_on_after(self._settings.shutdown_timeout_s):
                        await self._outbox.done.wait()
                    if not self._outbox.done.is_set():
                        logger.warning("connection %s: output not flushed in time", self.connection_id)
                    io_group.cancel_scope.cancel()
        finally:
            self._state = _State.CLOSED
            self._end_input()
            self._outbox.mark_failed()
            for callback in self._close_callbacks:
                try:
                    callback(self)
                except Exception:
                    logger.exception("close callback failed for connection %s", self.connection_id)
            self._close_callbacks.clear()

    async def _serve_input(self) -> None:
        async with anyio.create_task_group() as work:
            self._work = work
            with anyio.CancelScope() as scope:
                self._read_scope = scope
                if self._close_requested:
                    scope.cancel()
                await self._read_loop()
            self._read_scope = None
            self._end_input()
            await self._wait_idle()
            self._stopping = True
            work.cancel_scope.cancel()

    async def _read_loop(self) -> None:
        reader = LineReader(self._receive, self._settings.max_line_bytes)
        while not self._close_requested:
            try:
                line = await reader.next_line()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                logger.debug("connection %s: input failed (%r), taken as its end", self.connection_id, exc)
                return
            if line is None:
                return
            self.last_active = time.monotonic()
            if isinstance(line, Oversized):
                logger.warning(
                    "connection %s: dropped a request line of %d+ bytes (limit %d)",
                    self.connection_id,
                    line.size,
                    line.limit,
                )
                await self._outbox.put(encode_message(too_large_response(line)))
                continue
            message = await self._parse(line)
            if message is not _UNPARSABLE:
                await self._route(message)

    async def _parse(self, line: bytes) -> Any:
        try:
            text = line.decode("utf-8")
            # A byte-order mark is not JSON, but editors and some Windows tools write one; it carries nothing.
            return json.loads(text.removeprefix("\ufeff"), parse_constant=_reject_constant, parse_int=parse_int)
        except UnicodeDecodeError as exc:
            detail = f"invalid UTF-8 at byte {exc.start}"
        except json.JSONDecodeError as exc:
            detail = f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        except ValueError as exc:
            detail = f"invalid JSON: {exc}"  # our own hooks' messages (a non-JSON constant, a huge integer)
        except RecursionError:
            detail = "nesting too deep"
        await self._outbox.put(encode_message(parse_error_response(detail)))
        return _UNPARSABLE

    async def _route(self, message: Any) -> None:
        if _is_response(message):
            self._resolve(message)
        elif type(message) is list and message and all(map(_is_response, message)):
            for item in message:
                self._resolve(item)
        elif type(message) is dict and message.get("method") == AUTH_METHOD:
            # Inline, so that a client may pipeline `auth` and its first real request: the next line is
            # not read (let alone dispatched) before the authentication took effect.
            self._inline = True
            try:
                await self._handle(message)
            finally:
                self._inline = False
        elif self._inflight < self._settings.max_concurrent_requests:
            self._start(message)
        else:
            self._backlog.append(message)
            while len(self._backlog) >= _BACKLOG_LINES and not self._close_requested:
                waiter = self._progress_waiter = anyio.Event()
                await waiter.wait()

    def _resolve(self, message: dict[str, Any]) -> None:
        message_id = message.get("id")
        call = self._pending.pop(message_id, None) if isinstance(message_id, str) else None
        if call is None:
            logger.warning("connection %s: ignoring reply with unknown id %r", self.connection_id, message_id)
            return
        call.response = message
        call.event.set()

    def _start(self, message: Any) -> None:
        assert self._work is not None
        self._inflight += 1
        self._work.start_soon(self._run_request, message)

    async def _run_request(self, message: Any) -> None:
        try:
            await self._handle(message)
        finally:
            self._finish()

    def _finish(self) -> None:
        self._inflight -= 1
        if self._backlog and not self._stopping:
            self._start(self._backlog.popleft())
        if self._progress_waiter is not None:
            self._progress_waiter.set()
            self._progress_waiter = None
        if self._idle_waiter is not None and not self._inflight and not self._backlog:
            self._idle_waiter.set()
            self._idle_waiter = None

    async def _handle(self, message: Any) -> None:
        authenticated = self._authenticated
        ctx = CallContext(self, self.connection_id, self.transport, authenticated)
        table = self._methods.open if authenticated else self._methods.gated
        try:
            reply = await dispatch(message, ctx, table)
            if reply is not None:
                await self._outbox.put(encode_reply(reply))
        except Exception:  # a bug below us must not take the connection down with it
            logger.exception("connection %s: dispatch failed", self.connection_id)
        if self._close_requested and not self._inline and self._read_scope is not None:
            self._read_scope.cancel()

    async def _wait_idle(self) -> None:
        with anyio.move_on_after(self._settings.shutdown_timeout_s) as scope:
            while self._inflight or self._backlog:
                waiter = self._idle_waiter = anyio.Event()
                await waiter.wait()
        if scope.cancelled_caught:
            logger.warning(
                "connection %s: cancelling %d running and %d queued request(s) after %.1f s",
                self.connection_id,
                self._inflight,
                len(self._backlog),
                self._settings.shutdown_timeout_s,
            )

    def _end_input(self) -> None:
        """No reply can arrive any more: fail everything still waiting for one."""
        if not self._input_open:
            return
        self._input_open = False
        pending = list(self._pending.values())
        self._pending.clear()
        for call in pending:
            call.failure = MemosError(ErrorCode.TRANSPORT_CLOSED, "connection closed before the reply came")
            call.event.set()

    def _on_output_failure(self, exc: BaseException) -> None:
        """Nothing can be written any more, so there is no point in reading either."""
        self.close()
