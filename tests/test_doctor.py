"""`memos-bridge doctor`: memories by kind and status, and which process owns the home."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from memos_bridge.client import ServiceClient

ROOT = Path(__file__).resolve().parents[1]


def _doctor(home: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "memos_bridge", "doctor", "--home", str(home), "--no-model"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_doctor_reports_memories_by_kind_and_status_and_the_owner(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert "owner:          not served" in _doctor(home)
    with ServiceClient.spawn(home) as client:
        kept = client.call("memory.remember", {"content": "The CI runners use Ubuntu 24.04 images."})
        gone = client.call("memory.remember", {"content": "The old wiki lives at wiki.internal.example."})
        client.call("memory.remember", {"content": "Alice prefers tabs.", "namespace": {"profileId": "alice"}})
        client.call("memory.forget", {"id": gone["id"], "kind": "memory"})
        session = client.call("session.open", {"agent": "cli"})["sessionId"]
        episode = client.call("turn.start", {"agent": "cli", "sessionId": session, "userText": "list files", "ts": 1})[
            "query"
        ]["episodeId"]
        client.call(
            "turn.end",
            {"agent": "cli", "sessionId": session, "episodeId": episode, "ts": 2, "agentText": "Listed them."},
        )
        assert kept["id"] != gone["id"] and client.process is not None
        served = _doctor(home)
        pid = client.process.pid
    assert re.search(rf"owner: +pid {pid}, socket \S+ answers", served), served
    # Every namespace is counted (alice's memory too), one status per row.
    assert re.search(r"^  memory +active=2, forgotten=1$", served, re.MULTILINE), served
    assert re.search(r"^  trace +active=1$", served, re.MULTILINE), served
    assert re.search(r"^  skill +none$", served, re.MULTILINE), served
    assert "sessions=1" in served and "turns=1" in served
    after = _doctor(home)
    assert f"owner:          not served (the last owner, pid {pid}, has exited)" in after
