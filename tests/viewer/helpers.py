"""Start a real service with its viewer, and run turns through it (shared by the viewer's tests)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from memos_bridge.client import ServiceClient
from memos_bridge.viewer.app import NAV

#: Every page of the viewer's navigation.
PAGES = [href for href, _ in NAV]


def serve_with_viewer(home: Path, bind: str, env: dict[str, str] | None = None) -> tuple[ServiceClient, str]:
    """A service with a viewer on `bind` (port 0: any free one); returns its client and the viewer's URL."""
    log = (home.parent / f"{home.name}-stderr.log").open("wb")
    client = ServiceClient.spawn(home, extra_args=["--viewer", bind], stderr=log, env=env)
    client.call("core.health")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"viewer on (http://\S+)", (home.parent / f"{home.name}-stderr.log").read_text())
        if found:
            return client, found.group(1).rstrip("/")
        time.sleep(0.1)
    raise AssertionError("the viewer did not start")


def turn(client: ServiceClient, session: str, text: str, ts: int, reply: str = "done") -> dict[str, Any]:
    started: dict[str, Any] = client.call(
        "turn.start", {"agent": "tester", "sessionId": session, "userText": text, "ts": ts}, timeout=60
    )
    episode = started["query"]["episodeId"]
    client.call(
        "turn.end",
        {"agent": "tester", "sessionId": session, "episodeId": episode, "agentText": reply, "ts": ts + 1},
        timeout=60,
    )
    return started
