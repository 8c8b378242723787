"""The `Embedder` protocol: the one interface the rest of the service uses to turn text into vectors.

Retrieval and capture only ever see this protocol, so the provider (the real fastembed model, or the
deterministic hash embedder used by tests of other parts) can be swapped by configuration alone.

Contract shared by every provider:
- vectors are float32, L2-normalised, shape `(len(texts), dim)`; an empty input gives shape `(0, dim)`,
  so callers never special-case "nothing to embed";
- texts are stripped of surrounding whitespace before embedding (and before the cache lookup), so
  `" a "` and `"a"` get the same vector;
- `role` separates queries from documents: some models embed them differently, and the cache keeps
  them apart even for models that do not;
- failures surface as `MemosError(EMBEDDING_UNAVAILABLE)`; callers decide whether to degrade to
  keyword-only retrieval instead of failing the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Role = Literal["document", "query"]
ROLES: tuple[Role, ...] = ("document", "query")

#: A matrix of embeddings, one float32 row per text.
Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class EmbedderStatus:
    """A snapshot for `doctor` and health reporting.

    `available` is the embedder's current belief that a call would succeed: true before the first load
    (nothing has failed yet) and after a successful one, false while a load failure is fresh.
    `last_error` is kept after recovery on purpose, so an operator can still see what went wrong.
    Times follow the house rule (integer epoch milliseconds); `load_ms` is a duration.
    """

    available: bool
    provider: str
    model: str
    dim: int
    loaded: bool
    load_ms: float | None
    last_error: str | None
    last_ok_at: int | None
    cache_hits: int
    cache_misses: int


@runtime_checkable
class Embedder(Protocol):
    """Text → unit vectors. Implementations are safe to share between tasks and threads."""

    name: str
    dim: int

    async def embed(self, texts: Sequence[str], role: Role = "document") -> Vectors:
        """Embed without blocking the event loop (the work runs in a worker thread)."""
        ...

    def embed_sync(self, texts: Sequence[str], role: Role = "document") -> Vectors:
        """Embed in the calling thread; never call it from the event loop thread."""
        ...

    def status(self) -> EmbedderStatus: ...

    async def warmup(self) -> None:
        """Load the model now instead of on the first call; raises MemosError if it cannot."""
        ...

    def close(self) -> None:
        """Release the model; later calls raise MemosError(EMBEDDING_UNAVAILABLE)."""
        ...


def check_texts(texts: Sequence[str]) -> list[str]:
    """Validate and strip the input of `embed`.

    A bare `str` is a `Sequence[str]` too, and embedding it character by character is never what the
    caller meant, so it is rejected rather than silently accepted.
    """
    if isinstance(texts, str | bytes):
        raise TypeError("embed() takes a sequence of strings, not a single string")
    out: list[str] = []
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"embed() texts must be str, got {type(text).__name__}")
        out.append(text.strip())
    return out


def l2_normalise(vectors: npt.NDArray[np.floating]) -> Vectors:
    """Row-wise L2 normalisation in float32; all-zero rows stay zero instead of becoming NaN."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(matrix / norms, dtype=np.float32)


def empty_vectors(dim: int) -> Vectors:
    return np.zeros((0, dim), dtype=np.float32)
