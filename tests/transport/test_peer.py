"""Peer and PeerHub in process, over memory streams: bounds, failure paths, output batching, hub choice."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from memos_bridge.config import TransportSettings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.transport import CallContext, MethodTable, Peer, PeerHub, RemoteError, current_peer

from .harness import Conn

pytestmark = pytest.mark.anyio


class Link:
    """A peer wired to a raw test client through memory streams."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]] | None = None) -> None:
        self.to_peer, self._peer_in = anyio.create_memory_object_stream[bytes](math.inf)
        self._peer_out, self.from_peer = anyio.create_memory_object_stream[bytes](math.inf)
        self.chunks_read = 0
        self.writes: list[bytes] = []
        self._send_override = send

    async def peer_receive(self) -> bytes:
        try:
            chunk = await self._peer_in.receive()
        except anyio.EndOfStream:
            return b""
        self.chunks_read += 1
        return chunk

    async def peer_send(self, data: bytes) -> None:
        if self._send_override is not None:
            await self._send_override(data)
        self.writes.append(data)
        await self._peer_out.send(data)

    def client(self) -> Conn:
        async def receive() -> bytes:
            try:
                return await self.from_peer.receive()
            except anyio.EndOfStream:
                return b""

        return Conn(self.to_peer.send, receive, self.to_peer.aclose)


def transport_settings(**values: Any) -> TransportSettings:
    return TransportSettings.model_validate({"shutdown_timeout_s": 2.0, **values})


@asynccontextmanager
async def serving(
    methods: dict[str, Any], link: Link | None = None, **settings: Any
) -> AsyncIterator[tuple[Peer, Conn, Link]]:
    link = link or Link()
    options = transport_settings(**settings)
    peer = Peer(link.peer_receive, link.peer_send, methods, options, connection_id="mem")
    async with anyio.create_task_group() as group:
        group.start_soon(peer.serve)
        while not peer.is_alive:
            await anyio.sleep(0)
        yield peer, link.client(), link
        await link.to_peer.aclose()
        with anyio.fail_after(5):
            while not peer.is_closed:
                await anyio.sleep(0.01)


async def ping(ctx: CallContext) -> str:
    return "pong"


async def test_concurrency_bound_backlog_then_back_pressure() -> None:
    release = anyio.Event()
    started = 0

    async def hold(ctx: CallContext) -> str:
        nonlocal started
        started += 1
        await release.wait()
        return "done"

    async with serving({"hold": hold}, max_concurrent_requests=2) as (peer, conn, link):
        for i in range(50):
            await conn.request("hold", id=i)
        await anyio.sleep(0.2)
        assert started == 2 and peer.inflight == 2
        assert link.chunks_read == 2 + 32  # two running, 32 parked, then reading stopped
        release.set()
        ids = sorted([(await conn.recv())["id"] for _ in range(50)])
        assert ids == list(range(50)) and started == 50


async def test_host_reply_is_read_while_requests_are_parked() -> None:
    """At the bound, the reply that unblocks the running request must still get through."""

    async def ask(ctx: CallContext) -> Any:
        return await ctx.peer.request("host.llm.complete", {"q": 1}, timeout=5)

    async with serving({"ask": ask, "ping": ping}, max_concurrent_requests=1) as (_, conn, _link):
        await conn.request("ask", id="ask")
        host_request = await conn.recv()
        await conn.request("ping", id="parked")  # waits for the slot held by `ask`
        await conn.send({"jsonrpc": "2.0", "id": host_request["id"], "result": {"text": "ok"}})
        replies = {r["id"]: r for r in [await conn.recv(), await conn.recv()]}
        assert replies["ask"]["result"] == {"text": "ok"} and replies["parked"]["result"] == "pong"


async def test_requests_and_notifications_after_close_fail_at_once() -> None:
    async with serving({"ping": ping}) as (peer, conn, _link):
        assert (await conn.call("ping"))["result"] == "pong"
    assert peer.is_closed and not peer.is_alive
    for attempt in (peer.request("x"), peer.notify("x")):
        with pytest.raises(MemosError) as info:
            await attempt
        assert info.value.code is ErrorCode.TRANSPORT_CLOSED


async def test_write_failure_ends_the_connection_and_fails_pending_requests() -> None:
    fail = False

    async def send(data: bytes) -> None:
        if fail:
            raise anyio.BrokenResourceError

    outcome: list[BaseException] = []

    async def ask(ctx: CallContext) -> Any:
        try:
            return await ctx.peer.request("host.llm.complete", timeout=30)
        except MemosError as err:
            outcome.append(err)
            raise

    link = Link(send)
    peer = Peer(link.peer_receive, link.peer_send, {"ask": ask, "ping": ping}, transport_settings())
    conn = link.client()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(peer.serve)
            await conn.request("ask")
            await conn.recv()  # the host request went out
            fail = True
            await conn.request("ping")  # its reply cannot be written: the peer gives up
            while not peer.is_closed:
                await anyio.sleep(0.01)
    assert isinstance(outcome[0], MemosError) and outcome[0].code is ErrorCode.TRANSPORT_CLOSED


async def test_writer_batches_queued_replies() -> None:
    async def slow_send(data: bytes) -> None:
        await anyio.sleep(0.05)

    link = Link(slow_send)
    async with serving({"ping": ping}, link) as (_, conn, _link):
        await conn.send_raw(b"".join(b'{"jsonrpc":"2.0","method":"ping","id":%d}\n' % i for i in range(200)))
        ids = [(await conn.recv())["id"] for _ in range(200)]
        assert sorted(ids) == list(range(200))
    assert len(link.writes) <= 10  # one write per accumulated batch, not one per reply
    assert all(w.endswith(b"\n") for w in link.writes)


async def test_current_peer_is_set_only_while_a_method_runs() -> None:
    seen: list[Any] = []

    async def probe(ctx: CallContext) -> bool:
        seen.append(current_peer.get())
        return current_peer.get() is ctx.peer

    async with serving({"probe": probe}) as (peer, conn, _link):
        assert (await conn.call("probe"))["result"] is True
        assert current_peer.get() is None
    assert seen == [peer]


async def test_serve_runs_once() -> None:
    async with serving({"ping": ping}) as (peer, _conn, _link):
        with pytest.raises(RuntimeError):
            await peer.serve()


def test_method_table_rejects_sync_functions_and_the_reserved_name() -> None:
    def sync_method(ctx: CallContext) -> str:
        return "blocks the loop"

    with pytest.raises(TypeError):
        MethodTable({"sync": sync_method})  # type: ignore[dict-item]
    with pytest.raises(ValueError):
        MethodTable({"auth": ping})
    assert "ping" in MethodTable({"ping": ping}) and "auth" in MethodTable({})


def test_remote_error_code_mapping() -> None:
    remote = {"code": -32000, "message": "t", "data": {"code": "llm_timeout"}}
    timeout = RemoteError("host.llm.complete", remote)
    assert timeout.code is ErrorCode.LLM_TIMEOUT and timeout.error["message"] == "t"
    # Codes that would change the numeric meaning for our own caller, and junk, become `internal`.
    for error in ({"code": -32601, "data": {"code": "unknown_method"}}, {"code": 1}, "junk", None):
        assert RemoteError("m", error).code is ErrorCode.INTERNAL


async def test_hub_tracks_peers_chooses_the_host_and_broadcasts() -> None:
    hub = PeerHub()
    chosen: list[Peer | None] = []

    async def choose(ctx: CallContext) -> str:
        chosen.append(hub.host_peer())
        return ctx.connection_id

    links = [Link(), Link()]
    peers = [
        Peer(link.peer_receive, link.peer_send, {"choose": choose}, transport_settings(), connection_id=name)
        for name, link in zip(("p0", "p1"), links, strict=True)
    ]
    conns = [link.client() for link in links]
    async with anyio.create_task_group() as group:
        for peer in peers:
            hub.add(peer)
            group.start_soon(peer.serve)
        await anyio.sleep(0.01)
        assert len(hub) == 2
        await conns[1].call("choose")
        await conns[0].call("choose")
        assert chosen == [peers[1], peers[0]]  # inside a request: that request's own peer
        assert hub.host_peer() is peers[0]  # outside: the most recently active
        await conns[1].call("choose")
        assert hub.host_peer() is peers[1]

        assert await hub.emit_event("episode.closed", {"id": "ep_1"}) == 2
        events = [await conn.recv() for conn in conns]
        assert events[0] == events[1] and events[0]["params"]["seq"] == 1

        await links[1].to_peer.aclose()
        with anyio.fail_after(5):
            while len(hub) != 1:
                await anyio.sleep(0.01)
        assert hub.host_peer() is peers[0] and hub.peers == [peers[0]]
        assert await hub.broadcast("events.notify", {"type": "x"}) == 1
        await links[0].to_peer.aclose()
    assert hub.host_peer() is None and await hub.broadcast("events.notify") == 0


async def test_hub_fan_out_sends_a_burst_as_one_chunk_and_skips_a_peer_that_stopped_reading() -> None:
    """Events go out as one write per peer; a peer whose reader is stuck misses them instead of stalling us."""
    hub = PeerHub()
    unblock = anyio.Event()

    async def stuck_send(_data: bytes) -> None:
        await unblock.wait()

    links = [Link(), Link(send=stuck_send)]
    peers = [
        Peer(link.peer_receive, link.peer_send, {}, transport_settings(), connection_id=name)
        for name, link in zip(("reading", "stuck"), links, strict=True)
    ]
    async with anyio.create_task_group() as group:
        for peer in peers:
            hub.add(peer)
            group.start_soon(peer.serve)
        await anyio.sleep(0.01)

        burst = [{"type": "t", "n": n} for n in range(3)]
        assert await hub.broadcast_many("events.notify", burst) == 2
        conn = links[0].client()
        got = [await conn.recv() for _ in burst]
        assert [m["params"]["n"] for m in got] == [0, 1, 2] and all(m["method"] == "events.notify" for m in got)
        assert len(links[0].writes) == 1  # the burst was one chunk, one write

        # Fill the stuck peer's output past its high-water mark; from then on it is skipped, without waiting.
        big = {"type": "big", "blob": "x" * (5 << 20)}
        with anyio.fail_after(2):
            assert await hub.broadcast("events.notify", big) == 2
            await anyio.sleep(0.05)  # the reading peer writes it out; the stuck one cannot
            assert await hub.broadcast("events.notify", {"type": "after"}) == 1
        assert peers[1].events_dropped == 1 and peers[0].events_dropped == 0
        assert (await conn.recv())["params"]["type"] == "big"
        assert (await conn.recv())["params"]["type"] == "after"

        unblock.set()
        for link in links:
            await link.to_peer.aclose()
