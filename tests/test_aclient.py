"""The async client (anyio) against a real spawned service and a TCP daemon: typed calls, async and blocking host
handlers, ordered events delivered off the reader, per-call timeouts, respawn / reconnect (re-authenticating)
with a clear error for in-flight calls."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from memos_bridge.aclient import AsyncServiceClient
from memos_bridge.client import CallTimeout, RpcError, TransportClosed
from tests.test_client import _start_daemon

pytestmark = pytest.mark.anyio
AGENT = "aclient-tests"


async def test_typed_calls_events_and_host_llm(tmp_path: Path) -> None:
    async with AsyncServiceClient.spawn(tmp_path / "home") as client:
        asked: list[dict[str, Any]] = []

        async def host_llm(params: dict[str, Any]) -> dict[str, Any]:
            asked.append(params)
            await anyio.sleep(0.05)
            return {"text": "pong", "model": "async-host"}

        client.on_request("host.llm.complete", host_llm)
        created: list[dict[str, Any]] = []
        pinged: list[bool] = []

        async def on_created(event: dict[str, Any]) -> None:
            created.append(event)
            pinged.append((await client.core_ping())["ok"])  # a callback may await the client itself

        client.on_event(on_created, types={"trace.created"})

        session = (await client.session_open(AGENT))["sessionId"]
        started = await client.turn_start(AGENT, session, "why does the CI cache miss on every run?")
        episode = started["query"]["episodeId"]
        ended = await client.turn_end(
            AGENT,
            session,
            episode,
            agent_text="The cache key includes the lockfile hash, which changes on every install.",
            user_text="why does the CI cache miss on every run?",
        )
        assert (await client.memory_get_trace(ended["traceId"])) is not None
        assert (await client.memory_get_trace("tr_NOPE")) is None
        with pytest.raises(RpcError) as err:
            await client.episode_close("ep_NOPE")
        assert err.value.memos_code == "episode_not_found"
        result = await client.llm_test(prompt="say pong")
        assert result["text"] == "pong" and result["model"] == "async-host"
        assert asked[0]["messages"][-1]["content"] == "say pong"
        with anyio.fail_after(10):
            while not pinged:
                await anyio.sleep(0.02)
        assert created[0]["payload"]["traceId"] == ended["traceId"] and pinged == [True]


async def test_blocking_handler_runs_in_a_thread_and_per_call_timeout(tmp_path: Path) -> None:
    async with AsyncServiceClient.spawn(tmp_path / "home") as client:

        def blocking_model(params: dict[str, Any]) -> dict[str, Any]:
            time.sleep(2.0)  # a synchronous host model: must not stall the event loop
            return {"text": "slow"}

        client.on_request("host.llm.complete", blocking_model)
        await client.core_health()  # the service is up: what follows measures the handler, not the start-up
        async with anyio.create_task_group() as group:
            group.start_soon(client.llm_test)
            await anyio.sleep(0.3)
            with anyio.fail_after(1.5):
                assert (await client.core_ping())["ok"] is True  # answered while the handler blocks
        with pytest.raises(CallTimeout) as err:
            await client.llm_test(prompt="again", timeout=0.5)
        assert isinstance(err.value, TimeoutError) and err.value.method == "llm.test"
        assert (await client.core_ping(timeout=10))["ok"] is True


async def _llm_test_in_flight(client: AsyncServiceClient, group: anyio.abc.TaskGroup) -> list[BaseException]:
    """Start an `llm.test` whose host LLM never answers and return once the service is waiting on it; the list
    receives the `TransportClosed` the call ends with when the connection goes."""
    entered = anyio.Event()

    async def stuck(params: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await anyio.sleep(60)
        return {"text": "never"}

    client.on_request("host.llm.complete", stuck)
    failure: list[BaseException] = []

    async def in_flight() -> None:
        try:
            await client.llm_test(prompt="hang")
        except TransportClosed as exc:
            failure.append(exc)

    group.start_soon(in_flight)
    with anyio.fail_after(20):
        await entered.wait()
    return failure


async def test_respawn_after_the_service_dies(tmp_path: Path) -> None:
    async with AsyncServiceClient.spawn(tmp_path / "home") as client:
        session = (await client.session_open(AGENT))["sessionId"]
        reconnected: list[int] = []
        client.on_reconnect(lambda: reconnected.append(1))
        async with anyio.create_task_group() as group:
            failure = await _llm_test_in_flight(client, group)
            process = client.process
            assert process is not None
            first_pid = process.pid
            process.kill()
        assert len(failure) == 1
        error = failure[0]
        assert isinstance(error, TransportClosed) and error.in_flight and error.method == "llm.test"
        assert (await client.session_open(AGENT, session_id=session))["sessionId"] == session
        assert client.process is not None and client.process.pid != first_pid
        assert client.reconnects == 1 and reconnected == [1]
    with pytest.raises(TransportClosed):
        await client.core_ping()


async def test_tcp_authenticates_fails_in_flight_calls_and_reconnects_to_a_restarted_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc, port = _start_daemon(home, "s3cret")
    try:
        async with AsyncServiceClient.tcp("127.0.0.1", port, token="s3cret") as client:
            session = (await client.session_open(AGENT))["sessionId"]
            async with anyio.create_task_group() as group:
                failure = await _llm_test_in_flight(client, group)
                proc.kill()  # the daemon dies with llm.test in flight
                proc.wait(timeout=30)
            (error,) = failure
            assert isinstance(error, TransportClosed) and error.in_flight and error.method == "llm.test"
            with anyio.fail_after(10):
                while client.connected:
                    await anyio.sleep(0.05)
            proc, _ = _start_daemon(home, "s3cret", port)
            # reconnects and re-authenticates (an unauthenticated call would answer "unauthorized")
            assert (await client.session_open(AGENT, session_id=session))["sessionId"] == session
            assert client.reconnects == 1
        with pytest.raises(TransportClosed):
            await client.core_ping()  # closed by the context manager: no silent reconnect
        with pytest.raises(RpcError) as err:
            async with AsyncServiceClient.tcp("127.0.0.1", port, token="wrong", reconnect=False):
                pass
        assert err.value.memos_code == "unauthorized"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
