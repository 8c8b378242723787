"""Fixtures that run the real service as a subprocess (stdio) or daemon (TCP)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memos_bridge.client import ServiceClient


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def service(home: Path) -> Iterator[ServiceClient]:
    client = ServiceClient.spawn(home)
    try:
        yield client
    finally:
        client.close()


class Daemon:
    def __init__(self, proc: subprocess.Popen[bytes], host: str, port: int) -> None:
        self.proc, self.host, self.port = proc, host, port

    def connect(self) -> ServiceClient:
        return ServiceClient.connect_tcp(self.host, self.port)


def start_daemon(home: Path, *, token: str | None = None, host: str = "127.0.0.1") -> Daemon:
    env = {**os.environ, "MEMOS_BRIDGE_HOME": str(home)}
    env.pop("MEMOS_BRIDGE_TOKEN", None)
    if token:
        env["MEMOS_BRIDGE_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "memos_bridge", "serve", "--tcp", f"{host}:0", "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        match = re.search(r"listening on (\S+):(\d+)", line)
        if match:
            return Daemon(proc, match.group(1), int(match.group(2)))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("daemon did not report its port")


@pytest.fixture
def daemon(home: Path) -> Iterator[Daemon]:
    d = start_daemon(home)
    try:
        yield d
    finally:
        d.proc.terminate()
        d.proc.wait(timeout=30)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once per backend: the second time every service it spawns stores on a fresh PostgreSQL
    database (the session's server, `tests/conftest.py`), through the environment a host would set.

    A module opts in with `pytestmark = pytest.mark.usefixtures("backend_env")`. Its tests must use one data
    home each (a second home in the same test would share the database) and read the database only through
    the service."""
    if request.param == "postgresql":
        monkeypatch.setenv("MEMOS_BRIDGE_STORAGE__URL", request.getfixturevalue("postgres_url"))
    return str(request.param)
