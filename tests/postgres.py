"""A private PostgreSQL server for tests (PyPI `pgserver`: PostgreSQL 16 with pgvector in a temporary folder,
no root, no network). Without `pgserver` a test that asks for one is skipped, except where
`MEMOS_BRIDGE_REQUIRE_POSTGRES=1` (CI sets it): then it fails."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REQUIRED = os.environ.get("MEMOS_BRIDGE_REQUIRE_POSTGRES") == "1"


@contextmanager
def postgres_server(folder: Path) -> Iterator[str]:
    """Start a server whose data and socket live in `folder` (empty); yields its SQLAlchemy URL."""
    if not os.environ.get("XDG_RUNTIME_DIR"):  # pgserver asks for a runtime folder when it is imported
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="memos-bridge-run-")
    try:
        import pgserver
    except ImportError:
        if REQUIRED:
            pytest.fail("MEMOS_BRIDGE_REQUIRE_POSTGRES=1 but pgserver is not installed (pip install -e '.[dev]')")
        pytest.skip("pgserver is not installed (pip install -e '.[dev]')")
    server = pgserver.get_server(str(folder), cleanup_mode="stop")
    try:
        yield f"postgresql+psycopg://postgres@/postgres?host={folder}"
    finally:
        server.cleanup()
