"""Build the configured `Embedder`. Construction is cheap for every provider: the model loads on the
first call or on `warmup()`, so the service can start answering before the model is ready."""

from __future__ import annotations

from pathlib import Path

from memos_bridge.config import EmbeddingSettings
from memos_bridge.embedding.base import Embedder
from memos_bridge.embedding.fastembed_provider import FastEmbedEmbedder
from memos_bridge.embedding.hash_provider import HashEmbedder


def create_embedder(settings: EmbeddingSettings, models_dir: Path) -> Embedder:
    """`models_dir` is `Settings.models_dir`; the packaged model folder is assembled under it."""
    if settings.provider == "hash":
        return HashEmbedder(settings)
    return FastEmbedEmbedder(settings, models_dir)
