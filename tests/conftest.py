"""Shared fixtures. In-process core: a real database and the real embedding model (loaded once per session)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import numpy as np
import pytest

from memos_bridge.config import Settings, load_settings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core.facade import MemoryCore
from memos_bridge.embedding.base import Embedder, EmbedderStatus, Role
from memos_bridge.embedding.factory import create_embedder
from memos_bridge.llm.host import NoLLM
from memos_bridge.storage.database import Database


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def real_embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    settings = load_settings(tmp_path_factory.mktemp("embed-home"))
    embedder = create_embedder(settings.embedding, settings.models_dir)
    embedder.embed_sync(["warm up"])
    return embedder


class SwitchableEmbedder:
    """The real embedder, with a switch that makes it fail like an unavailable model."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.down = False
        self.delay = 0.0  # seconds, to simulate a slow model
        self.name = inner.name
        self.dim = inner.dim

    async def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        if self.down:
            raise MemosError(ErrorCode.EMBEDDING_UNAVAILABLE, "model offline (test switch)")
        if self.delay:
            await anyio.sleep(self.delay)
        return await self.inner.embed(texts, role)

    def embed_sync(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        return self.inner.embed_sync(texts, role)

    def status(self) -> EmbedderStatus:
        return self.inner.status()

    async def warmup(self) -> None:
        await self.inner.warmup()

    def close(self) -> None:
        pass  # shared across tests


def make_settings(home: Path, **overrides: object) -> Settings:
    return load_settings(home, env={}, overrides=overrides)


@pytest.fixture
async def core_factory(tmp_path: Path, real_embedder: Embedder) -> AsyncIterator[object]:
    made: list[MemoryCore] = []

    async def make(llm: object = None, home: Path | None = None, **overrides: object) -> MemoryCore:
        """A core with its own data home, or on `home` (a second core on the same database, as after a restart)."""
        settings = make_settings(home or tmp_path / f"home{len(made)}", **overrides)
        settings.home.mkdir(parents=True, exist_ok=True)
        db = Database(settings.database_url)
        db.open()
        core = MemoryCore(settings, db, SwitchableEmbedder(real_embedder), llm or NoLLM())  # type: ignore[arg-type]
        made.append(core)
        return core

    yield make
    for core in made:
        core.db.close()
