"""`memos-bridge backup PATH`: a consistent, verified copy of the home's database, even while it is served."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from memos_bridge import backup
from memos_bridge.client import ServiceClient

ROOT = Path(__file__).resolve().parents[1]


def _backup(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memos_bridge", "backup", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def _memory_ids(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return {row[0] for row in db.execute("SELECT id FROM memories")}
    finally:
        db.close()


def test_a_backup_taken_while_the_service_writes_is_consistent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    copy = tmp_path / "memos-backup.db"
    with ServiceClient.spawn(home) as client:
        before = {
            client.call("memory.remember", {"content": f"Server rack {n} sits in row {n % 4} of hall B."})["id"]
            for n in range(12)
        }
        written: list[tuple[float, str]] = []
        stop = threading.Event()

        def keep_writing() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                made = client.call("memory.remember", {"content": f"Deployment ticket {n} was closed by the on-call."})
                written.append((time.monotonic(), made["id"]))

        writer = threading.Thread(target=keep_writing, daemon=True)
        writer.start()
        while not written:  # the writer is going before the backup starts
            time.sleep(0.01)
        started = time.monotonic()
        result = _backup(home, str(copy))
        finished = time.monotonic()
        time.sleep(0.2)
        stop.set()
        writer.join(timeout=60)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "integrity_check: ok" in result.stdout and "memories" in result.stdout
    assert any(started <= at <= finished for at, _ in written), "no write happened while the backup ran"
    saved = _memory_ids(copy)
    assert before <= saved  # everything committed before the backup started is in it
    assert saved <= before | {memory for _, memory in written}
    assert not Path(f"{copy}-wal").exists()  # a self-contained file: no WAL beside it
    assert oct(copy.stat().st_mode & 0o777) == "0o600"

    digest = hashlib.sha256(copy.read_bytes()).hexdigest()
    refused = _backup(home, str(copy))
    assert refused.returncode == 1 and "--overwrite" in refused.stderr
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest  # untouched
    replaced = _backup(home, str(copy), "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert _memory_ids(copy) == before | {memory for _, memory in written}  # the service has stopped: all of it
    assert not list(tmp_path.glob(".memos-backup.db.partial-*"))


def test_copy_database_stays_consistent_under_a_writer_that_keeps_restarting_it(tmp_path: Path) -> None:
    """Every write between two steps sends SQLite's stepped copy back to the start; the copy must still end,
    as one consistent snapshot."""
    source, target = tmp_path / "src.db", tmp_path / "dst.db"
    db = sqlite3.connect(source, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, body BLOB)")
    db.execute("BEGIN")
    db.executemany("INSERT INTO rows (body) VALUES (?)", [(os.urandom(2000),) for _ in range(4000)])
    db.execute("COMMIT")
    stop = threading.Event()

    def keep_writing() -> None:
        writer = sqlite3.connect(source, isolation_level=None, timeout=10)
        while not stop.is_set():
            writer.execute("INSERT INTO rows (body) VALUES (?)", (os.urandom(2000),))
        writer.close()

    thread = threading.Thread(target=keep_writing, daemon=True)
    thread.start()
    seen: list[tuple[int, int]] = []
    try:
        time.sleep(0.05)
        backup.copy_database(source, target, progress=lambda done, total: seen.append((done, total)))
    finally:
        stop.set()
        thread.join(timeout=10)
        db.close()
    copied = sqlite3.connect(target)
    assert copied.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert copied.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    count, top = copied.execute("SELECT count(*), max(id) FROM rows").fetchone()
    copied.close()
    assert count >= 4000 and count == top  # a prefix of the inserts: one commit's view, no gaps
    assert seen and seen[-1][0] == seen[-1][1]  # progress ends at all pages copied


def test_backup_refuses_what_it_cannot_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = _backup(tmp_path / "never-served", str(tmp_path / "x.db"))
    assert missing.returncode == 1 and "no database" in missing.stderr

    url = "postgresql+psycopg://memos:s3cret@db.example:5432/memos"
    monkeypatch.setattr("memos_bridge.config.load_settings", lambda home: SimpleNamespace(database_url=url))
    assert backup.run_backup(str(tmp_path), str(tmp_path / "x.db"), overwrite=False) == 2
    said = capsys.readouterr().err
    assert "pg_dump" in said and "s3cret" not in said
    assert not (tmp_path / "x.db").exists()
