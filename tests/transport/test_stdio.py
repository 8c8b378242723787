"""stdio specifics: the protocol stream stays clean, the process exits properly at EOF, throughput."""

from __future__ import annotations

import json
import os
import time

import anyio
import pytest

from memos_bridge.transport.stdio import FdReader, FdWriter

from .harness import stdio_server

pytestmark = pytest.mark.anyio


async def test_stray_output_goes_to_stderr_not_the_protocol() -> None:
    async with stdio_server() as server:
        conn = server.conn
        assert (await conn.call("print_stray"))["result"] == "printed"
        assert (await conn.call("ping"))["result"] == "pong"
        await conn.close_input()
        await conn.expect_eof()  # nothing but the two replies ever reached stdout
        assert await server.wait() == 0
        log = server.stderr()
        assert "noise from print" in log and "noise from a native library" in log


async def test_eof_lets_running_requests_finish_then_exits_zero() -> None:
    async with stdio_server() as server:
        conn = server.conn
        await conn.call("ping")
        await conn.request("sleep", {"seconds": 0.5}, id="in-flight")
        await anyio.sleep(0.05)
        started = time.monotonic()
        await conn.close_input()
        assert await conn.recv() == {"jsonrpc": "2.0", "result": {"slept": 0.5}, "id": "in-flight"}
        assert await server.wait(timeout=3) == 0
        assert time.monotonic() - started < 2.5


async def test_eof_cancels_requests_that_outlive_the_shutdown_timeout() -> None:
    async with stdio_server("--shutdown-timeout", "0.5") as server:
        conn = server.conn
        await conn.call("ping")
        await conn.request("sleep", {"seconds": 60}, id="forever")
        await anyio.sleep(0.05)
        started = time.monotonic()
        await conn.close_input()
        await conn.expect_eof(timeout=3)
        assert await server.wait(timeout=3) == 0
        assert time.monotonic() - started < 2.5
        assert "cancelling 1 running" in server.stderr()


async def test_ping_throughput_over_stdio() -> None:
    """Pipelined pings with 100 in flight; the floor is far below the target to stay robust on CI."""
    total, window = 3000, 100
    async with stdio_server() as server:
        conn = server.conn
        await conn.call("ping")
        started = time.monotonic()
        sent = received = 0

        async def sender() -> None:
            nonlocal sent
            while sent < total:
                if sent - received < window:
                    burst = min(window - (sent - received), total - sent)
                    lines = b"".join(
                        b'{"jsonrpc":"2.0","method":"ping","id":%d}\n' % (sent + i + 2) for i in range(burst)
                    )
                    sent += burst
                    await conn.send_raw(lines)
                else:
                    await anyio.sleep(0)

        async with anyio.create_task_group() as group:
            group.start_soon(sender)
            while received < total:
                reply = json.loads(await conn.recv_line())
                assert reply["result"] == "pong"
                received += 1
        rate = total / (time.monotonic() - started)
        print(f"stdio ping throughput: {rate:.0f} req/s")
        assert rate > 700


async def test_fd_reader_hands_over_chunks_until_eof() -> None:
    read_fd, write_fd = os.pipe()
    try:
        reader = FdReader(read_fd, chunk_size=4)
        reader.start()
        writer = FdWriter(write_fd)
        writer.start()
        await writer.send(b"0123456789")
        writer.close()
        os.close(write_fd)
        write_fd = -1
        got = b""
        with anyio.fail_after(5):
            while chunk := await reader.receive():
                assert len(chunk) <= 4
                got += chunk
        assert got == b"0123456789"
        assert await reader.receive() == b""
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        os.close(read_fd)


async def test_fd_writer_reports_a_closed_reader() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    writer = FdWriter(write_fd)
    writer.start()
    try:
        with pytest.raises(BrokenPipeError):
            await writer.send(b"x\n")
    finally:
        writer.close()
        os.close(write_fd)


async def test_exits_even_if_the_host_never_reads_its_replies() -> None:
    """A full stdout pipe must not keep the process alive after EOF (bounded by the shutdown timeout)."""
    async with stdio_server("--shutdown-timeout", "0.5") as server:
        conn = server.conn
        await conn.call("ping")
        payload = "x" * 200_000
        for i in range(5):  # ~1 MB of replies against a 64 KiB pipe that nobody drains
            await conn.request("echo", {"payload": payload}, id=i)
        await anyio.sleep(0.3)
        started = time.monotonic()
        await conn.close_input()
        assert await server.wait(timeout=6) == 0
        assert time.monotonic() - started < 4
