"""The LRU embedding cache: eviction order, counters, disabled mode, thread safety."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memos_bridge.embedding.cache import EmbeddingCache, cache_key


def vec(x: float) -> np.ndarray:
    return np.full(4, x, dtype=np.float32)


def test_keys_separate_model_role_and_text() -> None:
    keys = {
        cache_key("m1", "document", "a"),
        cache_key("m1", "query", "a"),
        cache_key("m2", "document", "a"),
        cache_key("m1", "document", "b"),
    }
    assert len(keys) == 4
    assert cache_key("m1", "document", "a") == cache_key("m1", "document", "a")


def test_lru_evicts_least_recently_used() -> None:
    cache = EmbeddingCache(2)
    a, b, c = (cache_key("m", "document", t) for t in "abc")
    cache.put(a, vec(1))
    cache.put(b, vec(2))
    assert cache.get(a) is not None  # a is now the most recent
    cache.put(c, vec(3))
    assert b not in cache and a in cache and c in cache
    assert (cache.hits, cache.misses) == (1, 0)
    assert cache.get(b) is None
    assert (cache.hits, cache.misses) == (1, 1)


def test_entries_are_read_only_copies() -> None:
    cache = EmbeddingCache(4)
    key = cache_key("m", "document", "a")
    original = vec(1)
    cache.put(key, original)
    original[:] = 9  # the caller's array is not the cached one
    stored = cache.get(key)
    assert stored is not None and float(stored[0]) == 1.0
    with pytest.raises(ValueError):
        stored[0] = 5


def test_capacity_zero_disables_storage_but_counts_misses() -> None:
    cache = EmbeddingCache(0)
    key = cache_key("m", "document", "a")
    cache.put(key, vec(1))
    assert cache.get(key) is None
    assert len(cache) == 0 and cache.misses == 1 and cache.hits == 0


@given(
    capacity=st.integers(min_value=0, max_value=5),
    ops=st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=8)), max_size=60),
)
def test_matches_a_reference_lru(capacity: int, ops: list[tuple[bool, int]]) -> None:
    cache = EmbeddingCache(capacity)
    reference: OrderedDict[int, float] = OrderedDict()
    hits = misses = 0
    for is_put, n in ops:
        key = cache_key("m", "document", str(n))
        if is_put:
            cache.put(key, vec(n))
            if capacity:
                reference[n] = n
                reference.move_to_end(n)
                while len(reference) > capacity:
                    reference.popitem(last=False)
        else:
            got = cache.get(key)
            if n in reference:
                hits += 1
                reference.move_to_end(n)
                assert got is not None and float(got[0]) == n
            else:
                misses += 1
                assert got is None
    assert (cache.hits, cache.misses, len(cache)) == (hits, misses, len(reference))


def test_concurrent_use_keeps_counters_and_bound() -> None:
    cache = EmbeddingCache(50)
    keys = [cache_key("m", "document", str(i)) for i in range(100)]

    def work() -> None:
        for i, key in enumerate(keys):
            cache.put(key, vec(i))
            cache.get(keys[(i * 7) % len(keys)])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 50
    assert cache.hits + cache.misses == 8 * 100
