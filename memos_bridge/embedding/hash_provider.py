"""A deterministic, model-free embedder (`embedding.provider = "hash"`).

Why it exists: tests of storage, retrieval and the core need vectors that are stable across runs and
machines and cost nothing to produce, without loading a model. It is a signed feature-hashing
bag of lower-cased words and word bigrams, so texts sharing words get a positive cosine. It has no
semantics beyond word overlap; never use it for real recall.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

from memos_bridge.config import EmbeddingSettings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.embedding.base import (
    ROLES,
    EmbedderStatus,
    Role,
    Vectors,
    check_texts,
    empty_vectors,
    l2_normalise,
)
from memos_bridge.timeutil import now_ms

_WORD = re.compile(r"\w+", re.UNICODE)
#: Feature of a text with no words, so that it still gets a (fixed) unit vector.
_EMPTY = "\x00empty"


def _features(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    if not words:
        return [_EMPTY]
    return words + [f"{a} {b}" for a, b in itertools.pairwise(words)]


class HashEmbedder:
    """`Embedder` computing vectors in the calling thread (microseconds per text, no model)."""

    provider = "hash"

    def __init__(self, settings: EmbeddingSettings) -> None:
        self.dim: int = settings.dim
        self.name: str = f"hash-{self.dim}"
        self._last_ok_at: int | None = None
        self._closed = False

    def _vector(self, text: str) -> Vectors:
        row = np.zeros(self.dim, dtype=np.float32)
        for feature in _features(text):
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            row[value % self.dim] += 1.0 if (value >> 63) & 1 else -1.0
        return row

    def embed_sync(self, texts: Sequence[str], role: Role = "document") -> Vectors:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        items = check_texts(texts)
        if items and self._closed:
            raise MemosError(ErrorCode.EMBEDDING_UNAVAILABLE, "the embedder is closed")
        if not items:
            return empty_vectors(self.dim)
        vectors = l2_normalise(np.stack([self._vector(text) for text in items]))
        self._last_ok_at = now_ms()
        return vectors

    async def embed(self, texts: Sequence[str], role: Role = "document") -> Vectors:
        return self.embed_sync(texts, role)

    async def warmup(self) -> None:
        return None

    def status(self) -> EmbedderStatus:
        return EmbedderStatus(
            available=not self._closed,
            provider=self.provider,
            model=self.name,
            dim=self.dim,
            loaded=True,
            load_ms=0.0,
            last_error=None,
            last_ok_at=self._last_ok_at,
            cache_hits=0,
            cache_misses=0,
        )

    def close(self) -> None:
        self._closed = True
