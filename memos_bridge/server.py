"""Assemble and run the service: settings → storage → embedder → core → method table → transport.

Startup order matters: the database is opened (fast) before serving, but the embedding model and the
vector indexes warm up in the background after the transport is already answering, so the first
`core.health` is quick and a host's `session.open` never waits for model loading.
"""

from __future__ import annotations

import gc
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskStatus

from memos_bridge.config import Settings, ensure_home
from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.events import EventType
from memos_bridge.core.events import EventBus
from memos_bridge.core.facade import MemoryCore
from memos_bridge.embedding.factory import create_embedder
from memos_bridge.heap import run_trimmer
from memos_bridge.llm.base import LLMProvider
from memos_bridge.llm.host import HostLLM, NoLLM
from memos_bridge.rpc.handlers import build_methods
from memos_bridge.storage.database import Database
from memos_bridge.storage.priority import yield_to_interactive
from memos_bridge.transport.hub import PeerHub

log = logging.getLogger(__name__)

EVENT_QUEUE = 10_000
EVENT_BURST = 256  # events sent to the clients in one write at most


def build_llm(settings: Settings, hub: PeerHub) -> LLMProvider:
    """The host provider; with openai_compatible it is the fallback (MemoryCore builds the facade)."""
    if settings.llm.provider in ("host", "openai_compatible"):
        return HostLLM(
            hub.host_peer,
            settings.llm.timeout_ms,
            max_retries=settings.llm.max_retries,
            backoff_ms=settings.llm.retry_backoff_ms,
            backoff_max_ms=settings.llm.retry_backoff_max_ms,
        )
    return NoLLM()


async def open_core(settings: Settings, hub: PeerHub) -> MemoryCore:
    """Open the data home and build the core (migrations run here, in a worker thread)."""
    ensure_home(settings)
    db = Database(
        settings.database_url,
        busy_timeout_ms=settings.storage.busy_timeout_ms,
        read_threads=settings.storage.read_threads,
    )
    await anyio.to_thread.run_sync(db.open)
    embedder = create_embedder(settings.embedding, settings.models_dir)
    return MemoryCore(settings, db, embedder, build_llm(settings, hub), EventBus(), connections=hub.__len__)


def _forward_events(core: MemoryCore, hub: PeerHub, group: anyio.abc.TaskGroup) -> Callable[[], None]:
    """Push every core event to the clients of its namespace as `events.notify`, in emission order.

    Listeners must not block, so events go through a bounded queue to one sender task; when clients
    cannot keep up the oldest pressure is relieved by dropping new events (logged), never by stalling core.
    """
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](EVENT_QUEUE)

    async def pump() -> None:
        async with receive:
            async for params in receive:
                await yield_to_interactive()  # events can wait while a host waits on its turn.start
                burst = [params]  # what queued meanwhile goes out with it: one write per client
                while len(burst) < EVENT_BURST:
                    try:
                        burst.append(receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):  # nothing more now, or closing: send these
                        break
                await hub.send_events(burst)

    def on_event(event: CoreEventDTO) -> None:
        try:
            send.send_nowait(event.to_wire())
        except anyio.WouldBlock:
            log.warning("event queue full; dropped %s", event.type)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # shutting down

    group.start_soon(pump)
    unsubscribe = core.events.subscribe(on_event)
    core.events.on_enter(hub.join)  # a request's connection joins the namespaces it works in

    def stop() -> None:
        unsubscribe()
        send.close()

    return stop


async def _warm_up_then_freeze(core: MemoryCore) -> None:
    """Load the model and the vector indexes, then move everything alive into the collector's permanent
    generation (`gc.freeze`).

    Why: after start-up the process holds about 160,000 container objects (modules, the ONNX session's
    wrappers, SQLAlchemy's mappers and compiled statements) that live as long as the process. CPython's
    full collection walks every one of them each time it runs, about 100 ms on a 2-core machine, with the
    interpreter lock held: every request in flight stalls, and the calls that were stalled then arrive
    together. Frozen objects are no longer walked (a full collection then takes a few ms); the few of them
    that may still become garbage are a one-off, bounded cost.
    """
    await core.warmup()
    gc.collect()
    gc.freeze()


def _busy_since_last_ask(core: MemoryCore) -> Callable[[], bool]:
    """True when a turn or a learning chain ran since the last call (the heap trimmer's cue: an idle service
    freed nothing new, so trimming it again would only cost time)."""
    seen = (-1, -1)

    def ask() -> bool:
        nonlocal seen
        now = (core.learning.gate.entered, core.learning.queue.stats.chains_run)
        busy, seen = now != seen, now
        return busy

    return ask


async def _run(
    settings: Settings,
    serve: Callable[[dict[str, Any], PeerHub], Awaitable[None]],
    viewer: socket.socket | None = None,
) -> None:
    hub = PeerHub()
    core = await open_core(settings, hub)
    methods = build_methods(core)
    try:
        async with anyio.create_task_group() as group:
            unsubscribe = _forward_events(core, hub, group)
            group.start_soon(core.background.run)
            group.start_soon(core.learning.queue.run)
            group.start_soon(core.learning.recover)
            group.start_soon(core.learning.run_sweeper)
            group.start_soon(_warm_up_then_freeze, core)
            group.start_soon(core.backfill.run_forever)
            group.start_soon(core.strength.run_decay_loop)
            group.start_soon(core.run_shared)
            if settings.transport.heap_trim_interval_s > 0:
                group.start_soon(
                    partial(run_trimmer, interval_s=settings.transport.heap_trim_interval_s),
                    _busy_since_last_ask(core),
                    core.heap_trims,
                )
            core.events.emit(EventType.SYSTEM_STARTED, {"home": str(settings.home)})
            viewer_host = ViewerHost(settings, methods, core, group)
            core.viewer_launcher = viewer_host.launch
            if viewer is not None:
                url = await viewer_host.serve(viewer)
                print(f"memos-bridge: viewer on {url}", file=sys.stderr, flush=True)
            try:
                await serve(methods, hub)
            finally:
                # Accepted work (deferred writes, the learning chain) finishes before the group goes.
                with anyio.move_on_after(settings.transport.shutdown_timeout_s, shield=True):
                    await core.drain()
                unsubscribe()
                group.cancel_scope.cancel()
    finally:
        with anyio.move_on_after(settings.transport.shutdown_timeout_s, shield=True):
            await core.shutdown()
        log.info("memos-bridge stopped")


class ViewerHost:
    """The one web viewer this process serves (started with `--viewer`, or later by `viewer.start`)."""

    def __init__(self, settings: Settings, methods: dict[str, Any], core: MemoryCore, group: anyio.abc.TaskGroup):
        self._settings, self._methods, self._core, self._group = settings, methods, core, group
        self._lock = anyio.Lock()
        self.url: str | None = None

    async def serve(self, sock: socket.socket) -> str:
        from memos_bridge.viewer.runner import serve_viewer

        token = self._settings.transport.token
        url: str = await self._group.start(serve_viewer, self._methods, self._core.events.subscribe, sock, token)
        self.url = url
        return url

    async def launch(self, host: str, port: int) -> tuple[str, bool]:
        """`viewer.start`: asking again returns the running viewer's URL instead of a second one."""
        from memos_bridge.viewer.runner import bind_socket

        async with self._lock:
            if self.url is not None:
                return self.url, False
            url = await self.serve(bind_socket(host, port, self._settings.transport.token))
            log.info("viewer started on request: %s", url)
            return url, True


async def _serve_owner_socket(
    socket_path: str | None, methods: dict[str, Any], settings: Settings, hub: PeerHub, group: anyio.abc.TaskGroup
) -> None:
    """Accept processes that attach to this owner of the home (`transport/owner.py`), when it is one."""
    if socket_path is None:
        return
    from memos_bridge.transport.tcp import serve_unix

    await group.start(
        lambda task_status: serve_unix(
            socket_path, methods, settings.transport, on_peer=hub.add, task_status=task_status
        )
    )


async def run_stdio(settings: Settings, owner_socket: str | None = None, viewer: socket.socket | None = None) -> None:
    from memos_bridge.transport.stdio import serve_stdio

    async def serve(methods: dict[str, Any], hub: PeerHub) -> None:
        async with anyio.create_task_group() as group:
            await _serve_owner_socket(owner_socket, methods, settings, hub, group)
            await serve_stdio(methods, settings.transport, on_peer=hub.add)
            # This process's own host is gone; hosts attached through the home's socket keep the owner
            # alive until they leave, so an attached host is never cut off by another host's exit.
            while any(peer.transport == "local" for peer in hub.peers):
                await anyio.sleep(0.2)
            group.cancel_scope.cancel()

    await _run(settings, serve, viewer)


async def run_owner(settings: Settings, owner_socket: str | None, viewer: socket.socket | None) -> None:
    """Own the home without a host of its own (`memos-bridge viewer`): serve the home's socket, so hosts attach
    to this process, and the viewer, until SIGINT / SIGTERM."""

    async def serve(methods: dict[str, Any], hub: PeerHub) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(_stop_on_signal, group.cancel_scope)
            await _serve_owner_socket(owner_socket, methods, settings, hub, group)

    await _run(settings, serve, viewer)


async def run_tcp(
    settings: Settings,
    host: str,
    port: int,
    task_status: TaskStatus[int] | None = None,
    owner_socket: str | None = None,
    viewer: socket.socket | None = None,
) -> None:
    from memos_bridge.transport.tcp import check_bind_allowed, check_port_free, serve_tcp

    check_bind_allowed(host, settings.transport.token)  # refuse before opening anything
    check_port_free(host, port)

    async def serve(methods: dict[str, Any], hub: PeerHub) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(_stop_on_signal, group.cancel_scope)
            await _serve_owner_socket(owner_socket, methods, settings, hub, group)
            bound_port = await group.start(
                lambda task_status: serve_tcp(
                    host, port, methods, settings.transport, on_peer=hub.add, task_status=task_status
                )
            )
            log.info("memos-bridge listening on %s:%s", host, bound_port)
            print(f"memos-bridge listening on {host}:{bound_port}", flush=True)  # stdout is free in TCP mode
            if task_status is not None:
                task_status.started(bound_port)

    await _run(settings, serve, viewer)


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("signal %s: shutting down", signum)
            scope.cancel()
            return
