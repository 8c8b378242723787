"""The learning loop through the JSON-RPC boundary: feedback.submit, memory.flush, routing, host LLM scoring."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import RpcError, ServiceClient

pytestmark = pytest.mark.usefixtures("backend_env")  # every test on SQLite, then on PostgreSQL

AGENT = "tester"


def _start(client: ServiceClient, session: str, text: str, ts: int) -> dict[str, Any]:
    result: dict[str, Any] = client.call(
        "turn.start", {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts}, timeout=60
    )
    return result


def _end(client: ServiceClient, session: str, episode: str, ts: int, **extra: Any) -> dict[str, Any]:
    params = {"agent": AGENT, "sessionId": session, "episodeId": episode, "ts": ts, **extra}
    result: dict[str, Any] = client.call("turn.end", params, timeout=60)
    return result


TOOLS = [
    {"name": "bash", "input": {"cmd": "python parse_13f.py"}, "output": "parsed 312 rows"},
    {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"},
]


def _episode(client: ServiceClient, episode_id: str) -> dict[str, Any]:
    listed = client.call("memory.list_episodes", {"limit": 50})
    return next(e for e in listed["episodes"] if e["id"] == episode_id)


def test_feedback_rescores_before_replying_and_a_retry_counts_once(service: ServiceClient) -> None:
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    episode = _start(service, session, "Total the 13F holdings per issuer into answers.json", 1_000)["query"][
        "episodeId"
    ]
    traces = _end(service, session, episode, 2_000, agentText="Wrote answers.json.", toolCalls=TOOLS)["traceIds"]
    service.call("episode.close", {"episodeId": episode})
    flushed = service.call("memory.flush", {}, timeout=60)
    assert flushed["ok"] is True and flushed["pending"] == 0 and flushed["chainsRun"] >= 1
    assert _episode(service, episode)["rTask"] == pytest.approx(0.1)
    params = {
        "episodeId": episode,
        "traceId": traces[-1],
        "polarity": "negative",
        "magnitude": 1.0,
        "rationale": "values must be in thousands",
        "raw": {"verifier": {"passed": 1, "total": 5}},
        "evidenceId": "verifier-run-7",
    }
    stored = service.call("feedback.submit", params, timeout=60)
    assert stored["id"].startswith("fb_") and stored["traceId"] == traces[-1] and stored["episodeId"] == episode
    rescored = _episode(service, episode)["rTask"]
    assert rescored is not None and rescored < 0  # partial credit (1/5): a failure-side reward
    assert service.call("feedback.submit", params, timeout=60)["id"] == stored["id"]  # same evidenceId
    with pytest.raises(RpcError) as bad:
        service.call("feedback.submit", {"episodeId": episode, "polarity": "sideways"})
    assert bad.value.code == -32602
    with pytest.raises(RpcError) as missing:
        service.call("feedback.submit", {"episodeId": "ep_missing", "polarity": "positive"})
    assert missing.value.data["code"] == "episode_not_found"


def test_a_new_task_cue_starts_a_new_episode_and_the_old_one_gets_scored_by_the_host_llm(home: Path) -> None:
    asked: list[str] = []

    def host_llm(params: dict[str, Any]) -> dict[str, Any]:
        system = params["messages"][0]["content"]
        asked.append(system[:40])
        if "goal_achievement" in system:
            text = {"goal_achievement": 0.8, "process_quality": 0.6, "user_satisfaction": 0.4, "label": "success"}
        elif '"scores"' in system:
            text = {"scores": [{"idx": 1, "alpha": 0.7, "usable": True}]}
        else:
            text = {"relation": "follow_up", "confidence": 0.5}
        return {"text": json.dumps(text)}

    env = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}
    with ServiceClient.spawn(home, env=env) as client:
        client.on_request("host.llm.complete", host_llm)
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        first = _start(client, session, "Total the 13F holdings per issuer into answers.json", 1_000)["query"][
            "episodeId"
        ]
        _end(client, session, first, 2_000, agentText="Wrote answers.json.", toolCalls=TOOLS)
        second = _start(client, session, "new task: summarise the meeting notes in notes.md", 3_000)["query"][
            "episodeId"
        ]
        assert second != first
        client.call("memory.flush", {}, timeout=60)
        scored = _episode(client, first)
        assert scored["status"] == "closed"
        assert scored["rTask"] == pytest.approx(0.45 * 0.8 + 0.30 * 0.6 + 0.25 * 0.4)
        assert any("grade" in a.lower() for a in asked)


def test_a_host_without_an_llm_handler_is_asked_once(service: ServiceClient) -> None:
    """No host.llm.complete handler: the first call learns it ("method not found"), later turns do not ask."""
    session = service.call("session.open", {"agent": AGENT})["sessionId"]
    first = _start(service, session, "Total the 13F holdings per issuer into answers.json", 1_000)["query"]["episodeId"]
    _end(service, session, first, 2_000, agentText="Wrote answers.json.", toolCalls=TOOLS)
    for i, text in enumerate(["Check the upstream health endpoint too", "Draft the quarterly budget for marketing"]):
        _start(service, session, text, 3_000 + i)
    health = service.call("core.health")
    calls = sum(int(op.get("calls", 0)) for op in health["llmUsage"]["ops"].values())
    assert calls == 1 and health["llm"]["available"] is False


def test_a_respawned_service_learns_from_the_episode_a_crash_left_open(home: Path) -> None:
    """The service is killed mid-task; the next one (a new process, as a host re-spawns it) finalises the
    abandoned episode at startup, in the background, and learns from it; a recent one stays resumable."""
    now = int(time.time() * 1000)
    env = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}
    first = ServiceClient.spawn(home, env=env, reconnect=False)
    try:
        session = first.call("session.open", {"agent": AGENT})["sessionId"]
        task = "Total the 13F holdings per issuer into answers.json"
        crashed = _start(first, session, task, now - 3 * 3_600_000)["query"]["episodeId"]
        _end(first, session, crashed, now - 3 * 3_600_000 + 5_000, agentText="Wrote answers.json.", toolCalls=TOOLS)
        other = first.call("session.open", {"agent": AGENT})["sessionId"]
        recent = _start(first, other, "Configure the nginx reverse proxy for the API", now - 60_000)["query"]
        _end(first, other, recent["episodeId"], now - 55_000, agentText="Added proxy_pass.", toolCalls=TOOLS)
        assert first.process is not None
        first.process.kill()  # a crash: no drain, no session.close
        first.process.wait(timeout=30)
    finally:
        first.close()
    with ServiceClient.spawn(home, env=env) as client:
        assert client.call("core.ping")["ok"] is True  # answers at once; recovery runs in the background
        deadline = time.monotonic() + 30
        while _episode(client, crashed)["status"] != "closed" and time.monotonic() < deadline:
            time.sleep(0.1)
        client.call("memory.flush", {}, timeout=60)
        learned = _episode(client, crashed)
        assert learned["status"] == "closed" and learned["closeReason"] == "recovered"
        assert learned["rTask"] == pytest.approx(0.1)  # scored by the new process (no LLM: the heuristic)
        resumable = _episode(client, recent["episodeId"])
        assert resumable["status"] == "open" and resumable["topicState"] == "interrupted"
        # the host comes back to the recent one in its session: it continues
        again = _start(client, other, "also enable gzip for the proxy", now)
        assert again["query"]["episodeId"] == recent["episodeId"]


def test_without_an_llm_consistent_success_makes_an_active_policy(home: Path) -> None:
    """No LLM, no feedback: three sessions of the same successful task. The rule inducer drafts a policy from
    the first and the transcript heuristic scores each +0.1; the gain, measured on that scale, promotes it."""
    task = "Parse holdings.xml and write the total market value per issuer to answers.json"
    steps = [
        {"name": "read_file", "input": {"path": "holdings.xml"}, "output": "<infoTable>...</infoTable>"},
        {"name": "bash", "input": {"cmd": "python sum.py holdings.xml"}, "output": "12 issuers summed"},
        {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"},
    ]
    with ServiceClient.spawn(home, env={"MEMOS_BRIDGE_LLM__PROVIDER": "none"}) as client:
        for run in range(3):
            session = client.call("session.open", {"agent": AGENT})["sessionId"]
            ts = 1_000_000 + run * 10_000_000
            episode = _start(client, session, task, ts)["query"]["episodeId"]
            _end(client, session, episode, ts + 5_000, agentText="Summed the values per issuer.", toolCalls=steps)
            client.call("session.close", {"sessionId": session}, timeout=60)
            assert _episode(client, episode)["rTask"] == pytest.approx(0.1)
        (policy,) = client.call("memory.list_policies", {})["policies"]
        assert policy["status"] == "active" and policy["support"] >= 3 and policy["gain"] >= 0.02


def test_a_retried_correction_makes_one_decision_repair(home: Path) -> None:
    """The same evidenceId again, after the repair cooldown (0 here): stored once, repaired once."""
    env = {"MEMOS_BRIDGE_LEARNING__REPAIR__COOLDOWN_MS": "0", "MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}
    repairs: list[dict[str, Any]] = []
    with ServiceClient.spawn(home, env=env) as client:
        client.on_event(repairs.append, types=["decision_repair.created"])
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        episode = _start(client, session, "Load sales.csv and plot monthly revenue", 1_000)["query"]["episodeId"]
        _end(client, session, episode, 2_000, agentText="Plotted it with pandas.", toolCalls=TOOLS)
        params = {
            "episodeId": episode,
            "polarity": "negative",
            "magnitude": 0.8,
            "rationale": "Wrong: use polars instead of pandas for these files.",
            "evidenceId": "chat-turn-7",
        }
        first = client.call("feedback.submit", params, timeout=60)
        again = client.call("feedback.submit", params, timeout=60)
        assert again["id"] == first["id"]
        client.call("core.health")
        time.sleep(0.5)  # events are pushed asynchronously: give a second repair's event time to arrive
        assert len(repairs) == 1 and repairs[0]["payload"]["source"] == "user_correction"
        guided = _start(client, session, "ok, redo the chart", 3_000)["injectedContext"]
        assert guided.count("Prefer: use polars instead of pandas") == 1
