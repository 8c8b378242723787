"""Fixtures of the embedding tests: one model load per session, and a guard against network access."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memos_bridge.config import EmbeddingSettings
from memos_bridge.embedding.fastembed_provider import FastEmbedEmbedder

from .helpers import block_network


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    block_network(monkeypatch)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


def _loaded(settings: EmbeddingSettings, models_dir: Path) -> FastEmbedEmbedder:
    embedder = FastEmbedEmbedder(settings, models_dir)
    with pytest.MonkeyPatch.context() as mp:
        block_network(mp)
        embedder.embed_sync(["load the model with the network blocked"])
    return embedder


@pytest.fixture(scope="session")
def embedder(models_dir: Path) -> Iterator[FastEmbedEmbedder]:
    """The packaged model with default settings (cache on), loaded once per session."""
    emb = _loaded(EmbeddingSettings(), models_dir)
    yield emb
    emb.close()


@pytest.fixture(scope="session")
def uncached(models_dir: Path) -> Iterator[FastEmbedEmbedder]:
    """Same model without a cache, for comparisons where a cache hit would hide the model's output."""
    emb = _loaded(EmbeddingSettings(cache_size=0), models_dir)
    yield emb
    emb.close()
