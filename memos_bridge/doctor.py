"""`memos-bridge doctor`: what a user checks first when something looks wrong.

It reads the home directly (settings, the database, the owner lock file) rather than asking the service,
because the service may be the thing that is broken. It reports:
- where the home, config and database are, and the schema version;
- the memories by kind and status, every namespace counted (`core/stats.py`, the numbers `memory.stats`
  gives per namespace), plus the sessions, episodes and turns they came from;
- which process owns the home (`transport/owner.py`) and whether its socket answers a ping — a host that
  "does not remember" is often talking to a different home, or to an owner that is stuck;
- whether the embedding model loads (skipped with `--no-model`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

from memos_bridge import __version__
from memos_bridge.config import load_settings
from memos_bridge.contract.errors import MemosError

if TYPE_CHECKING:
    from memos_bridge.storage.database import Database

#: Tables of the conversation record, counted beside the memories (they are not memories themselves).
ACTIVITY_TABLES = ("sessions", "episodes", "turns", "feedback")


def owner_line(home: Path, *, timeout_s: float = 3.0) -> str:
    """Who serves `home`: "pid N, socket PATH answers", a stale or silent owner, or "not served"."""
    from memos_bridge.transport import owner

    info = owner.read_owner(home)
    if info.pid is None or info.socket_path is None:
        return "not served"
    answer = _ping(info.socket_path, timeout_s)
    if answer is None:
        return f"pid {info.pid}, socket {info.socket_path} answers"
    if not _alive(info.pid):
        return f"not served (the last owner, pid {info.pid}, has exited)"
    return f"pid {info.pid} (lock file), but its socket {info.socket_path} does not answer: {answer}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True


def _ping(path: str, timeout_s: float) -> str | None:
    """None when the socket answers `core.ping`; else why not."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout_s)
    try:
        conn.connect(path)
        conn.sendall(b'{"jsonrpc":"2.0","id":1,"method":"core.ping"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                return "it closed the connection"
            data += chunk
        reply = json.loads(data)
        return None if isinstance(reply, dict) and "result" in reply else f"unexpected reply {data[:200]!r}"
    except TimeoutError:
        return f"no reply within {timeout_s:.0f} s"
    except (OSError, ValueError) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    finally:
        conn.close()


def run_doctor(home: str | None, *, load_model: bool) -> int:
    try:
        settings = load_settings(home)
    except MemosError as exc:
        print(f"config: INVALID — {exc.message}")
        return 2
    print(f"memos-bridge {__version__}")
    print(f"data home:      {settings.home}{'' if settings.home.exists() else '  (not created yet)'}")
    print(f"config file:    {settings.config_path}{'' if settings.config_path.exists() else '  (defaults)'}")
    print(f"database:       {settings.database_url}")
    print(f"mode:           {'lightweight' if settings.lightweight else 'full evolution'}")
    print(f"llm provider:   {settings.llm.provider}")
    print(f"owner:          {owner_line(settings.home)}")
    status = 0
    from memos_bridge.storage.database import Database
    from memos_bridge.storage.migrations import LATEST_VERSION

    if settings.storage.url is None and not settings.db_path.exists():
        print("schema version: (no database yet; created on first `serve`)")
    else:
        db = Database(settings.database_url, busy_timeout_ms=settings.storage.busy_timeout_ms)
        try:
            db.open()
            print(f"schema version: {db.schema_version()} (latest {LATEST_VERSION})")
            backend = db.backend()
            vectors = f"pgvector {backend['vector_extension']}" if backend["vector_extension"] else "in-memory index"
            search = "full-text in the database" if backend["full_text"] else "no full-text (vectors, patterns)"
            print(f"backend:        {backend['dialect']} {backend['server_version']}; {search}; vectors: {vectors}")
            _print_memories(db)
        except Exception as exc:
            print(f"database:       ERROR — {exc}")
            status = 1
        finally:
            db.close()
    if load_model:
        from memos_bridge.embedding.factory import create_embedder

        embedder = create_embedder(settings.embedding, settings.models_dir)
        started = time.perf_counter()
        try:
            vector = embedder.embed_sync(["memos-bridge doctor"], role="query")
            info = embedder.status()
            print(
                f"embedder:       ok — {info.provider}:{info.model}, dim {vector.shape[1]}, "
                f"loaded in {(time.perf_counter() - started) * 1000:.0f} ms"
            )
        except MemosError as exc:
            print(f"embedder:       UNAVAILABLE — {exc.message}")
            status = 1
        finally:
            embedder.close()
    return status


def _print_memories(db: Database) -> None:
    """Memories per kind and status (every namespace), then the conversation record's size."""
    from memos_bridge.contract import dto
    from memos_bridge.core.stats import stats_sync

    result = db.read_sync(lambda session: stats_sync(session, dto.MemoryStatsParams(namespace=dto.ALL_NAMESPACES)))
    print("memories:       by kind and status, every namespace")
    for kind, statuses in result.counts.items():
        shown = ", ".join(f"{name}={n}" for name, n in sorted(statuses.items(), key=_status_order)) or "none"
        print(f"  {kind:<12}  {shown}")
    counts = db.counts()
    print("activity:       " + ", ".join(f"{name}={counts.get(name, 0)}" for name in ACTIVITY_TABLES))


def _status_order(item: tuple[str, int]) -> tuple[int, str]:
    order = ("active", "candidate", "archived", "forgotten")
    return (order.index(item[0]) if item[0] in order else len(order), item[0])
