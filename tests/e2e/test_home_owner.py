"""One owner per data home, with real processes.

The first `serve` owns the home; a second `serve` on the same home attaches to it through the home's local
socket, so both hosts see one memory: a step captured through the attached process is found by the owner's
vector channel at once, and the owner's `host.llm.complete` reaches the attached host. `--no-attach` exits 2
naming the owner's pid. When the owner dies (kill -9), the attached relay ends (exit 1) and the next process
takes the home over, with everything that was written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import ServiceClient, TransportClosed

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
        assert attached.process is not None
        assert attached.process.wait(timeout=30) == 1  # its relay ended: the host sees a closed service
        with pytest.raises((TransportClosed, TimeoutError)):
            attached.call("core.ping", timeout=5)
    finally:
        owner.close()
        if attached is not None:
            attached.close()

    with ServiceClient.spawn(home) as successor:  # the next process takes the home over
        assert successor.call("memory.get_trace", {"id": trace})["agentText"] == "Renewed with certbot."
        assert successor.call("core.health")["connections"] == 1
