"""memory.export / memory.import through the real service over JSON-RPC, with the real embedding model.

A small memory is built once (steps, feedback that makes experiences, remembered memories, one forgotten,
one edited, one reinforced), its recall recorded, and exported; the tests then check that importing the
export gives the same recall back — in the same home after a purge and in a fresh home — and that the
namespace, Markdown, Hermes and error paths behave as the contract says.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import RpcError, ServiceClient

AGENT = "hermes"
QUERIES = ("deploy the billing service", "run the billing database migrations", "how should commit messages read")
TURN_TEXT = "deploy the billing service to staging again"
TURN_TS = 50_000_000


def _episode(client: ServiceClient, text: str, reply: str, ts: int, namespace: Any = None) -> str:
    opened = {"agent": AGENT, **({"namespace": namespace} if namespace else {})}
    session = client.call("session.open", opened)["sessionId"]
    turn = {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts}
    episode = str(client.call("turn.start", turn, timeout=60)["query"]["episodeId"])
    client.call(
        "turn.end",
        {"agent": AGENT, "sessionId": session, "episodeId": episode, "ts": ts + 1_000, "agentText": reply},
        timeout=60,
    )
    return episode


def _hits(client: ServiceClient, query: str, **extra: Any) -> list[tuple[str, str]]:
    result = client.call("memory.search", {"query": query, **extra}, timeout=60)
    return [(hit["refKind"], hit["refId"]) for hit in result["hits"]]


def _recall(client: ServiceClient) -> dict[str, list[tuple[str, str, float]]]:
    """What each query recalls, in order, with its score (rounded: vectors embedded again in another batch may
    differ in the last float bits). The scores are what shows a missing vector when keywords alone still rank
    the same rows."""
    out: dict[str, list[tuple[str, str, float]]] = {}
    for query in QUERIES:
        hits = client.call("memory.search", {"query": query}, timeout=60)["hits"]
        out[query] = [(hit["refKind"], hit["refId"], round(hit["score"], 3)) for hit in hits]
    return out


def _injected(client: ServiceClient) -> str:
    session = client.call("session.open", {"agent": AGENT})["sessionId"]
    params = {"agent": AGENT, "sessionId": session, "userText": TURN_TEXT, "ts": TURN_TS}
    return str(client.call("turn.start", params, timeout=60)["injectedContext"])


def _memories(client: ServiceClient, **extra: Any) -> list[dict[str, Any]]:
    return list(client.call("memory.list_memories", {"includeForgotten": True, **extra})["memories"])


def _stable(memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Memories without their access bookkeeping, which every recall moves on (`memory.search` counts it)."""
    return [{k: v for k, v in m.items() if k not in ("accessCount", "lastAccessedAt")} for m in memories]


def _history(client: ServiceClient, memory_id: str) -> list[dict[str, Any]]:
    """A memory's history without its "recalled" events: those are read from the turns' cached results, which
    an export leaves out (a cache, not a record)."""
    events = client.call("memory.history", {"id": memory_id, "kind": "memory"})["events"]
    return [event for event in events if event["event"] != "recalled"]


@dataclass
class Built:
    """A home with a small memory, what it recalled, and its exports (copied out of the home)."""

    home: Path
    jsonl: Path
    markdown: Path
    counts: dict[str, int]
    recall: dict[str, list[tuple[str, str, float]]]
    injected: str
    memories: list[dict[str, Any]]
    ids: dict[str, str]
    history: list[dict[str, Any]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("transfer")
    home = root / "home"
    with ServiceClient.spawn(home) as client:
        failed = _episode(
            client,
            "deploy the billing service to staging",
            "Ran make deploy-staging; it failed because the VPN was down.",
            1_000,
        )
        client.call(
            "feedback.submit",
            {
                "episodeId": failed,
                "polarity": "negative",
                "rationale": "Always check the VPN is connected before deploying billing; run make vpn-check first.",
            },
            timeout=120,
        )
        worked = _episode(
            client,
            "run the billing database migrations",
            "Ran alembic upgrade head in the billing container; all migrations applied.",
            5_000_000,
        )
        client.call(
            "feedback.submit",
            {"episodeId": worked, "polarity": "positive", "rationale": "Right: migrations run inside the container."},
            timeout=120,
        )
        client.call("memory.flush", {}, timeout=120)
        rule = client.call(
            "memory.remember",
            {"content": "Write commit messages in the imperative mood.", "type": "rule", "source": "user"},
        )["id"]
        fact = client.call("memory.remember", {"content": "The billing staging database listens on port 5433."})["id"]
        client.call(
            "memory.update",
            {"id": fact, "kind": "memory", "content": "The billing staging database listens on port 6543."},
        )
        client.call(
            "memory.reinforce", {"id": rule, "kind": "memory", "evidence": "user_confirmed", "evidenceId": "review-1"}
        )
        client.call("memory.link", {"fromId": fact, "toId": rule, "relation": "related"})
        gone = client.call("memory.remember", {"content": "The old CI server was jenkins.example.org."})["id"]
        client.call("memory.forget", {"id": gone, "kind": "memory", "reason": "decommissioned"})

        recall = _recall(client)
        injected = _injected(client)
        client.call("memory.flush", {}, timeout=120)
        exported = client.call("memory.export", {}, timeout=120)
        readable = client.call("memory.export", {"format": "markdown"}, timeout=120)
        built = Built(
            home=home,
            jsonl=Path(shutil.copy(exported["path"], root / "export.jsonl")),
            markdown=Path(shutil.copy(readable["path"], root / "export.md")),
            counts=exported["counts"],
            recall=recall,
            injected=injected,
            memories=_memories(client),
            ids={"rule": rule, "fact": fact, "gone": gone},
            history=_history(client, fact),
        )
    # What the memory holds: every kind the round trip must carry.
    assert all(built.recall.values()), built.recall
    assert {"session", "episode", "turn", "trace", "feedback", "policy", "memory", "audit_event"} <= set(built.counts)
    assert built.counts["memory"] == 3 and built.counts.get("strength_event") == 1
    assert built.counts.get("memory_link") == 1
    assert Path(exported["path"]).parent == home / "exports" and Path(exported["path"]).suffix == ".jsonl"
    assert exported["bytes"] == built.jsonl.stat().st_size
    return built


def test_export_purge_import_gives_the_same_recall_and_reimport_changes_nothing(built: Built) -> None:
    lines = built.jsonl.read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    assert head["format"] == "memos-bridge-export" and head["version"] == 1 and head["schemaVersion"] >= 1
    assert head["namespace"] == {"agentKind": None, "profileId": "default", "workspaceId": None}
    assert head["counts"] == built.counts and sum(built.counts.values()) == len(lines) - 1
    records = [json.loads(line) for line in lines[1:]]
    assert not any("vec" in r["row"] or "vec_summary" in r["row"] or "rid" in r["row"] for r in records)
    assert not any("result_json" in r["row"] for r in records if r["kind"] == "turn")
    forgotten = next(r["row"] for r in records if r["kind"] == "memory" and r["row"]["id"] == built.ids["gone"])
    assert forgotten["forgotten_at"] is not None and forgotten["status"] == "archived"

    with ServiceClient.spawn(built.home) as client:
        assert _recall(client) == built.recall  # a restart changes nothing (the baseline)
        purged = client.call("memory.purge", {"confirm": True})["purged"]
        assert purged["memories"] == 3 and purged["sessions"] >= 2
        assert all(hits == [] for hits in _recall(client).values())
        assert _memories(client) == []

        result = client.call("memory.import", {"path": str(built.jsonl)}, timeout=120)
        assert result["imported"] == built.counts and set(result["skipped"].values()) == {0}
        assert result["purged"] == {}
        assert _memories(client) == built.memories  # contents, statuses, strengths, times
        assert _history(client, built.ids["fact"]) == built.history
        assert _recall(client) == built.recall  # same ids, same order
        assert _injected(client) == built.injected
        events = [event["event"] for event in built.history]
        assert events[:2] == ["created", "updated"]
        rule_events = [event["event"] for event in _history(client, built.ids["rule"])]
        assert rule_events == ["created", "reinforced", "linked"]  # the link from the fact came along
        # Full-text entries came with the rows (the keyword channel alone finds them).
        keyword = {"filters": {"channels": ["keyword"]}}
        assert ("memory", built.ids["fact"]) in _hits(client, "6543", **keyword)
        assert ("memory", built.ids["gone"]) not in _hits(client, "jenkins", **keyword)  # still forgotten

        again = client.call("memory.import", {"path": str(built.jsonl)}, timeout=120)
        assert set(again["imported"].values()) == {0} and again["skipped"] == built.counts
        assert _stable(_memories(client)) == _stable(built.memories)

        # replace: the namespace is purged first, in the same transaction, and rebuilt from the file.
        client.call("memory.remember", {"content": "A memory that only exists after the export."})
        client.call("memory.flush", {}, timeout=60)  # the access counts of the searches above land first
        replaced = client.call("memory.import", {"path": str(built.jsonl), "mode": "replace", "confirm": True})
        assert replaced["purged"]["memories"] == 4 and replaced["imported"] == built.counts
        assert _memories(client) == built.memories
        assert _recall(client) == built.recall


def test_import_into_a_fresh_home_gives_the_same_recall(built: Built, tmp_path: Path) -> None:
    with ServiceClient.spawn(tmp_path / "fresh") as client:
        result = client.call("memory.import", {"path": str(built.jsonl)}, timeout=120)
        assert result["imported"] == built.counts
        assert _memories(client) == built.memories
        assert _recall(client) == built.recall
        assert _injected(client) == built.injected
        # With vectors in the file nothing is embedded again, and the recall is the same too.
        exported = client.call("memory.export", {"path": "with-vectors.jsonl", "includeVectors": True}, timeout=120)
        assert exported["path"] == str(tmp_path / "fresh" / "exports" / "with-vectors.jsonl")
        row = next(
            json.loads(line) for line in Path(exported["path"]).read_text().splitlines() if '"kind":"memory"' in line
        )
        assert isinstance(row["row"]["vec"], str) and len(row["row"]["vec"]) > 100
        # Fewer kinds, or only what is not forgotten: the file holds just that, and the history that goes with it.
        only = client.call("memory.export", {"path": "memories.jsonl", "kinds": ["memory"], "includeForgotten": False})
        assert only["counts"] == {"memory": 2, "memory_link": 1, "audit_event": 3, "strength_event": 1}
        assert built.ids["gone"] not in Path(only["path"]).read_text()
    with ServiceClient.spawn(tmp_path / "fresh2") as client:
        assert client.call("memory.import", {"path": exported["path"]}, timeout=120)["imported"]["memory"] == 3
        assert _recall(client) == built.recall


def test_markdown_export_is_readable_grouped_and_not_importable(built: Built, tmp_path: Path) -> None:
    text = built.markdown.read_text(encoding="utf-8")
    assert text.startswith("<!-- memos-bridge markdown export")
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Experiences" and sections[-1] == "## Remembered"
    remembered = text[text.index("## Remembered") :]
    assert remembered.index("### Rules") < remembered.index("### Facts")
    assert "- Write commit messages in the imperative mood." in remembered
    assert f"`{built.ids['rule']}` · active" in remembered and f"`{built.ids['gone']}` · forgotten" in remembered
    experiences = text[text.index("## Experiences") : text.index("## Remembered")]
    assert "make vpn-check" in experiences  # the negative feedback's lesson, in the user's words
    assert "**Avoid:**" in experiences or "**Fix:**" in experiences or "**Do:**" in experiences
    assert "<sub>`po_" in experiences

    with ServiceClient.spawn(tmp_path / "home") as client:
        with pytest.raises(RpcError) as refused:
            client.call("memory.import", {"path": str(built.markdown)})
        assert refused.value.code == -32602 and refused.value.data["code"] == "invalid_argument"
        assert "Markdown export" in refused.value.message and "jsonl" in refused.value.message
        assert _memories(client) == []


def test_namespaces_are_exported_apart_and_import_moves_into_the_one_named(tmp_path: Path) -> None:
    alice, bob, carol = {"profileId": "alice"}, {"profileId": "bob"}, {"profileId": "carol", "workspaceId": "w1"}
    with ServiceClient.spawn(tmp_path / "home") as client:
        for namespace, word in ((alice, "zanzibarquokka"), (bob, "ulanbatorwombat")):
            _episode(client, f"deploy the {word} service", f"Deployed {word} to production.", 1_000, namespace)
            client.call(
                "memory.remember", {"content": f"The {word} service is owned by the data team.", "namespace": namespace}
            )
        client.call("memory.flush", {}, timeout=120)
        exported = client.call("memory.export", {"namespace": alice, "path": "alice.jsonl"})
        text = Path(exported["path"]).read_text(encoding="utf-8")
        assert "zanzibarquokka" in text and "ulanbatorwombat" not in text
        rows = [json.loads(line)["row"] for line in text.splitlines()[1:]]
        assert {row["owner_profile_id"] for row in rows if "owner_profile_id" in row} == {"alice"}
        assert json.loads(text.splitlines()[0])["namespace"]["profileId"] == "alice"
        assert exported["counts"]["memory"] == 1 and exported["counts"]["trace"] == 1

        alice_hits = _hits(client, "zanzibarquokka service", namespace=alice)
        client.call("memory.purge", {"namespace": alice, "confirm": True})
        moved = client.call("memory.import", {"path": "alice.jsonl", "namespace": carol}, timeout=120)
        assert moved["imported"] == exported["counts"]
        assert _hits(client, "zanzibarquokka service", namespace=alice) == []
        assert _hits(client, "zanzibarquokka service", namespace=carol) == alice_hits
        assert [m["content"] for m in _memories(client, namespace=carol)] == [
            "The zanzibarquokka service is owned by the data team."
        ]
        bob_hits = _hits(client, "ulanbatorwombat service", namespace=bob)
        assert len(bob_hits) >= 2  # bob's step and memory, untouched
        assert not set(bob_hits) & set(_hits(client, "ulanbatorwombat service", namespace=carol))


def test_hermes_memory_files_are_remembered_and_merge_on_reimport(tmp_path: Path) -> None:
    memory_md, user_md = tmp_path / "MEMORY.md", tmp_path / "user.md"
    memory_md.write_text(
        "The project database is PostgreSQL 16 listening on port 5433.\n§\n"
        "Deploys go through GitHub Actions; nobody pushes to main directly.\n§\n\n§\n",
        encoding="utf-8",
    )
    user_md.write_text("The user prefers short answers in British English.\n§\nThe user is called Dana.\n")
    with ServiceClient.spawn(tmp_path / "home") as client:
        first = client.call("memory.import", {"path": str(memory_md)}, timeout=60)
        assert first == {"imported": {"memory": 2}, "skipped": {"memory": 0}, "purged": {}}
        users = client.call("memory.import", {"path": str(user_md)}, timeout=60)
        assert users["imported"] == {"memory": 2}
        stored = {m["content"]: m for m in _memories(client)}
        assert {m["type"] for c, m in stored.items() if "user" in c.casefold()} == {"preference"}
        assert stored["Deploys go through GitHub Actions; nobody pushes to main directly."]["type"] == "fact"
        assert {m["source"] for m in stored.values()} == {"import"}

        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        turn = client.call(
            "turn.start",
            {"agent": AGENT, "sessionId": session, "userText": "which port does the postgres database use?", "ts": 1},
            timeout=60,
        )
        assert "port 5433" in turn["injectedContext"]

        again = client.call("memory.import", {"path": str(memory_md)}, timeout=60)
        assert again == {"imported": {"memory": 0}, "skipped": {"memory": 2}, "purged": {}}
        merged = {m["content"]: m for m in _memories(client)}
        assert len(merged) == 4 and merged["The user is called Dana."]["support"] == 1
        assert merged["The project database is PostgreSQL 16 listening on port 5433."]["support"] == 2

        notes = tmp_path / "notes.txt"
        notes.write_text("The staging cluster runs in eu-west-1.")
        forced = client.call("memory.import", {"path": str(notes), "format": "hermes"}, timeout=60)
        assert forced["imported"] == {"memory": 1}
        replaced = client.call("memory.import", {"path": str(user_md), "mode": "replace", "confirm": True})
        assert replaced["purged"]["memories"] == 5 and replaced["imported"] == {"memory": 2}
        assert sorted(m["type"] for m in _memories(client)) == ["preference", "preference"]


def _refused(client: ServiceClient, method: str, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as caught:
        client.call(method, params, timeout=60)
    return caught.value


def test_bad_inputs_are_refused_with_clear_errors_and_change_nothing(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\xff\xfe this is not an export\n")
    not_json = tmp_path / "notes.jsonl"
    not_json.write_text("hello\n")
    with ServiceClient.spawn(tmp_path / "home") as client:
        kept = client.call("memory.remember", {"content": "The nightly backup runs at 02:00 UTC."})["id"]
        exported = client.call("memory.export", {"path": "base.jsonl"})
        lines = Path(exported["path"]).read_text(encoding="utf-8").splitlines()
        head = json.loads(lines[0])
        memory = json.loads(next(line for line in lines if '"kind":"memory"' in line))
        fresh = {**memory, "row": {**memory["row"], "id": "me_NEWFROMFILE1", "content": "A brand new memory."}}
        broken = tmp_path / "broken.jsonl"
        broken.write_text(
            "\n".join(
                [
                    json.dumps({**head, "counts": {"memory": 2}}),
                    json.dumps(fresh),
                    '{"kind": "memory", "row": {"id": "me_X", ',
                    json.dumps(fresh),
                ]
            )
            + "\n"
        )
        newer = tmp_path / "newer.jsonl"
        newer.write_text(json.dumps({**head, "version": 99}) + "\n")
        before = (_memories(client), client.call("memory.stats", {})["counts"])

        for params, words in (
            ({"path": str(tmp_path / "missing.jsonl")}, "no such file"),
            ({"path": str(garbage)}, "UTF-8"),
            ({"path": str(not_json)}, "not a memos-bridge export"),
            ({"path": str(broken)}, "line 3"),
            ({"path": str(newer)}, "newer memos-bridge"),
            ({"path": str(tmp_path)}, "folder"),
            ({"path": exported["path"], "mode": "replace"}, "confirm: true"),
        ):
            error = _refused(client, "memory.import", params)
            assert error.code == -32602 and error.data["code"] == "invalid_argument", error
            assert words in error.message, error.message
        assert client.call("memory.get_memory", {"id": "me_NEWFROMFILE1"}) is None  # nothing half-imported

        size = Path(exported["path"]).stat().st_size
        taken = _refused(client, "memory.export", {"path": "base.jsonl"})
        assert taken.code == -32000 and taken.data["code"] == "conflict" and "overwrite" in taken.message
        assert Path(exported["path"]).stat().st_size == size
        nowhere = _refused(client, "memory.export", {"path": str(tmp_path / "no" / "such" / "dir" / "x.jsonl")})
        assert nowhere.code == -32602 and "does not exist" in nowhere.message
        unknown = _refused(client, "memory.export", {"sessionId": "se_NOSUCHSESSION"})
        assert unknown.data["code"] == "session_not_found"
        everyone = _refused(client, "memory.export", {"namespace": "*"})
        assert everyone.code == -32602
        assert sorted(p.name for p in (tmp_path / "home" / "exports").iterdir()) == ["base.jsonl"]  # no temp files

        assert (_memories(client), client.call("memory.stats", {})["counts"]) == before
        assert [m["id"] for m in before[0]] == [kept]
        overwritten = client.call("memory.export", {"path": "base.jsonl", "overwrite": True})
        assert overwritten["path"] == exported["path"]


def test_over_tcp_without_the_token_files_stay_under_the_data_home(tmp_path: Path) -> None:
    """Any local user can reach a loopback daemon without a token: it must not read or write the user's files."""
    from tests.e2e.conftest import start_daemon

    home, outside = tmp_path / "home", tmp_path / "outside"
    outside.mkdir()
    daemon = start_daemon(home)
    try:
        with daemon.connect() as anyone:
            anyone.call("memory.remember", {"content": "The build cache lives in /var/cache/build."})
            for method, params in (
                ("memory.export", {"path": str(outside / "stolen.jsonl")}),
                ("memory.export", {"path": "../../outside/escaped.jsonl"}),
                ("memory.import", {"path": str(outside / "planted.jsonl")}),
            ):
                with pytest.raises(RpcError) as refused:
                    anyone.call(method, params)
                assert refused.value.data["code"] == "unauthorized", (method, params)
            assert list(outside.iterdir()) == []
            inside = anyone.call("memory.export", {"path": "mine.jsonl"})  # under <home>/exports: allowed
            assert Path(inside["path"]).resolve() == (home / "exports" / "mine.jsonl").resolve()
            again = anyone.call("memory.import", {"path": "mine.jsonl"})  # everything is there already
            assert not any(again["imported"].values()) and again["skipped"]["memory"] == 1
    finally:
        daemon.proc.terminate()
        daemon.proc.wait(timeout=30)
