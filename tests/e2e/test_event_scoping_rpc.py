"""Events reach only the connections that work in their namespace.

Three hosts share one TCP daemon: A works in profile alice, B in profile bob, and an operator holds the
token. A runs a whole task (session, turn, capture, feedback, learning). B must not receive one event of
A's task (trace summaries and episode ids are A's data), only its own; the operator, once subscribed to
`"*"`, receives both. A host that asks for `"*"` without the operator's standing is refused, and one that
subscribes to alice by name receives alice's events from then on.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import RpcError, ServiceClient

from .conftest import start_daemon

AGENT = "tester"
ALICE = {"profileId": "alice"}
BOB = {"profileId": "bob"}


def _task(client: ServiceClient, namespace: dict[str, str], ts: int, feedback: bool) -> dict[str, str]:
    session = client.call("session.open", {"agent": AGENT, "namespace": namespace})["sessionId"]
    episode = client.call(
        "turn.start",
        {"agent": AGENT, "sessionId": session, "userText": "rotate the nginx access logs weekly", "ts": ts},
        timeout=60,
    )["query"]["episodeId"]
    traces = client.call(
        "turn.end",
        {
            "agent": AGENT,
            "sessionId": session,
            "episodeId": episode,
            "ts": ts + 1_000,
            "agentText": "Added a weekly logrotate rule for /var/log/nginx/access.log.",
            "toolCalls": [{"name": "bash", "input": {"cmd": "logrotate -d /etc/logrotate.d/nginx"}, "output": "ok"}],
        },
        timeout=60,
    )["traceIds"]
    if feedback:
        client.call(
            "feedback.submit",
            {"episodeId": episode, "channel": "explicit", "polarity": "positive", "rationale": "good"},
            timeout=120,
        )
    client.call("session.close", {"sessionId": session}, timeout=120)
    return {"session": session, "episode": episode, "trace": traces[0]}


def _events(client: ServiceClient) -> list[dict[str, Any]]:
    return [params for method, params in list(client.notifications) if method == "events.notify"]


def _mentions(events: list[dict[str, Any]], ids: dict[str, str]) -> list[dict[str, Any]]:
    return [event for event in events if any(value in repr(event["payload"]) for value in ids.values())]


def _settle(*clients: ServiceClient) -> None:
    """Events are pushed after the replies; a ping round trip per client lets the last ones arrive."""
    time.sleep(0.5)
    for client in clients:
        client.call("core.ping")


def test_a_tenants_events_reach_its_own_hosts_and_the_operator_only(tmp_path: Path) -> None:
    token = "s3cret-events-token"
    daemon = start_daemon(tmp_path / "home", token=token)
    try:
        connect = partial(ServiceClient.connect_tcp, daemon.host, daemon.port, token=token)
        with connect() as a, connect() as b, connect() as operator:
            operator.call("events.subscribe", {"namespace": "*"})
            b.call("session.open", {"agent": AGENT, "namespace": BOB})  # b works in bob from now on
            alice_task = _task(a, ALICE, 1_000_000, feedback=True)
            bob_task = _task(b, BOB, 2_000_000, feedback=False)
            _settle(a, b, operator)

            seen_by_a, seen_by_b, seen_by_operator = _events(a), _events(b), _events(operator)
            alice_events = _mentions(seen_by_a, alice_task)
            types = {event["type"] for event in alice_events}
            assert {"session.opened", "episode.opened", "trace.created", "feedback.received"} <= types, types
            assert all(event["namespace"] == {"profileId": "alice"} for event in alice_events)

            assert _mentions(seen_by_b, alice_task) == [], _mentions(seen_by_b, alice_task)
            assert not [e for e in seen_by_b if (e.get("namespace") or {}).get("profileId") == "alice"]
            assert {e["type"] for e in _mentions(seen_by_b, bob_task)} >= {"trace.created", "episode.closed"}
            assert _mentions(seen_by_a, bob_task) == []  # and the other way round

            assert len(_mentions(seen_by_operator, alice_task)) == len(alice_events)
            assert _mentions(seen_by_operator, bob_task)

            # Joining alice by name is allowed (as a read naming it is); from then on b gets alice's events.
            b.call("events.subscribe", {"namespace": ALICE})
            second = _task(a, ALICE, 3_000_000, feedback=False)
            _settle(a, b)
            assert {e["type"] for e in _mentions(_events(b), second)} >= {"trace.created"}
    finally:
        daemon.proc.terminate()
        daemon.proc.wait(timeout=30)


def test_every_namespace_needs_the_operator(tmp_path: Path) -> None:
    with ServiceClient.spawn(tmp_path / "home") as client:
        with pytest.raises(RpcError) as refused:
            client.call("events.subscribe", {"namespace": "*"})
        assert refused.value.data["code"] == "unauthorized"
        assert client.call("events.subscribe", {"namespace": BOB}) == {"ok": True}
