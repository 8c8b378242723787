"""`memos-bridge viewer` as a person runs it: it serves the viewer itself when nobody owns the data home, asks
the owner to serve it when a host's service does, and takes over when that owner goes away."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from memos_bridge.client import ServiceClient


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ViewerCommand:
    """`memos-bridge viewer` in the background, its output collected line by line."""

    def __init__(self, home: Path, port: int) -> None:
        env = {**os.environ, "MEMOS_BRIDGE_HOME": str(home)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memos_bridge", "viewer", "--bind", f"127.0.0.1:{port}", "--home", str(home)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if re.search(pattern, line):
                    return line
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r} in {self.lines}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/memories", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_owner_serves_the_viewer_then_the_command_takes_over(tmp_path: Path) -> None:
    home, port = tmp_path / "home", _free_port()
    url = f"http://127.0.0.1:{port}"
    host = ServiceClient.spawn(home)  # a host's service owns the home
    host.call("core.health")
    viewer = ViewerCommand(home, port)
    try:
        viewer.wait_for(r"viewer on http://127\.0\.0\.1:\d+/ \(served by the process that owns")
        assert _answers(url)
        assert host.process is not None
        host.process.kill()  # the owner crashes: the command serves the viewer itself
        host.process.wait()
        viewer.wait_for(r"serving the viewer again")
        viewer.wait_for(r"viewer on http://127\.0\.0\.1")
        deadline = time.monotonic() + 60
        while not _answers(url) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _answers(url)
    finally:
        assert viewer.stop() in (0, 130)
        host.close()


def test_a_second_viewer_request_returns_the_running_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with ServiceClient.spawn(home) as client:
        first = client.call("viewer.start", {"host": "127.0.0.1", "port": 0})
        again = client.call("viewer.start", {"host": "127.0.0.1", "port": 0})
        assert first["started"] and not again["started"] and again["url"] == first["url"]
        assert _answers(first["url"].rstrip("/"))
