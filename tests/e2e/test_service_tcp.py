"""The daemon: several hosts at once over TCP, with token auth."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memos_bridge.client import RpcError

from .conftest import Daemon, start_daemon


def test_two_clients_share_one_daemon(daemon: Daemon) -> None:
    with daemon.connect() as a, daemon.connect() as b:
        sa = a.call("session.open", {"agent": "a"})["sessionId"]
        episode = a.call("turn.start", {"agent": "a", "sessionId": sa, "userText": "compile the rust crate", "ts": 1})[
            "query"
        ]["episodeId"]
        ids = a.call(
            "turn.end",
            {
                "agent": "a",
                "sessionId": sa,
                "episodeId": episode,
                "ts": 2,
                "agentText": "cargo build --release succeeded after adding the feature flag",
            },
            timeout=60,
        )["traceIds"]
        assert b.call("memory.get_trace", {"id": ids[0]})["sessionId"] == sa
        assert b.call("core.health")["connections"] >= 2

        def ping(i: int) -> bool:
            client = a if i % 2 else b
            return bool(client.call("core.health")["ok"])

        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(ping, range(100)))


def test_a_dropped_client_does_not_affect_others(daemon: Daemon) -> None:
    victim = daemon.connect()
    victim.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"core.hea')  # half a line, then gone
    victim.close()
    with daemon.connect() as other:
        assert other.call("core.health")["ok"] is True


def test_token_is_required_when_configured(home: Path) -> None:
    daemon = start_daemon(home, token="s3cret")
    try:
        with daemon.connect() as client:
            with pytest.raises(RpcError) as err:
                client.call("core.health")
            assert err.value.memos_code == "unauthorized"
            with pytest.raises(RpcError) as err:
                client.call("auth", {"token": "wrong"})
            assert err.value.memos_code == "unauthorized"
            assert client.call("auth", {"token": "s3cret"}) == {"ok": True}
            assert client.call("core.health")["ok"] is True
    finally:
        daemon.proc.terminate()
        daemon.proc.wait(timeout=30)


def test_non_loopback_bind_without_token_is_refused(home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEMOS_BRIDGE_TOKEN"}
    proc = subprocess.run(
        [sys.executable, "-m", "memos_bridge", "serve", "--tcp", "0.0.0.0:0", "--home", str(home)],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert b"token" in proc.stderr.lower()
    assert b"Traceback" not in proc.stderr


def test_many_hosts_at_once_lose_nothing(daemon: Daemon) -> None:
    """Twelve hosts leave a barrier together and each runs three turn pairs (three tool calls each): every
    call is answered without error, and every step a `turn.end` acknowledged is stored under its own
    session, none twice. (The latency side of load is `scripts/bench_load.py`'s.)"""
    hosts, turns = 12, 3
    barrier = threading.Barrier(hosts)

    def host(index: int) -> tuple[str, list[str]]:
        with daemon.connect() as client:
            session = client.call("session.open", {"agent": "load"})["sessionId"]
            barrier.wait(timeout=60)
            acknowledged: list[str] = []
            for turn in range(turns):
                ts = 1_000_000 + index * 10_000 + turn * 100
                started = client.call(
                    "turn.start",
                    {"agent": "load", "sessionId": session, "userText": f"task {index}: step {turn}", "ts": ts},
                    timeout=120,
                )
                calls = [
                    {"name": "bash", "input": {"cmd": f"make check-{index}-{turn}-{n}"}, "output": f"{n} passed"}
                    for n in range(3)
                ]
                ended = client.call(
                    "turn.end",
                    {
                        "agent": "load",
                        "sessionId": session,
                        "episodeId": started["query"]["episodeId"],
                        "agentText": f"done with step {turn} of task {index}",
                        "toolCalls": calls,
                        "ts": ts + 50,
                    },
                    timeout=120,
                )
                acknowledged += ended["traceIds"]
            return session, acknowledged

    with ThreadPoolExecutor(hosts) as pool:
        results = list(pool.map(host, range(hosts)))
    owner = {trace_id: session for session, ids in results for trace_id in ids}
    assert len(owner) == sum(len(ids) for _, ids in results) == hosts * turns * 4  # three calls + the reply
    with daemon.connect() as operator:
        operator.call("memory.flush", {}, timeout=300)
        stored = operator.call("memory.list_traces", {"limit": 500})["traces"]
    assert {t["id"]: t["sessionId"] for t in stored} == owner
