"""End to end through the JSON-RPC boundary: a real `memos-bridge serve` subprocess on stdio."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import RpcError, ServiceClient

AGENT = "tester"


def _start(client: ServiceClient, session: str, text: str, ts: int, **extra: Any) -> dict[str, Any]:
    params = {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts, **extra}
    result: dict[str, Any] = client.call("turn.start", params, timeout=60)
    return result


def _end(client: ServiceClient, session: str, episode: str, ts: int, **extra: Any) -> dict[str, Any]:
    params = {"agent": AGENT, "sessionId": session, "episodeId": episode, "ts": ts, **extra}
    result: dict[str, Any] = client.call("turn.end", params, timeout=60)
    return result


MULTI_TOOL = {
    "agentText": "The infoTable tags are namespaced; passing the namespace fixed the lookup.",
    "toolCalls": [
        {
            "name": "bash",
            "input": {"cmd": "python parse_13f.py"},
            "output": "KeyError: 'nameOfIssuer'",
            "errorCode": "KeyError",
        },
        {"name": "bash", "input": {"cmd": "python parse_13f.py --ns it"}, "output": "parsed 312 rows"},
    ],
}


def test_health_and_session_open(service: ServiceClient, home: Path) -> None:
    health = service.call("core.health")
    assert health["ok"] is True
    assert health["schemaVersion"] >= 1
    assert health["paths"]["home"] == str(home)
    assert health["embedder"]["dim"] == 384
    opened = service.call("session.open", {"agent": AGENT})
    assert opened["sessionId"].startswith("se_")
    again = service.call("session.open", {"agent": AGENT, "sessionId": opened["sessionId"]})
    assert again == opened


def test_turn_cycle_captures_every_step_in_order(service: ServiceClient) -> None:
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    start = _start(service, session, "parse the SEC 13F infoTable and total holdings", 1_000)
    assert start["query"]["sessionId"] == session
    episode = start["query"]["episodeId"]
    assert episode.startswith("ep_")
    assert set(start) >= {"query", "hits", "injectedContext", "tierLatencyMs"}
    end = _end(service, session, episode, 5_000, **MULTI_TOOL)
    assert end["episodeId"] == episode
    assert len(end["traceIds"]) == 3 and end["traceId"] == end["traceIds"][-1]

    timeline = service.call("memory.timeline", {"episodeId": episode})["traces"]
    assert [t["id"] for t in timeline] == end["traceIds"]
    assert [t["stepKind"] for t in timeline] == ["tool", "tool", "reply"]
    assert len({t["turnId"] for t in timeline}) == 1 and timeline[0]["turnId"] == 1_000
    assert timeline[0]["errorSignatures"] == ["KeyError: <str>"]
    assert timeline[0]["toolCalls"][0]["name"] == "bash"
    assert timeline[2]["priority"] == 0.5

    trace = service.call("memory.get_trace", {"id": end["traceIds"][1]})
    assert trace["userText"] == "parse the SEC 13F infoTable and total holdings"
    assert trace["episodeStatus"] == "open"
    assert service.call("memory.get_trace", {"id": "tr_missing"}) is None

    listed = service.call("memory.list_traces", {"sessionId": session})["traces"]
    assert {t["id"] for t in listed} == set(end["traceIds"])
    episodes = service.call("memory.list_episodes", {"sessionId": session})
    assert episodes["episodeIds"] == [episode]
    assert episodes["episodes"][0]["turnCount"] == 1
    assert episodes["episodes"][0]["preview"].startswith("parse the SEC 13F")


def test_retried_turn_end_stores_nothing_twice(service: ServiceClient) -> None:
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    episode = _start(service, session, "fix the parser", 1_000)["query"]["episodeId"]
    first = _end(service, session, episode, 2_000, **MULTI_TOOL)
    retry = _end(service, session, episode, 2_500, **MULTI_TOOL)
    assert retry["traceIds"] == first["traceIds"]
    assert len(service.call("memory.timeline", {"episodeId": episode})["traces"]) == 3


def test_turn_key_retry_returns_the_same_result_and_conflicts_on_other_text(service: ServiceClient) -> None:
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    first = _start(service, session, "what is the plan", 1_000, turnKey="k1")
    again = _start(service, session, "what is the plan", 1_001, turnKey="k1")
    assert again == first
    episodes = service.call("memory.list_episodes", {"sessionId": session})["episodes"]
    assert episodes[0]["turnCount"] == 1
    with pytest.raises(RpcError) as err:
        _start(service, session, "something else", 1_002, turnKey="k1")
    assert err.value.code == -32000 and err.value.memos_code == "conflict"


def test_concurrent_retries_with_one_turn_key_share_one_turn(service: ServiceClient) -> None:
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    params = {"agent": AGENT, "sessionId": session, "userText": "same", "ts": 10, "turnKey": "dup"}
    futures = [service.call_async("turn.start", params) for _ in range(5)]
    results = [f.result(timeout=60) for f in futures]
    assert all(r == results[0] for r in results)
    assert service.call("memory.list_episodes", {"sessionId": session})["episodes"][0]["turnCount"] == 1


def test_recall_in_a_later_session(service: ServiceClient) -> None:
    first = service.call("session.open", {"agent": AGENT})["sessionId"]
    episode = _start(service, first, "parse the SEC 13F infoTable", 1_000)["query"]["episodeId"]
    captured = _end(service, first, episode, 2_000, **MULTI_TOOL)["traceIds"]
    service.call("session.close", {"sessionId": first})
    second = service.call("session.open", {"agent": AGENT})["sessionId"]
    recall = _start(service, second, "13F infoTable parser raises KeyError nameOfIssuer", 90_000)
    assert recall["query"]["sessionId"] == second

    def of_first_task(hit: dict[str, Any]) -> bool:
        """A step of the first task, its roll-up, or an experience distilled from its steps (which then stands
        for them, so the steps are not injected beside it)."""
        if hit["refId"] in captured or hit["refId"] == episode:
            return True
        policy = service.call("memory.get_policy", {"id": hit["refId"]}) if hit["refKind"] == "experience" else None
        return bool(policy) and bool(set(policy["sourceTraceIds"]) & set(captured))

    assert any(of_first_task(hit) for hit in recall["hits"])
    block = recall["injectedContext"]
    assert block.startswith("<relevant-memories>") and block.rstrip().endswith("</relevant-memories>")
    assert "untrusted" in block.casefold()  # the block says recalled memory is data, not instructions


def test_a_new_namespace_does_not_see_other_namespaces(service: ServiceClient) -> None:
    ns_a = {"profileId": "alice"}
    ns_b = {"profileId": "bob"}
    sa = service.call("session.open", {"agent": AGENT, "namespace": ns_a})["sessionId"]
    episode = _start(service, sa, "deploy the kubernetes cluster with helm", 1_000)["query"]["episodeId"]
    _end(service, sa, episode, 2_000, agentText="Deployed the kubernetes cluster with helm upgrade --install.")
    sb = service.call("session.open", {"agent": AGENT, "namespace": ns_b})["sessionId"]
    other = _start(service, sb, "deploy the kubernetes cluster with helm", 5_000)
    assert other["hits"] == [] and other["injectedContext"] == ""
    sa2 = service.call("session.open", {"agent": AGENT, "namespace": ns_a})["sessionId"]
    same = _start(service, sa2, "deploy the kubernetes cluster with helm", 6_000)
    assert same["hits"]
    found = service.call("memory.search", {"query": "kubernetes helm", "namespace": ns_b})
    assert found["hits"] == []


def test_application_errors_have_stable_codes(service: ServiceClient) -> None:
    with pytest.raises(RpcError) as err:
        service.call("session.close", {"sessionId": "se_nope"})
    assert err.value.code == -32000 and err.value.memos_code == "session_not_found"
    assert err.value.data == {
        "name": "MemosError",
        "code": "session_not_found",
        "message": "session not found: se_nope",
    }
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    with pytest.raises(RpcError) as err:
        _end(service, session, "ep_nope", 1, agentText="x")
    assert err.value.memos_code == "episode_not_found"
    with pytest.raises(RpcError) as err:
        service.call("episode.close", {"episodeId": "ep_nope"})
    assert err.value.memos_code == "episode_not_found"
    with pytest.raises(RpcError) as err:
        service.call("memory.timeline", {"episodeId": "ep_nope"})
    assert err.value.memos_code == "episode_not_found"


def test_bad_params_list_what_is_wrong(service: ServiceClient) -> None:
    with pytest.raises(RpcError) as err:
        service.call("turn.start", {"agent": AGENT, "ts": "yesterday", "bogus": 1})
    assert err.value.code == -32602
    assert err.value.memos_code == "invalid_argument"
    locs = {e["loc"] for e in err.value.data["details"]["errors"]}
    assert {"sessionId", "userText", "ts", "bogus"} <= locs
    with pytest.raises(RpcError) as err:
        service.call("session.open", ["positional"])
    assert err.value.code == -32602
    with pytest.raises(RpcError) as err:
        service.call("no.such.method")
    assert err.value.code == -32601


def test_events_are_pushed_as_notifications(service: ServiceClient) -> None:
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    episode = _start(service, session, "hello there, list the files", 1)["query"]["episodeId"]
    _end(service, session, episode, 2, agentText="Listed 3 files.")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        types = [p["type"] for m, p in service.notifications if m == "events.notify"]
        if "trace.created" in types:
            break
        time.sleep(0.05)
    events = [p for m, p in service.notifications if m == "events.notify"]
    types = [e["type"] for e in events]
    assert {"session.opened", "episode.opened", "trace.created"} <= set(types)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)
    created = next(e for e in events if e["type"] == "trace.created")
    assert created["payload"]["episodeId"] == episode


def test_host_llm_complete_round_trip_and_concurrency(service: ServiceClient) -> None:
    asked: list[dict[str, Any]] = []

    def host_llm(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        time.sleep(1.0)  # a slow host model
        return {"text": "pong", "model": "host-model", "usage": {"totalTokens": 3}}

    service.on_request("host.llm.complete", host_llm)
    service.call("core.health")  # measure steady state, not process start-up
    slow = service.call_async("llm.test", {"prompt": "say pong"})
    time.sleep(0.1)
    started = time.monotonic()
    service.call("core.health")
    fast_elapsed = time.monotonic() - started
    result = slow.result(timeout=30)
    assert fast_elapsed < 0.5, "a slow request must not block a fast one"
    assert result["ok"] is True and result["text"] == "pong" and result["model"] == "host-model"
    assert asked[0]["messages"] == [{"role": "user", "content": "say pong"}]


def test_llm_test_reports_a_failing_host(service: ServiceClient) -> None:
    def broken(params: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("model offline")

    service.on_request("host.llm.complete", broken)
    result = service.call("llm.test", {})
    assert result["ok"] is False and result["error"]["code"] == "llm_unavailable"


def test_restart_keeps_data(home: Path) -> None:
    with ServiceClient.spawn(home) as client:
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        episode = _start(client, session, "configure the nginx reverse proxy", 1_000)["query"]["episodeId"]
        ids = _end(client, session, episode, 2_000, agentText="Added proxy_pass to nginx.conf and reloaded.")[
            "traceIds"
        ]
    with ServiceClient.spawn(home) as client:
        assert client.call("memory.get_trace", {"id": ids[0]})["agentText"].startswith("Added proxy_pass")
        found = client.call("memory.search", {"query": "nginx reverse proxy"})
        assert ids[0] in [hit["refId"] for hit in found["hits"]]
        # the same session continues its episode after the restart
        again = _start(client, session, "also enable gzip", 3_000)
        assert again["query"]["episodeId"] == episode


def _raw_session(home: Path, lines: list[bytes]) -> tuple[list[dict[str, Any]], bytes, int, float]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memos_bridge", "serve", "--home", str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    started = time.monotonic()
    out, err = proc.communicate(b"".join(lines), timeout=60)
    elapsed = time.monotonic() - started
    messages = [json.loads(line) for line in out.splitlines() if line.strip()]
    replies = [m for m in messages if not (isinstance(m, dict) and m.get("method") == "events.notify")]
    return replies, err, proc.returncode, elapsed


def test_framing_errors_stdout_purity_and_eof_shutdown(home: Path) -> None:
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"core.health"}\n',
        b"\n",
        b"   \n",
        b"{not json\n",
        b'{"jsonrpc":"1.0","id":2,"method":"core.health"}\n',
        b'{"jsonrpc":"2.0","method":"core.health"}\n',  # notification: executed, not answered
        b'[{"jsonrpc":"2.0","id":3,"method":"core.health"},{"jsonrpc":"2.0","id":4,"method":"nope"}]\n',
        b'{"jsonrpc":"2.0","id":5,"method":"session.open","params":{"agent":"x"}}',  # no newline at EOF
    ]
    replies, _err, code, elapsed = _raw_session(home, lines)
    assert code == 0 and elapsed < 20
    by_id: dict[Any, Any] = {}
    for reply in replies:
        for item in reply if isinstance(reply, list) else [reply]:
            assert item["jsonrpc"] == "2.0"
            by_id.setdefault(item.get("id"), []).append(item)
    assert by_id[1][0]["result"]["ok"] is True
    # both envelope errors answer with id null (the id of an invalid request is not trusted)
    assert sorted(e["error"]["code"] for e in by_id[None]) == [-32700, -32600]
    assert by_id[3][0]["result"]["ok"] is True and by_id[4][0]["error"]["code"] == -32601
    assert by_id[5][0]["result"]["sessionId"].startswith("se_")
    assert len(replies) == 5  # nothing else on stdout: no notification answer, no stray output
    assert sum(isinstance(r, list) for r in replies) == 1


def test_oversized_line_gets_an_error_and_the_stream_continues(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[transport]\nmax_line_bytes = 4096\n")
    big = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session.open",
            "params": {"agent": "x", "meta": {"blob": "a" * 10_000}},
        }
    ).encode()
    replies, _err, code, _ = _raw_session(home, [big + b"\n", b'{"jsonrpc":"2.0","id":2,"method":"core.health"}\n'])
    assert code == 0
    assert replies[0]["id"] is None and replies[0]["error"]["data"]["code"] == "payload_too_large"
    assert replies[1]["id"] == 2 and replies[1]["result"]["ok"]


def test_invalid_config_fails_fast_on_stderr_not_stdout(home: Path) -> None:
    # A corrupt config value is reported at startup on stderr with exit code 2, never on stdout.
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[storage]\nbusy_timeout_ms = 'soon'\n")
    replies, err, code, _ = _raw_session(home, [b'{"jsonrpc":"2.0","id":1,"method":"core.health"}\n'])
    assert code == 2 and replies == []
    assert b"busy_timeout_ms" in err


def test_many_concurrent_calls_are_all_answered_by_id(service: ServiceClient) -> None:
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    futures = [
        service.call_async("memory.list_episodes", {"sessionId": session, "limit": 1 + i % 5}) for i in range(200)
    ]
    assert all(isinstance(f.result(timeout=60)["episodeIds"], list) for f in futures)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(20):
                service.call("core.health")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_working_service_returns_freed_heap_pages_and_reports_them(home: Path) -> None:
    """`core.health.process` shows resident memory; a service that worked is trimmed each interval (glibc)."""
    from memos_bridge.heap import can_trim

    env = {"MEMOS_BRIDGE_TRANSPORT__HEAP_TRIM_INTERVAL_S": "0.3"}
    with ServiceClient.spawn(home, env=env) as client:
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        start = _start(client, session, "parse the SEC 13F infoTable and total holdings", 1_000)
        _end(client, session, start["query"]["episodeId"], 2_000, **MULTI_TOOL)
        deadline = time.monotonic() + 20
        process = client.call("core.health")["process"]
        while can_trim() and process["heapTrims"] < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
            process = client.call("core.health")["process"]
        assert process["rssMib"] > 50
        if can_trim():
            assert process["heapTrims"] >= 1
            assert process["heapReleasedMib"] >= 0
            trims = process["heapTrims"]
            time.sleep(1.5)  # idle: nothing new was freed, so it is not trimmed again
            idle = client.call("core.health")["process"]["heapTrims"]
            assert idle - trims <= 1  # at most the trim that was already due when the health call arrived


def test_health_counts_the_vectors_held_in_memory_once_per_step_embedded_once(service: ServiceClient) -> None:
    """Tool and reply steps embedded once (the default) are held once, not in both step indexes."""
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    start = _start(service, session, "parse the SEC 13F infoTable and total holdings", 1_000)
    _end(service, session, start["query"]["episodeId"], 2_000, **MULTI_TOOL)
    service.call("memory.flush", timeout=120)
    _start(service, session, "total the 13F holdings by issuer", 3_000)  # the indexes are loaded by now
    stats = service.call("memory.stats", {"namespace": {"agentKind": AGENT, "profileId": "default"}})["counts"]
    stored = sum(sum(by_status.values()) for by_status in stats.values())
    steps = sum(stats["trace"].values())
    process = service.call("core.health")["process"]
    assert steps >= 3
    assert process["vectorRows"] == stored  # one vector per stored memory: no step counted twice
    assert process["vectorMib"] == round(stored * 384 * 4 / 2**20, 1)
