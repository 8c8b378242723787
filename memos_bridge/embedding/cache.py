"""A thread-safe LRU of embeddings, so repeated texts (a query retried, a tool output seen again)
skip the model.

Keys are `(model name, role, sha1(text))`: the model name keeps vectors of different models apart if
the configuration changes in a long-lived process, the role keeps query and document vectors apart for
models that embed them differently, and hashing keeps long texts from being held twice in memory
(sha1 is a fingerprint here, not a security measure). 20 000 entries of 384 float32 are about 31 MB.

Cached vectors are made read-only: callers get rows copied into a fresh matrix, and nobody can corrupt
an entry through a view by accident.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

CacheKey = tuple[str, str, bytes]


def cache_key(model: str, role: str, text: str) -> CacheKey:
    return (model, role, hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).digest())


class EmbeddingCache:
    """LRU with hit/miss counters; `capacity` 0 disables storing (lookups still count as misses)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        self._entries: OrderedDict[CacheKey, npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: CacheKey) -> npt.NDArray[np.float32] | None:
        with self._lock:
            vector = self._entries.get(key)
            if vector is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return vector

    def put(self, key: CacheKey, vector: npt.NDArray[np.float32]) -> None:
        if self.capacity == 0:
            return
        frozen = np.array(vector, dtype=np.float32, copy=True)
        frozen.setflags(write=False)
        with self._lock:
            self._entries[key] = frozen
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Membership without touching the LRU order or the counters (for tests and diagnostics)."""
        with self._lock:
            return key in self._entries
