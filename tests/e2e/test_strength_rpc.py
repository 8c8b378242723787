"""Strength, forgetting, pinning and links through the JSON-RPC boundary of a spawned service."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import RpcError, ServiceClient

AGENT = "tester"
DAY = 86_400_000
FAST = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}


def _now() -> int:
    return int(time.time() * 1000)


def _trace(client: ServiceClient, text: str, reply: str, ts: int) -> str:
    session = client.call("session.open", {"agent": AGENT})["sessionId"]
    start = client.call("turn.start", {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts}, timeout=60)
    params = {"agent": AGENT, "sessionId": session, "episodeId": start["query"]["episodeId"], "ts": ts + 1}
    end = client.call("turn.end", {**params, "agentText": reply}, timeout=60)
    trace_id: str = end["traceIds"][-1]
    return trace_id


def _search(client: ServiceClient, query: str) -> list[str]:
    result = client.call("memory.search", {"query": query}, timeout=60)
    return [hit["refId"] for hit in result["hits"]]


def _error(client: ServiceClient, method: str, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as caught:
        client.call(method, params)
    return caught.value


def test_reinforce_decay_pin_restore_and_link_over_the_wire(home: Path) -> None:
    now = _now()
    with ServiceClient.spawn(home, env=FAST) as client:
        wrong = _trace(client, "how do I deploy the api to production", "Run git push --force to the prod branch.", now)
        fixed = _trace(client, "deploy the api to production safely", "Never force-push: tag a release PR.", now)
        keep = _trace(client, "renew the certificate on the mail server", "Renewed with certbot.", now)

        reinforce = {"id": wrong, "kind": "trace", "evidence": "test_passed", "evidenceId": "ci-41"}
        first = client.call("memory.reinforce", reinforce)
        assert first == {"id": wrong, "strength": pytest.approx(0.65), "applied": True}
        assert client.call("memory.reinforce", reinforce) == {**first, "applied": False}
        claim = client.call("memory.reinforce", {**reinforce, "evidence": "self_report", "evidenceId": "said-so"})
        assert claim["applied"] is True and claim["strength"] == pytest.approx(0.65)
        failed = client.call("memory.reinforce", {**reinforce, "evidence": "failure", "evidenceId": "ci-42"})
        assert failed["strength"] == pytest.approx(0.455)
        client.call("memory.flush", {}, timeout=60)  # access writes queued behind earlier turn.start replies
        stored = client.call("memory.get_trace", {"id": wrong})
        assert stored["strength"] == pytest.approx(0.455) and stored["protected"] is False
        assert stored["lastEvidenceAt"] >= now

        # recall counts access, never strength
        accessed = stored["accessCount"]
        previous = client.call("memory.get_trace", {"id": keep}).get("accessCount", 0)
        hits = _search(client, "renew the certificate on the mail server")
        assert keep in hits
        client.call("memory.flush", {}, timeout=60)
        recalled = client.call("memory.get_trace", {"id": keep})
        assert recalled["accessCount"] == previous + 1 and recalled["lastAccessedAt"] >= now
        assert recalled["strength"] == 0.5
        assert client.call("memory.get_trace", {"id": wrong})["accessCount"] == accessed + (wrong in hits)

        bad_kind = _error(client, "memory.reinforce", {**reinforce, "kind": "episode"})
        assert bad_kind.code == -32602 and bad_kind.memos_code == "invalid_argument"
        bad_evidence = _error(client, "memory.reinforce", {**reinforce, "evidence": "it_felt_right"})
        assert bad_evidence.code == -32602 and bad_evidence.memos_code == "invalid_argument"
        no_id = _error(client, "memory.reinforce", {k: v for k, v in reinforce.items() if k != "evidenceId"})
        assert no_id.code == -32602
        unknown = _error(client, "memory.reinforce", {**reinforce, "id": "tr_00000000MISS"})
        assert unknown.code == -32000 and unknown.memos_code == "trace_not_found"
        assert _error(client, "memory.pin", {"id": "po_00000000MISS", "kind": "policy"}).memos_code == (
            "policy_not_found"
        )
        assert _error(client, "memory.restore", {"id": "wm_00000000MISS", "kind": "world_model"}).memos_code == (
            "world_model_not_found"
        )

        # supersedes: the correction wins in memory.search
        before = _search(client, "how do I deploy the api to production")
        assert wrong in before and fixed in before
        link = {"fromId": fixed, "toId": wrong, "relation": "supersedes"}
        assert client.call("memory.link", link) == {"ok": True}
        assert client.call("memory.link", link) == {"ok": True}
        after = _search(client, "how do I deploy the api to production")
        assert fixed in after and wrong not in after
        assert _error(client, "memory.link", {**link, "relation": "replaces"}).code == -32602
        assert _error(client, "memory.link", {**link, "toId": "sk_00000000MISS"}).memos_code == "skill_not_found"
        assert _error(client, "memory.link", {**link, "fromId": wrong, "toId": fixed}).memos_code == "invalid_argument"

        # forgetting: pinned memories are exempt, archived ones leave recall and come back on restore
        assert client.call("memory.pin", {"id": keep, "kind": "trace"}) == {"ok": True}
        client.call("memory.flush", {}, timeout=60)  # access writes of the searches above
        assert client.call("memory.decay", {"now": now + 15 * DAY}) == {"decayed": 2, "archived": 0, "expired": 0}
        assert client.call("memory.decay", {"now": now + 100 * DAY}) == {"decayed": 0, "archived": 2, "expired": 0}
        archived = client.call("memory.get_trace", {"id": fixed})
        assert archived["archivedAt"] == now + 100 * DAY and archived["strength"] == pytest.approx(0.425)
        pinned = client.call("memory.get_trace", {"id": keep})
        assert pinned["pinned"] is True and pinned["protected"] is True and "archivedAt" not in pinned
        assert pinned["strength"] == 0.5
        assert fixed not in _search(client, "deploy the api to production safely")
        assert keep in _search(client, "renew the certificate on the mail server")
        assert client.call("memory.restore", {"id": fixed, "kind": "trace"}) == {"ok": True}
        assert fixed in _search(client, "deploy the api to production safely")
        assert client.call("memory.unpin", {"id": keep, "kind": "trace"}) == {"ok": True}
        assert client.call("memory.get_trace", {"id": keep})["pinned"] is False
        assert _error(client, "memory.decay", {"now": -1}).code == -32602


def test_the_service_runs_the_decay_job_on_its_interval(home: Path) -> None:
    env = {**FAST, "MEMOS_BRIDGE_STRENGTH__DECAY_INTERVAL_S": "0.3"}
    with ServiceClient.spawn(home, env=env) as client:
        old = _trace(client, "vacuum the analytics warehouse tables", "Vacuumed.", _now() - 100 * DAY)
        deadline = time.monotonic() + 30
        while client.call("memory.get_trace", {"id": old}).get("archivedAt") is None:
            assert time.monotonic() < deadline, "the decay job never archived the idle trace"
            time.sleep(0.1)
        assert old not in _search(client, "vacuum the analytics warehouse tables")
