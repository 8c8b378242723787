"""System failures at start are one line on stderr naming the problem and the fix, with a documented exit
code (2: configuration, 1: runtime), checked before anything is created in the data home."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _serve(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOS_BRIDGE_")}
    return subprocess.run(
        [sys.executable, "-m", "memos_bridge", "serve", "--home", str(home), *args],
        input=b"",
        capture_output=True,
        timeout=120,
        env={**full_env, **(env or {})},
    )


def _one_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = [line for line in proc.stderr.decode().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert proc.stdout == b""
    return lines[0]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("nonsense:::", "not a database URL"),
        ("postgresql://app:pw@localhost/memos", "pip install 'memos-bridge[postgres]'"),
        ("sqlite:////nonexistent-folder-for-memos/x.db", "the folder of the SQLite file does not exist"),
        ("mysql://app@localhost/memos", "unsupported database"),
    ],
)
def test_an_unusable_storage_url_is_a_configuration_error_before_the_home_exists(
    tmp_path: Path, url: str, expected: str
) -> None:
    home = tmp_path / "home"
    if "postgresql" in url:  # the driver is installed here (the PostgreSQL tests use it): hide it from this process
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOS_BRIDGE_")}
        hide = "import sys; sys.modules['psycopg'] = None; from memos_bridge.cli import main; sys.exit(main())"
        proc = subprocess.run(
            [sys.executable, "-c", hide, "serve", "--home", str(home)],
            input=b"",
            capture_output=True,
            timeout=120,
            env={**env, "MEMOS_BRIDGE_STORAGE__URL": url},
        )
    else:
        proc = _serve(home, env={"MEMOS_BRIDGE_STORAGE__URL": url})
    assert proc.returncode == 2
    line = _one_line(proc)
    assert line.startswith("memos-bridge: invalid configuration: storage.url: ") and expected in line
    assert not home.exists()


def test_a_port_in_use_is_one_line_and_exit_1_before_the_home_exists(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        proc = _serve(tmp_path / "home", "--tcp", f"127.0.0.1:{port}")
    finally:
        taken.close()
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in _one_line(proc)
    assert not (tmp_path / "home").exists()


def test_a_home_under_a_file_is_a_configuration_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = _serve(blocker / "home")
    assert proc.returncode == 2
    assert f"cannot use data home {blocker / 'home'}" in _one_line(proc)


def test_a_one_underscore_env_var_is_reported_as_a_likely_typo(tmp_path: Path) -> None:
    proc = _serve(tmp_path / "home", "--tcp", "300.0.0.1:1", env={"MEMOS_BRIDGE_RETRIEVAL_TIER2_TOP_K": "3"})
    stderr = proc.stderr.decode()
    assert "MEMOS_BRIDGE_RETRIEVAL_TIER2_TOP_K is not read; did you mean MEMOS_BRIDGE_RETRIEVAL__TIER2_TOP_K?" in stderr
