"""`memos-bridge demo`: a short scripted session against a real spawned service.

It shows the loop a host drives: a first task is captured step by step (including a failed tool call),
and a later, related question in a NEW session gets that experience injected by `turn.start`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from memos_bridge.client import ServiceClient

FIRST_TASK = "Parse the SEC 13F infoTable XML in filing.xml and total the holdings by issuer"
FOLLOW_UP = "My 13F infoTable parser raises KeyError nameOfIssuer again, what was the fix?"


def _turn_end_payload(session_id: str, episode_id: str, ts: int) -> dict[str, Any]:
    return {
        "agent": "demo",
        "sessionId": session_id,
        "episodeId": episode_id,
        "ts": ts + 4000,
        "agentText": (
            "The infoTable elements are namespaced: pass the informationtable XML namespace to find(), "
            "otherwise every lookup returns None. Totals by issuer are in holdings.csv."
        ),
        "toolCalls": [
            {
                "name": "bash",
                "input": {"cmd": "python parse_13f.py filing.xml"},
                "output": (
                    "Traceback (most recent call last):\n  File \"parse_13f.py\", line 12\nKeyError: 'nameOfIssuer'"
                ),
                "errorCode": "KeyError",
                "startedAt": ts + 1000,
            },
            {
                "name": "bash",
                "input": {"cmd": "python parse_13f.py --ns informationtable filing.xml"},
                "output": "parsed 312 infoTable rows; 41 issuers; wrote holdings.csv",
                "startedAt": ts + 2500,
            },
        ],
    }


def _of_task(client: ServiceClient, hit: dict[str, Any], trace_ids: list[str], episode_id: str) -> bool:
    """Whether a recalled memory comes from the first task: one of its steps, its roll-up, or an experience
    whose sources are its steps or its episode."""
    if hit["refId"] in trace_ids or hit["refId"] == episode_id:
        return True
    if hit["refKind"] != "experience":
        return False
    policy = client.call("memory.get_policy", {"id": hit["refId"]}) or {}
    return bool(set(policy.get("sourceTraceIds", [])) & set(trace_ids)) or episode_id in policy.get(
        "sourceEpisodeIds", []
    )


def run_demo(home: str | None) -> int:
    temp = None if home else tempfile.TemporaryDirectory(prefix="memos-bridge-demo-")
    data_home = Path(home) if home else Path(temp.name)  # type: ignore[union-attr]
    print(f"data home: {data_home}")
    started = time.perf_counter()
    client = ServiceClient.spawn(data_home)
    try:
        health = client.call("core.health")
        print(
            f"service up in {(time.perf_counter() - started) * 1000:.0f} ms "
            f"(version {health['version']}, schema v{health['schemaVersion']})"
        )

        print("\n== task 1: a new session, nothing to recall yet")
        first = client.call("session.open", {"agent": "demo"})["sessionId"]
        ts = int(time.time() * 1000)
        start = client.call("turn.start", {"agent": "demo", "sessionId": first, "userText": FIRST_TASK, "ts": ts})
        episode = start["query"]["episodeId"]
        print(f"turn.start → episode {episode}, {len(start['hits'])} memories injected")
        end = client.call("turn.end", _turn_end_payload(first, episode, ts), timeout=120)
        print(f"turn.end   → {len(end['traceIds'])} steps captured:")
        for trace in client.call("memory.timeline", {"episodeId": episode})["traces"]:
            print(f"   [{trace['stepKind']:5}] {trace['summary']}")
            if trace["errorSignatures"]:
                print(f"           error signature: {trace['errorSignatures'][0]}")
        client.call("session.close", {"sessionId": first})

        print("\n== task 2: a later session asks a related question")
        second = client.call("session.open", {"agent": "demo"})["sessionId"]
        recall = client.call(
            "turn.start",
            {"agent": "demo", "sessionId": second, "userText": FOLLOW_UP, "ts": ts + 60_000},
            timeout=120,
        )
        print(
            f"turn.start → {len(recall['hits'])} memories: "
            + ", ".join(f"{hit['refKind']} via {'+'.join(hit['channels'])}" for hit in recall["hits"])
        )
        print("\ninjected context:\n")
        print(recall["injectedContext"] or "(nothing)")
        # recalled as single steps, as the whole past task (a roll-up of its steps) or as an experience
        # distilled from those steps (which then stands for them: the steps themselves are not injected again)
        ok = any(_of_task(client, hit, end["traceIds"], episode) for hit in recall["hits"])
        print(f"\nrecall of task 1 in task 2: {'yes' if ok else 'NO'}")
        return 0 if ok else 1
    finally:
        client.close()
        if temp is not None:
            temp.cleanup()
