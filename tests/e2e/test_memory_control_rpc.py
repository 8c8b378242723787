"""Memory a user can see and correct, through the real service: remember, update, forget, history, purge.

Each test drives `memos-bridge serve` over stdio with the real embedding model, as a host would.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from memos_bridge.client import RpcError, ServiceClient

pytestmark = pytest.mark.usefixtures("backend_env")  # every test on SQLite, then on PostgreSQL

AGENT = "hermes"


def _turn(client: ServiceClient, session: str, text: str, ts: int) -> dict[str, Any]:
    return client.call("turn.start", {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts}, timeout=60)


def _captured(client: ServiceClient, session: str, text: str, reply: str, ts: int) -> dict[str, str]:
    episode = _turn(client, session, text, ts)["query"]["episodeId"]
    traces = client.call(
        "turn.end",
        {"agent": AGENT, "sessionId": session, "episodeId": episode, "ts": ts + 1_000, "agentText": reply},
        timeout=60,
    )["traceIds"]
    return {"episode": episode, "trace": traces[-1]}


def _search_ids(client: ServiceClient, query: str, **extra: Any) -> list[str]:
    return [hit["refId"] for hit in client.call("memory.search", {"query": query, **extra}, timeout=60)["hits"]]


def test_a_remembered_memory_is_recalled_merged_and_expires(tmp_path: Path) -> None:
    with ServiceClient.spawn(tmp_path / "home") as client:
        fact = client.call(
            "memory.remember",
            {"content": "The staging database listens on port 5433, not the default 5432.", "importance": 0.9},
        )
        assert fact["kind"] == "memory" and fact["merged"] is False
        rule = client.call(
            "memory.remember",
            {"content": "Write commit messages in the imperative mood.", "type": "rule", "source": "user"},
        )
        # The same words again (case and spacing aside) and a paraphrase merge into the stored memory.
        again = client.call(
            "memory.remember", {"content": "the staging database listens on PORT 5433, not the default 5432."}
        )
        assert again == {"id": fact["id"], "kind": "memory", "merged": True}
        stored = client.call("memory.get_memory", {"id": fact["id"]})
        assert stored["support"] == 2 and stored["importance"] == 0.9 and stored["type"] == "fact"
        assert client.call("memory.get_memory", {"id": rule["id"]})["protected"] is True

        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        block = _turn(client, session, "connect psql to the staging database", 1_000)["injectedContext"]
        assert "- Fact: The staging database listens on port 5433" in block  # in its own words, labelled
        assert "imperative mood" not in block  # relevance decides: the commit rule is about something else
        commit = _turn(client, session, "commit the fix for the login form and push the branch", 2_000_000)
        assert "Rule (the user's own): Write commit messages in the imperative mood." in commit["injectedContext"]
        # Its history says what it was recalled for (the turns' requests) and what it is linked to.
        client.call("memory.link", {"fromId": fact["id"], "toId": rule["id"], "relation": "related"})
        client.call("memory.flush", {}, timeout=60)  # the turns' results are written after their answers
        events = client.call("memory.history", {"id": fact["id"], "kind": "memory"})["events"]
        recalled = [e["detail"]["query"] for e in events if e["event"] == "recalled"]
        assert recalled == ["connect psql to the staging database"]
        linked = [e["detail"] for e in events if e["event"] == "linked"]
        assert linked == [{"relation": "related", "direction": "to", "kind": "memory", "id": rule["id"]}]

        # A time-bound fact: recalled until it expires, then archived by the decay run and restorable.
        soon = client.call(
            "memory.remember", {"content": "The release freeze on the payments repository lasts today.", "ttlMs": 1_500}
        )
        assert soon["id"] in _search_ids(client, "payments repository release freeze")
        time.sleep(1.6)
        assert soon["id"] not in _search_ids(client, "payments repository release freeze")
        assert client.call("memory.decay", {})["expired"] == 1
        assert client.call("memory.get_memory", {"id": soon["id"]})["status"] == "archived"
        client.call("memory.restore", {"id": soon["id"], "kind": "memory"})
        assert soon["id"] in _search_ids(client, "payments repository release freeze")
        events = [e["event"] for e in client.call("memory.history", {"id": soon["id"], "kind": "memory"})["events"]]
        assert events == ["created", "expired", "restored"]


def test_update_reindexes_and_forget_hides_everywhere_until_restored(tmp_path: Path) -> None:
    with ServiceClient.spawn(tmp_path / "home") as client:
        memory = client.call("memory.remember", {"content": "Nightly backups are written to the bucket named orchard."})
        keyword = {"filters": {"channels": ["keyword"]}}
        assert memory["id"] in _search_ids(client, "orchard bucket", **keyword)
        updated = client.call(
            "memory.update",
            {"id": memory["id"], "kind": "memory", "content": "Nightly backups go to the bucket named quarry."},
        )
        assert updated["changed"] == ["content"] and "quarry" in updated["memory"]["content"]
        assert memory["id"] in _search_ids(client, "quarry bucket", **keyword)
        assert memory["id"] not in _search_ids(client, "orchard", **keyword)  # the old words are out of the index

        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        step = _captured(
            client,
            session,
            "rotate the nginx logs on the gateway",
            "Configured logrotate weekly for the gateway.",
            1_000,
        )
        client.call("memory.flush", {}, timeout=120)
        assert step["trace"] in _search_ids(client, "nginx logrotate gateway")
        forgotten = client.call("memory.forget", {"id": step["trace"], "kind": "trace", "reason": "wrong host"})
        assert forgotten["ok"] is True
        assert step["trace"] not in _search_ids(client, "nginx logrotate gateway")
        assert step["trace"] not in [
            t["id"] for t in client.call("memory.list_traces", {"sessionId": session})["traces"]
        ]
        listed = client.call("memory.list_traces", {"sessionId": session, "includeForgotten": True})["traces"]
        assert [t["forgottenAt"] for t in listed if t["id"] == step["trace"]] == [
            pytest.approx(time.time() * 1000, abs=60_000)
        ]
        timeline = client.call("memory.timeline", {"episodeId": step["episode"]})["traces"]
        assert step["trace"] not in [t["id"] for t in timeline]
        every = client.call("memory.timeline", {"episodeId": step["episode"], "includeForgotten": True})["traces"]
        assert step["trace"] in [t["id"] for t in every]
        later = _turn(
            client, client.call("session.open", {"agent": AGENT})["sessionId"], "rotate nginx logs", 9_000_000
        )
        assert step["trace"] not in later["injectedContext"]
        client.call("memory.restore", {"id": step["trace"], "kind": "trace"})
        assert step["trace"] in _search_ids(client, "nginx logrotate gateway")

        history = client.call("memory.history", {"id": step["trace"], "kind": "trace"})["events"]
        assert [e["event"] for e in history] == ["created", "forgotten", "restored"]
        assert history[1]["detail"]["reason"] == "wrong host" and history[0]["detail"]["episodeId"] == step["episode"]
        edits = client.call("memory.history", {"id": memory["id"], "kind": "memory"})["events"]
        change = next(e for e in edits if e["event"] == "updated")["detail"]["changes"]["content"]
        assert "orchard" in change["old"] and "quarry" in change["new"]

        with pytest.raises(RpcError) as wrong:
            client.call("memory.update", {"id": step["trace"], "kind": "trace", "importance": 0.3})
        assert wrong.value.code == -32602 and "importance" in wrong.value.message
        with pytest.raises(RpcError) as missing:
            client.call("memory.forget", {"id": "me_NOSUCHMEMORY", "kind": "memory"})
        assert missing.value.data["code"] == "memory_not_found"


def test_purge_leaves_nothing_of_the_content_and_other_namespaces_intact(tmp_path: Path, backend_env: str) -> None:
    home = tmp_path / "home"
    alice, bob = {"profileId": "alice"}, {"profileId": "bob"}
    secret_a, secret_b = "zanzibarquokka", "ulanbatorwombat"
    with ServiceClient.spawn(home) as client:
        for namespace, word in ((alice, secret_a), (bob, secret_b)):
            session = client.call("session.open", {"agent": AGENT, "namespace": namespace})["sessionId"]
            _captured(client, session, f"deploy the {word} service", f"Deployed {word} to production.", 1_000)
            client.call(
                "memory.remember", {"content": f"The {word} service owner is the data team.", "namespace": namespace}
            )
            _turn(client, session, f"check the {word} deployment", 2_000_000)
        client.call("memory.flush", {}, timeout=120)

        with pytest.raises(RpcError) as unconfirmed:
            client.call("memory.purge", {"namespace": alice, "confirm": False})
        assert unconfirmed.value.code == -32602
        result = client.call("memory.purge", {"namespace": alice, "confirm": True})
        assert (
            result["purged"]["traces"] >= 1 and result["purged"]["memories"] == 1 and result["purged"]["sessions"] == 1
        )
        assert _search_ids(client, f"{secret_a} service", namespace=alice) == []
        assert len(_search_ids(client, f"{secret_b} service", namespace=bob)) >= 2  # bob's step and memory

    if backend_env == "postgresql":  # every row of every table (search side tables too), read as text
        url = os.environ["MEMOS_BRIDGE_STORAGE__URL"]
        assert _postgres_tables_holding(url, secret_a) == []
        assert "traces" in _postgres_tables_holding(url, secret_b)
        return
    db = sqlite3.connect(home / "memos.db")
    db.execute("VACUUM")
    db.close()
    raw = b"".join(path.read_bytes() for path in home.glob("memos.db*"))
    assert secret_a.encode() not in raw
    assert secret_b.encode() in raw


def _postgres_tables_holding(url: str, word: str) -> list[str]:
    """The tables of a PostgreSQL database with a row whose text form contains `word`."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                text("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
            ).scalars()
            return [
                table
                for table in tables
                if conn.execute(
                    text(f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE :p'), {"p": f"%{word}%"}
                ).scalar_one()
            ]
    finally:
        engine.dispose()


def test_failures_archive_a_memory_reflect_consolidates_and_stats_count(tmp_path: Path) -> None:
    with ServiceClient.spawn(tmp_path / "home") as client:
        wrong = client.call("memory.remember", {"content": "The billing service deploys with make ship-it."})
        users = client.call(
            "memory.remember", {"content": "Never deploy billing on Fridays.", "type": "rule", "source": "user"}
        )
        for n in range(6):  # six failures: an agent's note leaves recall, the user's own rule stays at the floor
            for memory in (wrong, users):
                client.call(
                    "memory.reinforce",
                    {"id": memory["id"], "kind": "memory", "evidence": "failure", "evidenceId": f"{memory['id']}-{n}"},
                )
        assert client.call("memory.get_memory", {"id": wrong["id"]})["status"] == "archived"
        kept = client.call("memory.get_memory", {"id": users["id"]})
        assert kept["status"] == "active" and kept["strength"] == pytest.approx(0.1)
        hits = _search_ids(client, "how do I deploy the billing service")
        assert wrong["id"] not in hits and users["id"] in hits
        why = client.call("memory.history", {"id": wrong["id"], "kind": "memory"})["events"]
        names = [e["event"] for e in why]
        assert names == ["created", *["reinforced"] * 5, "archived", "reinforced"]  # the fifth took it under
        assert why[6]["detail"] == {
            "reason": "failures",
            "strength": pytest.approx(0.084, abs=1e-3),
            "recallFloor": 0.1,
        }

        # Two memories an edit made equal are folded by reflect into the older one (archived, not deleted).
        first = client.call("memory.remember", {"content": "The VPN gateway for the lab is vpn.lab.example.org."})
        second = client.call("memory.remember", {"content": "Lab printers are on the third floor.", "importance": 0.8})
        client.call(
            "memory.update",
            {"id": second["id"], "kind": "memory", "content": "The VPN gateway for the lab is vpn.lab.example.org"},
        )
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        step = _captured(client, session, "connect to the lab VPN", "Connected through vpn.lab.example.org.", 1_000)
        client.call("feedback.submit", {"episodeId": step["episode"], "polarity": "positive", "rationale": "works"})
        _turn(client, session, "what is the lab VPN gateway", 3_000_000)
        _turn(client, session, "order a pizza for the team", 6_000_000)
        reflected = client.call("memory.reflect", {}, timeout=120)
        assert reflected["merged"] == 1 and reflected["episodes"] >= 1
        assert reflected["changes"]["memory"] == {"active": -1, "archived": 1}
        merged = client.call("memory.get_memory", {"id": first["id"]})
        assert merged["support"] == 2 and merged["importance"] == 0.8
        assert client.call("memory.get_memory", {"id": second["id"]})["status"] == "archived"
        totals = {kind: sum(n.values()) for kind, n in client.call("memory.stats", {})["counts"].items()}
        again = client.call("memory.reflect", {}, timeout=120)
        assert again["merged"] == 0 and again["episodes"] == reflected["episodes"]
        # Re-running the chains creates nothing new (a status may still move, e.g. a skill trial resolving).
        assert {kind: sum(n.values()) for kind, n in client.call("memory.stats", {})["counts"].items()} == totals
        assert all(sum(delta.values()) == 0 for delta in again["changes"].values())

        stats = client.call("memory.stats", {})
        assert stats["counts"]["memory"] == {"active": 2, "archived": 2}
        assert stats["types"]["memory"] == {"fact": 1, "rule": 1}
        assert sum(b["count"] for b in stats["strength"]) == sum(b["count"] for b in stats["ageDays"]) > 0
        assert stats["turns"] == 3 and 1 <= stats["turnsWithRecall"] <= 3
        assert stats["recallHitRate"] == pytest.approx(stats["turnsWithRecall"] / 3, abs=1e-3)
