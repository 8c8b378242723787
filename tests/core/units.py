"""Which units of database work a core ran, in order: tests that check who got the reader or the writer."""

from __future__ import annotations

from typing import Any, Literal

from memos_bridge.storage.database import Database


def record_units(db: Database, kind: Literal["read_sync", "write_sync"]) -> list[str]:
    """Record the qualified name of every function `db` runs as a `kind` unit from now on (the list grows as
    they start)."""
    names: list[str] = []
    original = getattr(db, kind)

    def recording(fn: Any) -> Any:
        names.append(getattr(fn, "__qualname__", repr(fn)))
        return original(fn)

    setattr(db, kind, recording)
    return names
