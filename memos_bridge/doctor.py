"""`memos-bridge doctor`: what a user checks first when something looks wrong."""

from __future__ import annotations

import time

from memos_bridge import __version__
from memos_bridge.config import load_settings
from memos_bridge.contract.errors import MemosError


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
            counts = db.counts()
            print("counts:         " + ", ".join(f"{name}={count}" for name, count in counts.items()))
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
