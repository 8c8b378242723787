"""Text embeddings: the `Embedder` protocol and its providers.

Use `create_embedder(settings.embedding, settings.models_dir)`. Importing this package is cheap: the
fastembed provider imports fastembed/onnxruntime only when its model loads.
"""

from memos_bridge.embedding.base import Embedder, EmbedderStatus, Role, Vectors
from memos_bridge.embedding.factory import create_embedder
from memos_bridge.embedding.fastembed_provider import PACKAGED_MODEL, FastEmbedEmbedder
from memos_bridge.embedding.hash_provider import HashEmbedder
from memos_bridge.embedding.model_files import assemble_packaged_model

__all__ = [
    "PACKAGED_MODEL",
    "Embedder",
    "EmbedderStatus",
    "FastEmbedEmbedder",
    "HashEmbedder",
    "Role",
    "Vectors",
    "assemble_packaged_model",
    "create_embedder",
]
