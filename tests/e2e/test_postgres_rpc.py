"""The service on a real PostgreSQL server (PyPI `pgserver`: PostgreSQL 16 with pgvector, a private server in a
temporary folder, no root, no network), through JSON-RPC: the learning loop works end to end — a step
captured, a correction given, the lesson recalled by the next related task — the health says which backend
serves the home and what runs inside it, and the searches run in the database: keywords through the
tsvector and 3-gram indexes, meaning through pgvector.

The server is the session's (`postgres_url` in tests/conftest.py: a fresh database for this test). Without
`pgserver` the test is skipped, except where `MEMOS_BRIDGE_REQUIRE_POSTGRES=1` (CI sets it).
"""

from __future__ import annotations

from pathlib import Path

from memos_bridge.client import ServiceClient


def test_the_learning_loop_runs_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    env = {"MEMOS_BRIDGE_STORAGE__URL": postgres_url, "MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}
    with ServiceClient.spawn(tmp_path / "home", env=env) as client:
        storage = client.call("core.health")["storage"]
        assert storage["dialect"] == "postgresql" and storage["serverVersion"].startswith("16")
        assert storage["fullText"] is True  # tsvector and 3-gram GIN indexes (migration 8)
        assert storage["vectorExtension"].startswith("0.")  # pgvector searches the vectors (HNSW)

        session = client.call("session.open", {"agent": "tester", "namespace": {"workspaceId": "shop"}})["sessionId"]
        started = client.call(
            "turn.start",
            {"agent": "tester", "sessionId": session, "userText": "total the parcel weights in kilograms", "ts": 1000},
        )
        episode = started["query"]["episodeId"]
        calls = [{"name": "bash", "input": {"cmd": "python sum.py parcels.csv"}, "output": "1234.5"}]
        end = {"agent": "tester", "sessionId": session, "episodeId": episode, "agentText": "1234.5 kg", "ts": 1001}
        assert len(client.call("turn.end", {**end, "toolCalls": calls})["traceIds"]) == 2
        # a retry of the same turn.end stores nothing twice (the step keys are unique)
        assert client.call("turn.end", {**end, "toolCalls": calls})["traceIds"]
        assert len(client.call("memory.timeline", {"episodeId": episode})["traces"]) == 2
        # keyword channels alone (no vectors): a word, and an identifier found as a substring
        keyword = {"filters": {"channels": ["keyword"]}, "sessionId": session}
        for query in ("parcel weights", "sum.py"):
            found = client.call("memory.search", {"query": query, **keyword})["hits"]
            assert found and all(not {"vec_summary", "vec_action"} & set(hit["channels"]) for hit in found), query
        lesson = "The weight column is in pounds, not kilograms: multiply by 0.4536 to get kilograms."
        client.call("feedback.submit", {"episodeId": episode, "polarity": "negative", "rationale": lesson})
        client.call("memory.flush", {}, timeout=300)

        later = client.call(
            "turn.start",
            {
                "agent": "tester",
                "sessionId": session,
                "userText": "new task: average parcel weight in kg",
                "ts": 90_000,
            },
        )
        assert "0.4536" in later["injectedContext"]
        assert later["stats"].get("skippedReason") is None

        kept = client.call("memory.remember", {"content": "Release notes go in docs/CHANGES.md", "sessionId": session})
        found = client.call("memory.search", {"query": "where do the release notes go", "sessionId": session})
        assert kept["id"] in {hit["refId"] for hit in found["hits"]}
        other = client.call("session.open", {"agent": "tester", "namespace": {"workspaceId": "bank"}})["sessionId"]
        elsewhere = client.call("memory.search", {"query": "where do the release notes go", "sessionId": other})
        assert kept["id"] not in {hit["refId"] for hit in elsewhere["hits"]}  # namespaces stay apart in SQL too
