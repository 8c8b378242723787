"""TCP specifics: many connections, isolation, broadcast, token authentication, bind policy."""

from __future__ import annotations

import socket
import sys
import time
from functools import partial

import anyio
import pytest

from memos_bridge.config import TransportSettings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.transport import serve_tcp
from memos_bridge.transport.tcp import is_loopback_host

from .harness import TOY_SERVER, subprocess_env, tcp_conn, tcp_server
from .test_protocol import assert_error

pytestmark = pytest.mark.anyio
TOKEN = "s3cret-token"


def settings(**values: object) -> TransportSettings:
    return TransportSettings.model_validate({"shutdown_timeout_s": 5.0, **values})


async def test_two_clients_are_served_concurrently_and_independently() -> None:
    async with tcp_server() as server:
        a, b = await server.connect(), await server.connect()
        who_a, who_b = (await a.call("whoami"))["result"], (await b.call("whoami"))["result"]
        assert who_a["connectionId"] != who_b["connectionId"] and who_a["transport"] == "tcp"
        started = time.monotonic()
        await a.request("sleep", {"seconds": 0.5}, id="a")
        await b.request("sleep", {"seconds": 0.5}, id="b")
        assert (await a.recv())["id"] == "a"
        assert (await b.recv())["id"] == "b"
        assert time.monotonic() - started < 0.9


async def test_events_reach_every_connected_client() -> None:
    async with tcp_server() as server:
        a, b = await server.connect(), await server.connect()
        await b.call("ping")  # b is registered before the event is emitted
        await a.request("emit", {"type": "skill.crystallized", "payload": {"id": "sk_1"}}, id=1)
        messages = [await a.recv(), await a.recv()]
        event_a = next(m for m in messages if m.get("method") == "events.notify")
        assert next(m for m in messages if "id" in m)["result"] == {"delivered": 2}
        event_b = await b.recv()
        assert event_b == event_a and event_b["params"]["type"] == "skill.crystallized"


async def test_a_broken_client_does_not_affect_others() -> None:
    async with tcp_server() as server:
        healthy = await server.connect()
        await healthy.request("sleep", {"seconds": 0.3}, id="survivor")
        for _ in range(3):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(b'{"jsonrpc":"2.0","method":"sleep","params":{"seconds":0.2},"id":1}\n{"jsonrpc":')
            # RST instead of FIN: the server sees a reset while a request is running and a line is half-read.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
        assert (await healthy.recv())["id"] == "survivor"
        assert (await healthy.call("ping"))["result"] == "pong"
        fresh = await server.connect()
        assert (await fresh.call("ping"))["result"] == "pong"
        await anyio.sleep(0.3)
        assert server.hub is not None and len(server.hub) == 2  # the dead ones left the hub


async def test_token_required_before_anything_else() -> None:
    async with tcp_server(settings(token=TOKEN)) as server:
        conn = await server.connect()
        for method in ("ping", "no.such.method", "echo"):
            error = assert_error(await conn.call(method, [1, 2, 3]), -32000, "unauthorized", conn.last_id)
            assert "auth" in error["message"]
        assert (await conn.call("whoami"))["error"]["data"]["code"] == "unauthorized"
        assert_error(await conn.call("auth", {"token": "wrong"}), -32000, "unauthorized", conn.last_id)
        assert_error(await conn.call("auth", {}), -32000, "unauthorized", conn.last_id)
        assert (await conn.call("auth", {"token": TOKEN}))["result"] == {"ok": True}
        assert (await conn.call("ping"))["result"] == "pong"
        assert (await conn.call("whoami"))["result"]["authenticated"] is True
        assert (await conn.call("no.such.method"))["error"]["code"] == -32601
        # Authentication is per connection.
        other = await server.connect()
        assert (await other.call("ping"))["error"]["data"]["code"] == "unauthorized"


async def test_auth_can_be_pipelined_with_the_first_request() -> None:
    async with tcp_server(settings(token=TOKEN)) as server:
        conn = await server.connect()
        await conn.send_raw(
            b'{"jsonrpc":"2.0","method":"auth","params":{"token":"%s"},"id":1}\n'
            b'{"jsonrpc":"2.0","method":"ping","id":2}\n' % TOKEN.encode()
        )
        replies = {r["id"]: r for r in [await conn.recv(), await conn.recv()]}
        assert replies[1]["result"] == {"ok": True} and replies[2]["result"] == "pong"


async def test_three_failed_auth_attempts_close_the_connection() -> None:
    async with tcp_server(settings(token=TOKEN)) as server:
        conn = await server.connect()
        for attempt in (1, 2, 3):
            await conn.request("auth", {"token": f"guess-{attempt}"}, id=attempt)
        for attempt in (1, 2, 3):
            error = assert_error(await conn.recv(), -32000, "unauthorized", attempt)
        assert "closing" in error["message"]
        await conn.expect_eof(timeout=3)
        assert (await (await server.connect()).call("auth", {"token": TOKEN}))["result"] == {"ok": True}


async def test_auth_without_a_configured_token_just_succeeds() -> None:
    async with tcp_server() as server:
        conn = await server.connect()
        assert (await conn.call("auth", {"token": "anything"}))["result"] == {"ok": True}
        assert (await conn.call("whoami"))["result"]["authenticated"] is True


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.168.1.10", "example.org"])
async def test_non_loopback_bind_without_token_is_refused(host: str) -> None:
    with pytest.raises(MemosError) as info:
        await serve_tcp(host, 0, {}, settings())
    assert info.value.code is ErrorCode.CONFIG_INVALID


async def test_non_loopback_bind_with_token_starts() -> None:
    async with anyio.create_task_group() as group:
        port = await group.start(partial(serve_tcp, "0.0.0.0", 0, {}, settings(token=TOKEN)))
        conn = tcp_conn(await anyio.connect_tcp("127.0.0.1", port))
        assert (await conn.call("auth", {"token": TOKEN}))["result"] == {"ok": True}
        group.cancel_scope.cancel()


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback_host(host), host
    for other in ("0.0.0.0", "::", "", None, "10.0.0.1", "myhost", "localhost.example.org"):
        assert not is_loopback_host(other), other


async def test_toy_server_subprocess_over_tcp() -> None:
    """The same server as a real daemon process: two clients, then a clean stop."""
    async with await anyio.open_process(
        [sys.executable, str(TOY_SERVER), "--tcp", "127.0.0.1:0"], env=subprocess_env()
    ) as process:
        assert process.stdout is not None
        with anyio.fail_after(10):
            banner = b""
            while not banner.endswith(b"\n"):
                banner += await process.stdout.receive(1)
        port = int(banner.split()[1])
        a = tcp_conn(await anyio.connect_tcp("127.0.0.1", port))
        b = tcp_conn(await anyio.connect_tcp("127.0.0.1", port))
        await a.request("sleep", {"seconds": 0.3}, id="a")
        assert (await b.call("ping"))["result"] == "pong"
        assert (await a.recv())["result"] == {"slept": 0.3}
        assert (await a.call("print_stray"))["result"] == "printed"
        process.terminate()
        with anyio.fail_after(5):
            await process.wait()


async def test_refusal_from_the_subprocess_entry_point() -> None:
    result = await anyio.run_process(
        [sys.executable, str(TOY_SERVER), "--tcp", "0.0.0.0:0"], env=subprocess_env(), check=False
    )
    assert result.returncode == 2
    assert b"without a token" in result.stderr
