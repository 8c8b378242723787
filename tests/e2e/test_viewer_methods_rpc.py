"""The viewer's read methods through the real service: `memory.retrieval_log` and `memory.analytics`.

Turns in two namespaces (alice, bob), a remembered memory, verifier feedback; then the log shows alice's turns
as they were answered (with a consistent retrieval funnel) and never bob's, and the analytics count what
happened today in alice's namespace only.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import RpcError, ServiceClient
from memos_bridge.core.analytics import percentile, rate, window

AGENT = "hermes"
ALICE = {"profileId": "alice"}
BOB = {"profileId": "bob"}


def _turn(client: ServiceClient, session: str, text: str, reply: str) -> dict[str, Any]:
    ts = int(time.time() * 1000)
    started = client.call("turn.start", {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts}, timeout=60)
    episode = started["query"]["episodeId"]
    ended = client.call(
        "turn.end",
        {"agent": AGENT, "sessionId": session, "episodeId": episode, "ts": ts + 1, "agentText": reply},
        timeout=60,
    )
    return {"episode": episode, "hits": [h["refId"] for h in started["hits"]], "traces": ended["traceIds"]}


def _verdict(client: ServiceClient, episode: str, passed: int, total: int, evidence: str) -> None:
    client.call(
        "feedback.submit",
        {
            "episodeId": episode,
            "polarity": "positive" if passed == total else "negative",
            "rationale": f"{passed}/{total} checks passed",
            "raw": {"verifier": {"passed": passed, "total": total}},
            "evidenceId": evidence,
        },
        timeout=120,
    )


def test_retrieval_log_and_analytics_stay_in_their_namespace(tmp_path: Path) -> None:
    with ServiceClient.spawn(tmp_path / "home") as client:
        alice = client.call("session.open", {"agent": AGENT, "namespace": ALICE})["sessionId"]
        bob = client.call("session.open", {"agent": AGENT, "namespace": BOB})["sessionId"]
        fact = client.call(
            "memory.remember",
            {"content": "The staging database listens on port 5433, not the default 5432.", "sessionId": alice},
        )["id"]
        first = _turn(client, alice, "connect psql to the staging database", "Connected with psql -p 5433.")
        assert fact in first["hits"]
        second = _turn(client, alice, "rotate the nginx access logs on the gateway weekly", "Added a logrotate rule.")
        # the older verdict is replaced by the later one: the task counts once, as passed
        _verdict(client, first["episode"], 1, 3, "alice-v1")
        _verdict(client, first["episode"], 3, 3, "alice-v2")
        other = _turn(client, bob, "deploy the payments service to the kubernetes cluster", "Deployed with helm.")
        _verdict(client, other["episode"], 0, 2, "bob-v1")

        # ---- the list of namespaces is the operator's: not over stdio
        with pytest.raises(RpcError) as refused:
            client.call("core.namespaces")
        assert refused.value.memos_code == "unauthorized"

        # ---- feedback: alice's verdicts on her task, newest first; bob's only in bob's namespace
        on_first = client.call("memory.list_feedback", {"episodeId": first["episode"]})["feedback"]
        assert [f["evidenceId"] for f in on_first] == ["alice-v2", "alice-v1"]
        assert [f["raw"]["verifier"]["passed"] for f in on_first] == [3, 1]
        assert {f["evidenceId"] for f in client.call("memory.list_feedback", {"namespace": ALICE})["feedback"]} == {
            "alice-v1",
            "alice-v2",
        }
        assert [f["evidenceId"] for f in client.call("memory.list_feedback", {"sessionId": bob})["feedback"]] == [
            "bob-v1"
        ]
        assert client.call("memory.list_feedback", {"namespace": BOB, "episodeId": first["episode"]})["feedback"] == []

        # ---- retrieval log: alice's turns, newest first, as they were answered
        entries = client.call("memory.retrieval_log", {"namespace": ALICE})["entries"]
        assert [e["sessionId"] for e in entries] == [alice, alice]
        assert [e["query"] for e in entries] == [
            "rotate the nginx access logs on the gateway weekly",
            "connect psql to the staging database",
        ]
        assert entries[0]["ts"] >= entries[1]["ts"]
        assert [e["hitIds"] for e in entries] == [second["hits"], first["hits"]]
        for entry in entries:
            stats, funnel = entry["stats"], entry["stats"]["funnel"]
            assert funnel["injected"] == entry["hitCount"] == len(entry["hitIds"]) == stats["returned"]
            assert funnel["candidates"] == stats["candidates"]
            steps = [funnel[k] for k in ("candidates", "thresholded", "deduped", "selected", "injected")]
            assert steps == sorted(steps, reverse=True), funnel
            assert isinstance(entry["durationMs"], int) and entry["durationMs"] >= 0
            assert entry["episodeId"].startswith("ep_") and isinstance(entry["turnId"], int)
        hit = entries[1]
        assert hit["hitCount"] >= 1 and hit["stats"]["funnel"]["channels"], hit
        assert all(isinstance(n, int) and n > 0 for n in hit["stats"]["funnel"]["channels"].values())
        assert "port 5433" in hit["injectedContext"]
        # paging, and a session's own log; bob's turn appears only in bob's
        assert client.call("memory.retrieval_log", {"namespace": ALICE, "limit": 1, "offset": 1})["entries"] == [hit]
        bobs = client.call("memory.retrieval_log", {"sessionId": bob})["entries"]
        assert [e["query"] for e in bobs] == ["deploy the payments service to the kubernetes cluster"]
        assert client.call("memory.retrieval_log", {})["entries"] == []  # the default namespace had no turns

        # ---- analytics over 7 days: everything happened today (UTC), the last day of the window
        now = int(time.time() * 1000)
        result = client.call("memory.analytics", {"namespace": ALICE, "days": 7, "now": now}, timeout=60)
        today = datetime.fromtimestamp(now / 1000, tz=UTC).strftime("%Y-%m-%d")
        assert len(result["days"]) == 7 and result["days"][-1] == today
        counts = client.call("memory.stats", {"namespace": ALICE})["counts"]
        for kind, stats_kind in (
            ("trace", "trace"),
            ("experience", "policy"),
            ("world_model", "world_model"),
            ("skill", "skill"),
            ("memory", "memory"),
        ):
            series = result["written"][kind]
            assert len(series) == 7 and sum(series[:-1]) == 0
            assert series[-1] == sum(counts.get(stats_kind, {}).values()), kind
        assert result["written"]["memory"][-1] == 1
        assert result["written"]["trace"][-1] == len(first["traces"]) + len(second["traces"])
        assert result["turns"] == [0] * 6 + [2]
        with_hits = sum(1 for e in entries if e["hitCount"])
        assert result["recallHitRate"] == [None] * 6 + [with_hits / 2]
        assert result["verifiedTasks"] == [0] * 6 + [1]
        assert result["verifiedSuccessRate"] == [None] * 6 + [1.0]
        latency = result["turnStartLatencyMs"]
        assert latency["n"] == 2 and 0 <= latency["p50"] <= latency["p95"] <= latency["p99"]
        assert max(e["durationMs"] for e in entries) == latency["p99"]
        for stage in result["llm"]:
            assert stage["calls"] >= stage["failures"] >= 0 and stage["stage"]

        theirs = client.call("memory.analytics", {"sessionId": bob, "days": 7, "now": now})
        assert theirs["turns"][-1] == 1 and theirs["turnStartLatencyMs"]["n"] == 1
        assert theirs["verifiedTasks"][-1] == 1 and theirs["verifiedSuccessRate"][-1] == 0.0
        assert theirs["written"]["memory"][-1] == 0

        # ---- bounds and the operator view
        for method, params in (
            ("memory.analytics", {"days": 0}),
            ("memory.analytics", {"days": 366}),
            ("memory.retrieval_log", {"limit": 1000}),
            ("memory.retrieval_log", {"limit": 0}),
            ("memory.retrieval_log", {"offset": -1}),
            ("memory.analytics", {"bogus": 1}),
        ):
            with pytest.raises(RpcError) as bad:
                client.call(method, params)
            assert bad.value.code == -32602, (method, params)
        with pytest.raises(RpcError) as refused:  # "*" needs a token-authenticated TCP connection
            client.call("memory.retrieval_log", {"namespace": "*"})
        assert refused.value.memos_code == "unauthorized"


def test_window_ends_today_in_utc_and_percentiles_are_nearest_rank() -> None:
    noon = int(datetime(2024, 3, 10, 12, tzinfo=UTC).timestamp() * 1000)
    start, days = window(noon, 3)
    assert days == ["2024-03-08", "2024-03-09", "2024-03-10"]
    assert start == int(datetime(2024, 3, 8, tzinfo=UTC).timestamp() * 1000)
    assert window(start, 1) == (start, ["2024-03-08"])  # midnight belongs to the day it starts
    assert percentile([], 50) is None
    values = list(range(1, 101))
    assert [percentile(values, p) for p in (50, 95, 99, 100)] == [50.0, 95.0, 99.0, 100.0]
    assert [percentile([7, 9], p) for p in (50, 95)] == [7.0, 9.0]
    assert rate([1, 0, 2], [2, 0, 3]) == [0.5, None, 0.6667]
