"""One owner per data home, with real processes.

The first `serve` owns the home; a second `serve` on the same home attaches to it through the home's local
socket, so both hosts see one memory: a step captured through the attached process is found by the owner's
vector channel at once, and the owner's `host.llm.complete` reaches the attached host. `--no-attach` exits 2
naming the owner's pid. An owner whose own host left keeps serving the attached host. When the owner dies
(kill -9), the attached process takes the home over and goes on serving its host, and later processes attach
to it; with nobody left, the next process owns the home, with everything that was written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from memos_bridge.client import ServiceClient

AGENT = "tester"


def _capture(client: ServiceClient, text: str, reply: str, ts: int) -> str:
    session = client.call("session.open", {"agent": AGENT})["sessionId"]
    episode = client.call("turn.start", {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts})["query"][
        "episodeId"
    ]
    ended = client.call(
        "turn.end", {"agent": AGENT, "sessionId": session, "episodeId": episode, "agentText": reply, "ts": ts + 1}
    )
    return str(ended["traceIds"][-1])


def test_a_second_serve_attaches_to_the_owner_and_the_next_one_takes_over(tmp_path: Path) -> None:
    home = tmp_path / "home"
    owner = ServiceClient.spawn(home, reconnect=False)
    attached: ServiceClient | None = None
    try:
        assert owner.call("core.ping")["ok"] is True
        assert owner.process is not None
        owner_pid = owner.process.pid

        attached = ServiceClient.spawn(home, reconnect=False)
        trace = _capture(attached, "Rotate the TLS certificate of the billing gateway", "Renewed with certbot.", 1_000)
        # One vector index: the owner's vector channel finds what the attached host just wrote.
        found = owner.call("memory.search", {"agent": AGENT, "query": "rotate the billing gateway certificate"})
        hit = next(h for h in found["hits"] if h["refId"] == trace)
        assert {"vec_summary", "vec_action"} & set(hit["channels"])
        assert owner.call("core.health")["connections"] == 2

        # The owner's requests to a host reach the attached host through the relay.
        def host_llm(params: dict[str, Any]) -> dict[str, Any]:
            return {"text": "pong from the attached host"}

        attached.on_request("host.llm.complete", host_llm)
        assert attached.call("llm.test", {"prompt": "ping"})["text"] == "pong from the attached host"

        refused = subprocess.run(
            [sys.executable, "-m", "memos_bridge", "serve", "--no-attach", "--home", str(home)],
            input=b"",
            capture_output=True,
            timeout=60,
        )
        assert refused.returncode == 2 and refused.stdout == b""
        assert f"data home {home} is served by pid {owner_pid}".encode() in refused.stderr

        owner.process.kill()  # the owner dies without a word
        owner.process.wait(timeout=30)
        # The attached process takes the home over and goes on serving its host: no restart needed.
        assert attached.call("memory.get_trace", {"id": trace}, timeout=120)["agentText"] == "Renewed with certbot."
        assert attached.process is not None and attached.process.poll() is None
        with ServiceClient.spawn(home) as newcomer:  # and the next process attaches to the new owner
            assert newcomer.call("memory.get_trace", {"id": trace})["id"] == trace
            assert attached.call("core.health")["connections"] == 2
    finally:
        owner.close()
        if attached is not None:
            attached.close()

    with ServiceClient.spawn(home) as successor:  # with nobody left, the next process owns the home
        assert successor.call("memory.get_trace", {"id": trace})["agentText"] == "Renewed with certbot."
        assert successor.call("core.health")["connections"] == 1


def test_an_owner_whose_host_left_keeps_serving_the_hosts_attached_to_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = ServiceClient.spawn(home, reconnect=False)
    second = ServiceClient.spawn(home, reconnect=False)
    try:
        assert first.call("core.ping")["ok"] is True
        trace = _capture(second, "Vacuum the analytics database every Sunday", "Added a cron entry.", 5_000)
        first.close()  # the owner's own host ends its input
        assert second.call("memory.get_trace", {"id": trace})["id"] == trace
        assert second.call("core.health")["connections"] == 1
    finally:
        first.close()
        second.close()
