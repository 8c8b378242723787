"""The sync client against a real spawned service (stdio) and daemon (TCP): typed calls, the host LLM handler,
events, per-call timeouts and reconnection with a clear error for the calls that were in flight."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import CallTimeout, HandlerError, RpcError, ServiceClient, TransportClosed

AGENT = "client-tests"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceClient]:
    client = ServiceClient.spawn(tmp_path_factory.mktemp("client-home"))
    try:
        yield client
    finally:
        client.close()


def test_typed_calls_cover_a_turn(service: ServiceClient) -> None:
    session = service.session_open(AGENT)["sessionId"]
    started = service.turn_start(AGENT, session, "how do I rotate the nginx logs?", turn_key="k1")
    episode = started["query"]["episodeId"]
    again = service.turn_start(AGENT, session, "how do I rotate the nginx logs?", turn_key="k1")
    assert again["query"]["episodeId"] == episode  # the turnKey makes the retry return the same routing
    ended = service.turn_end(
        AGENT,
        session,
        episode,
        agent_text="Use logrotate with a daily rule for /var/log/nginx/*.log.",
        tool_calls=[{"name": "shell", "input": {"cmd": "ls /etc/logrotate.d"}, "output": "nginx", "success": True}],
        user_text="how do I rotate the nginx logs?",
    )
    assert ended["episodeId"] == episode and len(ended["traceIds"]) == 2
    trace = service.memory_get_trace(ended["traceId"])
    assert trace is not None and trace["episodeId"] == episode
    assert service.memory_get_trace("tr_DOESNOTEXIST") is None
    timeline = service.memory_timeline(episode)
    assert [t["id"] for t in timeline["traces"]] == ended["traceIds"]
    found = service.memory_search("logrotate nginx", top_k={"tier1": 3, "tier2": 3, "tier3": 3})
    assert any(hit["refId"] in ended["traceIds"] for hit in found["hits"])
    feedback = service.feedback_submit("positive", episode_id=episode, trace_id=ended["traceId"], evidence_id="e1")
    assert feedback["episodeId"] == episode and feedback["traceId"] == ended["traceId"]
    assert service.session_close(session) == {"ok": True}


def test_errors_keep_their_stable_code(service: ServiceClient) -> None:
    with pytest.raises(RpcError) as err:
        service.memory_timeline("ep_DOESNOTEXIST")
    assert err.value.memos_code == "episode_not_found"
    with pytest.raises(RpcError) as bad:
        service.session_open(AGENT, unknown_field=1)  # passed through, rejected by the service
    assert bad.value.code == -32602


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[ServiceClient]:
    """A service of its own: LLM tests must not inherit another test's LLM failures (circuit breaker)."""
    client = ServiceClient.spawn(tmp_path / "home")
    try:
        yield client
    finally:
        client.close()


def test_host_llm_handler_and_handler_error_code(fresh: ServiceClient) -> None:
    service = fresh
    seen: list[dict[str, Any]] = []

    def host_llm(params: dict[str, Any]) -> dict[str, Any]:
        seen.append(params)
        return {"text": "pong", "model": "host-model"}

    service.on_request("host.llm.complete", host_llm)
    result = service.llm_test(prompt="say pong")
    assert result["ok"] is True and result["text"] == "pong" and seen[-1]["messages"][0]["content"] == "say pong"

    def busy(params: dict[str, Any]) -> dict[str, Any]:
        raise HandlerError("llm_rate_limited", "slow down")

    service.on_request("host.llm.complete", busy)
    failed = service.llm_test(prompt="again")
    assert failed["ok"] is False and failed["error"]["code"] == "llm_rate_limited"


def test_events_reach_callbacks_in_order_and_a_callback_may_call_back(service: ServiceClient) -> None:
    types: list[str] = []
    pinged = threading.Event()

    def on_opened(event: dict[str, Any]) -> None:
        types.append(event["type"])
        service.core_ping(timeout=10)  # a blocking call from inside a callback must not deadlock the reader
        pinged.set()

    service.on_event(on_opened, types={"session.opened"})
    seqs: list[int] = []
    service.on_event(lambda event: seqs.append(event["seq"]))
    service.session_open(AGENT)
    assert pinged.wait(10)
    assert types == ["session.opened"]
    deadline = time.monotonic() + 5
    while not seqs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seqs == sorted(seqs)


def test_per_call_timeout_then_the_connection_still_works(fresh: ServiceClient) -> None:
    service = fresh
    release = threading.Event()

    def slow(params: dict[str, Any]) -> dict[str, Any]:
        release.wait(10)
        return {"text": "late"}

    service.on_request("host.llm.complete", slow)
    with pytest.raises(CallTimeout) as err:
        service.llm_test(prompt="slow", timeout=0.5)
    assert isinstance(err.value, TimeoutError) and err.value.method == "llm.test"
    release.set()
    assert service.core_ping(timeout=10)["ok"] is True


def test_stdio_respawn_fails_in_flight_calls_clearly_and_serves_the_next(tmp_path: Path) -> None:
    client = ServiceClient.spawn(tmp_path / "home")
    try:
        session = client.session_open(AGENT)["sessionId"]
        reconnected = threading.Event()
        client.on_reconnect(reconnected.set)
        entered = threading.Event()

        def stuck(params: dict[str, Any]) -> dict[str, Any]:
            entered.set()
            time.sleep(30)
            return {"text": "never"}

        client.on_request("host.llm.complete", stuck)
        in_flight = client.call_async("llm.test", {"prompt": "hang"})
        assert entered.wait(20)
        first = client.process
        assert first is not None
        first.kill()
        with pytest.raises(TransportClosed) as err:
            in_flight.result(timeout=10)
        assert err.value.in_flight and err.value.method == "llm.test" and "llm.test" in str(err.value)
        # the next call respawns the service on the same data home: the session is still there
        assert client.session_open(AGENT, session_id=session)["sessionId"] == session
        assert client.process is not None and client.process.pid != first.pid
        assert client.reconnects == 1 and reconnected.wait(5)
    finally:
        client.close()
    with pytest.raises(TransportClosed):
        client.core_ping()  # an explicit close is final


def test_without_reconnect_a_closed_transport_is_an_error(tmp_path: Path) -> None:
    client = ServiceClient.spawn(tmp_path / "home", reconnect=False)
    try:
        assert client.core_ping()["ok"] is True
        assert client.process is not None
        client.process.kill()
        client.process.wait()
        deadline = time.monotonic() + 5
        while client.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(TransportClosed):
            client.core_ping(timeout=5)
    finally:
        client.close()


def _start_daemon(home: Path, token: str, port: int = 0) -> tuple[subprocess.Popen[bytes], int]:
    env = {**os.environ, "MEMOS_BRIDGE_HOME": str(home), "MEMOS_BRIDGE_TOKEN": token}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memos_bridge", "serve", "--tcp", f"127.0.0.1:{port}", "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        match = re.search(r"listening on \S+:(\d+)", line)
        if match:
            return proc, int(match.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("daemon did not report its port")


def test_tcp_authenticates_and_reconnects_to_a_restarted_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc, port = _start_daemon(home, "s3cret")
    client: ServiceClient | None = None
    try:
        client = ServiceClient.connect_tcp("127.0.0.1", port, token="s3cret")
        session = client.session_open(AGENT)["sessionId"]
        proc.terminate()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while client.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        proc, _ = _start_daemon(home, "s3cret", port)
        # reconnects and re-authenticates (an unauthenticated call would answer "unauthorized")
        assert client.session_open(AGENT, session_id=session)["sessionId"] == session
        assert client.reconnects == 1
        with pytest.raises(RpcError) as err:
            ServiceClient.connect_tcp("127.0.0.1", port, token="wrong", reconnect=False)
        assert err.value.memos_code == "unauthorized"
    finally:
        if client is not None:
            client.close()
        proc.terminate()
        proc.wait(timeout=30)
