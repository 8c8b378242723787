"""The deterministic hash embedder used by tests of other parts, and the factory."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest

from memos_bridge.config import EmbeddingSettings
from memos_bridge.contract.errors import MemosError
from memos_bridge.embedding import Embedder, FastEmbedEmbedder, HashEmbedder, create_embedder

from .helpers import cos


def test_factory_picks_the_provider(tmp_path: Path) -> None:
    assert isinstance(create_embedder(EmbeddingSettings(provider="hash"), tmp_path), HashEmbedder)
    fast = create_embedder(EmbeddingSettings(), tmp_path)
    assert isinstance(fast, FastEmbedEmbedder) and not fast.status().loaded
    assert not any(tmp_path.iterdir())  # construction does no work


def test_hash_vectors_are_deterministic_normalised_and_overlap_aware() -> None:
    emb = HashEmbedder(EmbeddingSettings(provider="hash", dim=64))
    assert isinstance(emb, Embedder)
    texts = ["parse the infoTable rows", "parse infoTable rows quickly", "sleepy cat", "", "  "]
    a = emb.embed_sync(texts)
    b = anyio.run(emb.embed, texts)
    assert a.shape == (5, 64) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    assert cos(a[0], a[1]) > cos(a[0], a[2]) + 0.3
    np.testing.assert_array_equal(a[3], a[4])
    assert emb.embed_sync([]).shape == (0, 64)
    emb.close()
    with pytest.raises(MemosError):
        emb.embed_sync(["x"])
