"""The command line: doctor, demo, contract, version, config errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from memos_bridge import __version__
from memos_bridge.client import ServiceClient
from memos_bridge.storage.migrations import LATEST_VERSION

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memos_bridge", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_version() -> None:
    assert _cli("--version").stdout.strip() == __version__


def test_doctor_on_a_fresh_home_and_after_use(tmp_path: Path) -> None:
    home = tmp_path / "home"
    fresh = _cli("doctor", "--home", str(home), "--no-model")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert "no database yet" in fresh.stdout
    with ServiceClient.spawn(home) as client:
        session = client.call("session.open", {"agent": "cli"})["sessionId"]
        episode = client.call("turn.start", {"agent": "cli", "sessionId": session, "userText": "hi there", "ts": 1})[
            "query"
        ]["episodeId"]
        client.call(
            "turn.end",
            {"agent": "cli", "sessionId": session, "episodeId": episode, "ts": 2, "agentText": "Hello!"},
            timeout=60,
        )
    used = _cli("doctor", "--home", str(home))
    assert used.returncode == 0, used.stdout + used.stderr
    assert f"data home:      {home}" in used.stdout
    assert f"schema version: {LATEST_VERSION} (latest {LATEST_VERSION})" in used.stdout
    assert re.search(r"^  trace +active=1$", used.stdout, re.MULTILINE) and "sessions=1" in used.stdout
    assert "embedder:       ok" in used.stdout and "dim 384" in used.stdout


def test_doctor_reports_an_invalid_config(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[retrieval]\ntier2_top_k = -3\n")
    result = _cli("doctor", "--home", str(tmp_path), "--no-model")
    assert result.returncode == 2 and "retrieval.tier2_top_k" in result.stdout


def test_env_overrides_reach_the_service(tmp_path: Path) -> None:
    with ServiceClient.spawn(tmp_path, env={"MEMOS_BRIDGE_LIGHTWEIGHT": "true"}) as client:
        assert client.call("core.health")["lightweight"] is True


def test_demo_shows_recall(tmp_path: Path) -> None:
    result = _cli("demo", "--home", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "recall of task 1 in task 2: yes" in result.stdout
    assert "<relevant-memories>" in result.stdout


def test_contract_check_passes_on_the_repository() -> None:
    result = _cli("contract", "--check")
    assert result.returncode == 0 and "up to date" in result.stdout
