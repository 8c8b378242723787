"""How the viewer reads and changes memory: the owner's own method table, called in-process.

The viewer runs inside the process that owns the data home, so it calls exactly the handlers a JSON-RPC
client reaches (same validation, same redaction, same scoping, same DTOs) without a socket in between. It
is the operator's view: it may read every namespace (`namespace: "*"`) because the viewer authenticates its
own users (a loopback bind, or the token at its login page) before any page is shown.

Live activity comes from the core's event bus: every event is kept in a bounded ring with a sequence
number, so a browser that reconnects with `Last-Event-ID` gets what it missed (as long as it is still in
the ring) and then follows live.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import ValidationError

from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.errors import MemosError

#: Events kept for browsers that reconnect (`Last-Event-ID`).
EVENT_RING = 2000


@dataclass(frozen=True)
class ViewerCallContext:
    """The call context of the viewer's in-process calls (`rpc/handlers.py` reads `transport`)."""

    transport: str = "viewer"
    connection_id: str = "viewer"
    authenticated: bool = True
    peer: Any = None


class ViewerError(Exception):
    """A method refused the viewer's call: `message` is shown on the page, `code` is the service's code."""

    def __init__(self, message: str, code: str = "invalid_params") -> None:
        super().__init__(message)
        self.message, self.code = message, code


@dataclass
class LiveEvents:
    """The ring of recent core events and the browsers following them."""

    ring: deque[tuple[int, dict[str, Any]]] = field(default_factory=lambda: deque(maxlen=EVENT_RING))
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _waiters: list[anyio.Event] = field(default_factory=list)

    def publish(self, event: Mapping[str, Any]) -> None:
        """Called by the event bus (must not block)."""
        self.ring.append((next(self._ids), dict(event)))
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()

    def since(self, last_id: int) -> list[tuple[int, dict[str, Any]]]:
        return [(event_id, event) for event_id, event in self.ring if event_id > last_id]

    async def follow(
        self, last_id: int, *, heartbeat_s: float = 15.0
    ) -> AsyncIterator[tuple[int, dict[str, Any]] | None]:
        """Events after `last_id`, then each new one as it comes (`None` = nothing for `heartbeat_s`)."""
        while True:
            backlog = self.since(last_id)
            for event_id, event in backlog:
                last_id = event_id
                yield event_id, event
            if backlog:
                continue
            waiter = anyio.Event()
            self._waiters.append(waiter)
            with anyio.move_on_after(heartbeat_s):
                await waiter.wait()
            if not waiter.is_set():
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                yield None


class Backend:
    """`call(method, params)` → the method's result as wire JSON (camelCase dicts), or `ViewerError`."""

    def __init__(
        self,
        methods: Mapping[str, Callable[..., Any]],
        subscribe: Callable[[Callable[[CoreEventDTO], None]], Callable[[], None]] | None = None,
    ) -> None:
        self._methods = methods
        self._ctx = ViewerCallContext()
        self.events = LiveEvents()
        self._unsubscribe = subscribe(lambda event: self.events.publish(event.to_wire())) if subscribe else None

    async def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        handler = self._methods.get(method)
        if handler is None:
            raise ViewerError(f"unknown method {method}", "unknown_method")
        try:
            outcome = await handler(self._ctx, **dict(params or {}))
        except MemosError as exc:
            raise ViewerError(exc.message, str(exc.code)) from exc
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}" for e in exc.errors())
            raise ViewerError(problems) from exc
        result = outcome._value.result  # jsonrpcserver's Success (an Either): the handler's JSON-ready value
        return json.loads(json.dumps(result)) if result is not None else None

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
