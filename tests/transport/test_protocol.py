"""End-to-end protocol behaviour, identical over stdio (a real subprocess) and TCP (a real socket)."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import pytest

from .harness import Conn, open_conn

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("kind", ["stdio", "tcp"])]


def assert_error(reply: dict[str, Any], code: int, data_code: str, id: Any) -> dict[str, Any]:
    assert reply["jsonrpc"] == "2.0" and reply["id"] == id and "result" not in reply, reply
    error = reply["error"]
    assert error["code"] == code, reply
    assert error["data"]["name"] == "MemosError" and error["data"]["code"] == data_code, reply
    assert isinstance(error["data"]["message"], str)
    return dict(error)


async def test_ping_echo_and_pydantic_result(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        assert await conn.call("ping") == {"jsonrpc": "2.0", "result": "pong", "id": 1}
        reply = await conn.call("echo", {"text": "héllo 中文", "n": [1, 2.5, None]})
        assert reply["result"] == {"text": "héllo 中文", "n": [1, 2.5, None]}
        reply = await conn.call("validate", {"name": "a", "count": 2, "nested": {"ok": True}})
        assert reply["result"] == {"name": "a", "count": 2, "nested": {"ok": True}}
        await conn.send({"jsonrpc": "2.0", "method": "ping", "id": "str-id"})
        assert (await conn.recv())["id"] == "str-id"


async def test_blank_lines_and_crlf(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.send_raw(b'\n   \n\t\r\n{"jsonrpc":"2.0","method":"ping","id":1}\r\n\r\n')
        await conn.send_raw(b'{"jsonrpc":"2.0","method":"echo","params":{"a":"x\\r"},"id":2}\n')
        assert (await conn.recv())["id"] == 1
        assert (await conn.recv())["result"] == {"a": "x\r"}
        await conn.expect_silence(0.2)  # the blank lines got no error replies


async def test_trailing_line_without_newline_is_answered_at_eof(kind: str) -> None:
    async with open_conn(kind) as (conn, server):
        await conn.send_raw(b'{"jsonrpc":"2.0","method":"ping","id":7}')
        await anyio.sleep(0.1)
        await conn.close_input()
        assert await conn.recv() == {"jsonrpc": "2.0", "result": "pong", "id": 7}
        await conn.expect_eof()
        if server is not None:
            assert await server.wait() == 0


async def test_parse_errors(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        bad_lines = [
            b'{"jsonrpc":"2.0","method":"ping",',
            b'{"jsonrpc":"2.0","method":"echo","params":{"a":"\xff\xfe"},"id":1}',  # invalid UTF-8
            b'{"jsonrpc":"2.0","method":"echo","params":{"a":NaN},"id":2}',  # not JSON
            b'{"jsonrpc":"2.0","method":"ping","id":' + b"9" * 5000 + b"}",  # an integer literal nobody can hold
        ]
        for line in bad_lines:
            await conn.send_raw(line + b"\n")
            error = assert_error(await conn.recv(), -32700, "protocol_error", None)
            assert error["message"] == "Parse error"
            assert "sys.set_int_max_str_digits" not in error["data"]["message"]
        # A byte-order mark carries nothing: the request after it is served.
        await conn.send_raw(b'\xef\xbb\xbf{"jsonrpc":"2.0","method":"ping","id":"bom"}\n')
        assert (await conn.recv())["result"] == "pong"
        assert (await conn.call("ping"))["result"] == "pong"


async def test_invalid_requests(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        invalid: list[Any] = [
            [],
            42,
            "ping",
            {"jsonrpc": "1.0", "method": "ping", "id": 1},
            {"method": "ping", "id": 1},
            {"jsonrpc": "2.0", "method": 5, "id": 1},
            {"jsonrpc": "2.0", "method": "ping", "id": True},
            {"jsonrpc": "2.0", "method": "ping", "id": 1, "extra": 1},
            {"jsonrpc": "2.0", "method": "echo", "params": "x", "id": 1},
        ]
        for message in invalid:
            await conn.send(message)
            error = assert_error(await conn.recv(), -32600, "protocol_error", None)
            assert error["message"] == "Invalid request"
        # A batch of invalid members: one error per member (JSON-RPC 2.0, "invalid but not empty" batch).
        await conn.send([1, 2])
        replies = await conn.recv()
        assert isinstance(replies, list) and len(replies) == 2
        for reply in replies:
            assert assert_error(reply, -32600, "protocol_error", None)["message"] == "Invalid request"
        assert (await conn.call("ping"))["result"] == "pong"


async def test_unknown_method(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        error = assert_error(await conn.call("no.such.method"), -32601, "unknown_method", 1)
        assert error["message"] == "Method not found"
        assert error["data"]["message"] == "unknown method: no.such.method"


async def test_invalid_params(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        assert_error(await conn.call("echo", [1, 2]), -32602, "invalid_argument", 1)  # positional
        error = assert_error(await conn.call("sleep", {}), -32602, "invalid_argument", 2)
        assert "seconds" in error["data"]["message"]
        assert_error(await conn.call("ping", {"unexpected": 1}), -32602, "invalid_argument", 3)
        reply = await conn.call("validate", {"name": "", "count": -1, "nested": {}})
        error = assert_error(reply, -32602, "invalid_argument", 4)
        assert error["message"].startswith("invalid params: ")
        assert "nested.ok: Field required" in error["message"]
        errors = error["data"]["details"]["errors"]
        assert {e["loc"] for e in errors} == {"name", "count", "nested.ok"}
        assert all(set(e) == {"loc", "msg", "type"} for e in errors)


async def test_memos_error_keeps_code_message_details(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        error = assert_error(await conn.call("fail_memos"), -32000, "session_not_found", 1)
        assert error["message"] == "session se_missing not found"
        assert error["data"]["details"] == {"sessionId": "se_missing"}


async def test_internal_errors_hide_their_text(kind: str) -> None:
    async with open_conn(kind) as (conn, server):
        await conn.request("crash")
        raw = await conn.recv_line()
        assert b"secret" not in raw and b"RuntimeError" not in raw and b"Traceback" not in raw
        error = assert_error(json.loads(raw), -32000, "internal", 1)
        assert error["data"] == {"name": "MemosError", "code": "internal", "message": "internal error"}
        assert_error(await conn.call("bad_result"), -32000, "internal", 2)  # result JSON cannot carry
        assert (await conn.call("ping"))["result"] == "pong"
        if server is not None:
            await conn.close_input()
            assert await server.wait() == 0
            log = server.stderr()
            assert "secret internal detail" in log and "Traceback" in log  # logged, not sent


async def test_oversized_line_is_refused_and_the_next_one_served(kind: str) -> None:
    async with open_conn(kind, max_line_bytes=1024) as (conn, _):
        big = json.dumps({"jsonrpc": "2.0", "method": "echo", "params": {"x": "a" * 5000}, "id": 1}).encode()
        await conn.send_raw(big + b"\n")
        error = assert_error(await conn.recv(), -32600, "payload_too_large", None)
        assert error["message"] == "Request too large"
        assert error["data"]["details"] == {"limit": 1024}
        # A 2 MB line trickled in pieces is dropped as it arrives, then service resumes.
        for _ in range(32):
            await conn.send_raw(b"b" * 65536)
        await conn.send_raw(b'\n{"jsonrpc":"2.0","method":"ping","id":2}\n')
        assert_error(await conn.recv(), -32600, "payload_too_large", None)
        assert (await conn.recv()) == {"jsonrpc": "2.0", "result": "pong", "id": 2}
        fits = json.dumps({"jsonrpc": "2.0", "method": "echo", "params": {"x": "c" * 900}, "id": 3})
        await conn.send_raw(fits.encode() + b"\r\n")
        assert (await conn.recv())["result"] == {"x": "c" * 900}


async def test_slow_request_does_not_delay_later_ones(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.call("ping")  # the server is up: what follows times the server, not its start-up
        await conn.request("sleep", {"seconds": 1.0}, id="slow")
        started = time.monotonic()
        await conn.request("ping", id="fast")
        first = await conn.recv()
        assert first["id"] == "fast" and time.monotonic() - started < 0.5
        second = await conn.recv(timeout=3)
        assert second == {"jsonrpc": "2.0", "result": {"slept": 1.0}, "id": "slow"}


async def answer_host_request(conn: Conn, reply: dict[str, Any] | None) -> dict[str, Any]:
    """Read the server's host.llm.complete request and answer it (if `reply` is given)."""
    request = await conn.recv()
    assert request["method"] == "host.llm.complete" and request["jsonrpc"] == "2.0", request
    assert isinstance(request["id"], str) and request["id"].startswith("srv-")
    if reply is not None:
        await conn.send({"jsonrpc": "2.0", "id": request["id"], **reply})
    return dict(request)


async def test_server_to_client_request_round_trip(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.request("ask_host", {"prompt": "say hi"}, id=1)
        request = await answer_host_request(conn, {"result": {"text": "hi there", "model": "host-model"}})
        assert request["params"]["messages"] == [{"role": "user", "content": "say hi"}]
        assert await conn.recv() == {
            "jsonrpc": "2.0",
            "result": {"text": "hi there", "viaContextVar": True},
            "id": 1,
        }
        # Ids keep counting, and the host's own numeric ids never collide with them.
        await conn.request("ask_host", {"prompt": "again"}, id=2)
        request = await answer_host_request(conn, {"result": {"text": "ok"}})
        assert request["id"] == "srv-2"
        assert (await conn.recv())["result"]["text"] == "ok"


async def test_server_to_client_batch_reply_and_unknown_ids(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.request("ask_host", {"prompt": "a"}, id=1)
        request = await answer_host_request(conn, None)
        # A batch made only of responses is sorted as responses, unknown ids are ignored.
        await conn.send(
            [
                {"jsonrpc": "2.0", "id": "srv-999", "result": {"text": "stray"}},
                {"jsonrpc": "2.0", "id": request["id"], "result": {"text": "from batch"}},
            ]
        )
        assert (await conn.recv())["result"]["text"] == "from batch"
        await conn.send({"jsonrpc": "2.0", "id": "srv-1000", "result": 1})
        assert (await conn.call("ping"))["result"] == "pong"


async def test_host_error_reply_surfaces_as_memos_error(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.request("ask_host", {"prompt": "x"}, id=1)
        busy_data = {"name": "MemosError", "code": "host_handler_busy", "message": "queue full"}
        busy = {"code": -32000, "message": "busy", "data": busy_data}
        await answer_host_request(conn, {"error": busy})
        error = assert_error(await conn.recv(), -32000, "host_handler_busy", 1)
        assert error["data"]["details"]["remote"] == busy
        await conn.request("ask_host", {"prompt": "x"}, id=2)
        await answer_host_request(conn, {"error": {"code": -32601, "message": "Method not found"}})
        assert_error(await conn.recv(), -32000, "internal", 2)


async def test_host_request_timeout(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.request("ask_host", {"prompt": "x", "timeout": 0.3}, id=1)
        request = await answer_host_request(conn, None)
        error = assert_error(await conn.recv(timeout=3), -32000, "deadline_exceeded", 1)
        assert "host.llm.complete" in error["message"]
        # A reply that arrives too late is ignored, and the connection keeps working.
        await conn.send({"jsonrpc": "2.0", "id": request["id"], "result": {"text": "late"}})
        assert (await conn.call("ping"))["result"] == "pong"


async def test_pending_host_requests_fail_when_input_closes(kind: str) -> None:
    async with open_conn(kind) as (conn, server):
        await conn.request("ask_host", {"prompt": "a"}, id=1)
        await conn.request("ask_host", {"prompt": "b"}, id=2)
        await answer_host_request(conn, None)
        await answer_host_request(conn, None)
        started = time.monotonic()
        await conn.close_input()
        replies = [await conn.recv(), await conn.recv()]
        assert time.monotonic() - started < 2  # at once, not after the host timeout
        assert sorted(r["id"] for r in replies) == [1, 2]
        for reply in replies:
            assert_error(reply, -32000, "transport_closed", reply["id"])
        await conn.expect_eof()
        if server is not None:
            assert await server.wait() == 0


async def test_notifications_are_executed_not_answered(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.notify("ping")
        await conn.notify("crash")
        await conn.notify("no.such.method")
        await conn.notify("echo", [1, 2])
        await conn.notify("emit", {"type": "from.notification"})  # executed: its event is sent
        event = await conn.recv()
        assert event["method"] == "events.notify" and event["params"]["type"] == "from.notification"
        assert (await conn.call("ping")) == {"jsonrpc": "2.0", "result": "pong", "id": 1}
        await conn.expect_silence(0.2)


async def test_batches(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.call("ping")  # id 1; the server is up before timing starts
        await conn.send(
            [
                {"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.2}, "id": 1},
                {"jsonrpc": "2.0", "method": "echo", "params": {"note": "notification"}},
                {"jsonrpc": "2.0", "method": "nope", "id": 3},
                {"jsonrpc": "2.0", "method": "fail_memos", "id": 4},
                {"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.2}, "id": 5},
            ]
        )
        started = time.monotonic()
        replies = await conn.recv()
        assert time.monotonic() - started < 0.39  # the two sleeps ran concurrently
        assert [r["id"] for r in replies] == [1, 3, 4, 5]
        assert replies[0]["result"] == {"slept": 0.2}
        assert_error(replies[1], -32601, "unknown_method", 3)
        assert_error(replies[2], -32000, "session_not_found", 4)
        await conn.send([{"jsonrpc": "2.0", "method": "ping"}, {"jsonrpc": "2.0", "method": "ping"}])
        assert (await conn.call("ping"))["id"] == 2  # the all-notification batch got no reply


async def test_server_notifications(kind: str) -> None:
    async with open_conn(kind) as (conn, _):
        await conn.request("emit", {"type": "trace.created", "payload": {"id": "tr_1"}}, id=1)
        await conn.request("emit", {"type": "trace.created", "payload": {"id": "tr_2"}}, id=2)
        events: list[dict[str, Any]] = []
        replies: list[dict[str, Any]] = []
        for _ in range(4):
            message = await conn.recv()
            (events if "method" in message else replies).append(message)
        assert sorted(r["id"] for r in replies) == [1, 2]
        assert all(r["result"] == {"delivered": 1} for r in replies)
        for event in events:
            assert event["jsonrpc"] == "2.0" and event["method"] == "events.notify" and "id" not in event
            assert set(event["params"]) == {"type", "ts", "seq", "payload"}
        assert sorted(e["params"]["seq"] for e in events) == [1, 2]
        assert {e["params"]["payload"]["id"] for e in events} == {"tr_1", "tr_2"}
