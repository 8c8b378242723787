"""In-memory vector index: exactness against brute force, updates, owner filtering, growth, loading."""

from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
from numpy.typing import NDArray

from memos_bridge.storage.owner import OwnerFilter, OwnerKey
from memos_bridge.storage.vectors import VectorIndex, from_blob, to_blob

A = OwnerKey("hermes", "default", None)
B = OwnerKey("claude", "default", None)
SHARED_B = OwnerKey("claude", "default", None, shared=True)
FILTER_A = OwnerFilter("hermes", "default", None)
FILTER_B = OwnerFilter("claude", "default", None)


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> NDArray[np.float32]:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    unit: NDArray[np.float32] = m / np.linalg.norm(m, axis=1, keepdims=True)
    return unit


def brute_force(matrix: NDArray[np.float32], query: NDArray[np.float32], k: int) -> list[int]:
    scores = matrix @ (query / np.linalg.norm(query))
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def test_blob_round_trip_is_little_endian_float32() -> None:
    vec = np.array([1.0, -2.5, 3.25], dtype=np.float32)
    blob = to_blob(vec)
    assert blob == struct.pack("<3f", 1.0, -2.5, 3.25)
    assert np.array_equal(from_blob(blob, 3), vec)
    assert to_blob([1.0, 2.0]) == struct.pack("<2f", 1.0, 2.0)
    with pytest.raises(ValueError, match="expected 16"):
        from_blob(blob, 4)
    with pytest.raises(ValueError):
        to_blob(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(ValueError):
        to_blob([1.0, float("nan")])


def test_search_equals_brute_force() -> None:
    rng = np.random.default_rng(1)
    n, dim = 3000, 48
    matrix = unit_rows(rng, n, dim)
    index = VectorIndex(dim)
    index.load((f"v{i}", matrix[i], A) for i in range(n))
    for _ in range(10):
        query = rng.standard_normal(dim).astype(np.float32)
        got = index.search(query, 10)
        assert [i for i, _ in got] == [f"v{j}" for j in brute_force(matrix, query, 10)]
        expected = matrix @ (query / np.linalg.norm(query))
        for item_id, score in got:
            assert score == pytest.approx(float(expected[int(item_id[1:])]), abs=1e-5)
    assert len(index.search(rng.standard_normal(dim), n + 50)) == n  # k larger than the index


def test_upsert_replaces_and_accepts_blobs() -> None:
    index = VectorIndex(3)
    index.upsert("x", [1.0, 0.0, 0.0], A)
    index.upsert("y", to_blob([0.0, 1.0, 0.0]), A)
    index.upsert("x", [0.0, 0.0, 2.0], A)  # replace: same id, new direction
    assert len(index) == 2
    top = index.search([0.0, 0.0, 1.0], 1)
    assert top[0][0] == "x"
    assert top[0][1] == pytest.approx(1.0)
    assert index.search([1.0, 0.0, 0.0], 2, min_score=0.5) == []
    with pytest.raises(ValueError):
        index.upsert("z", [1.0, 2.0], A)


def test_remove_swaps_last_row_into_the_hole() -> None:
    rng = np.random.default_rng(2)
    matrix = unit_rows(rng, 50, 16)
    index = VectorIndex(16, initial_capacity=8)
    for i in range(50):
        index.upsert(f"v{i}", matrix[i], A)
    assert index.remove("v10") is True
    assert index.remove("v10") is False
    assert index.remove("v49") is True  # the last row itself
    assert len(index) == 48
    assert "v10" not in index
    keep = [i for i in range(50) if i not in (10, 49)]
    for i in (0, 11, 48):  # every survivor still maps to its own vector
        top_id, score = index.search(matrix[i], 1)[0]
        assert (top_id, round(score, 4)) == (f"v{i}", 1.0)
    query = rng.standard_normal(16).astype(np.float32)
    expected = [f"v{keep[j]}" for j in brute_force(matrix[keep], query, 5)]
    assert [i for i, _ in index.search(query, 5)] == expected


def test_owner_filter_allowed_ids_and_min_score() -> None:
    index = VectorIndex(2)
    index.upsert("a1", [1.0, 0.0], A)
    index.upsert("a2", [0.9, 0.1], A)
    index.upsert("b1", [1.0, 0.01], B)
    index.upsert("b_shared", [0.8, 0.2], SHARED_B)
    query = [1.0, 0.0]
    assert {i for i, _ in index.search(query, 10, FILTER_A)} == {"a1", "a2", "b_shared"}
    assert {i for i, _ in index.search(query, 10, FILTER_B)} == {"b1", "b_shared"}
    stranger = OwnerFilter("nobody", "default", None)
    assert [i for i, _ in index.search(query, 10, stranger)] == ["b_shared"]
    assert [i for i, _ in index.search(query, 10, FILTER_A, allowed_ids={"a2", "b1", "gone"})] == ["a2"]
    assert [i for i, _ in index.search(query, 10, allowed_ids=["b1", "a2"])] == ["b1", "a2"]
    assert [i for i, _ in index.search(query, 10, FILTER_A, min_score=0.999)] == ["a1"]
    assert index.search([0.0, 0.0], 5) == []
    assert index.search(query, 0) == []


def test_grows_past_initial_capacity() -> None:
    rng = np.random.default_rng(3)
    matrix = unit_rows(rng, 1000, 8)
    index = VectorIndex(8, initial_capacity=4)
    for i in range(1000):
        index.upsert(f"v{i}", matrix[i], A if i % 2 else B)
    assert len(index) == 1000
    assert index.capacity >= 1000
    query = rng.standard_normal(8).astype(np.float32)
    assert [i for i, _ in index.search(query, 7)] == [f"v{j}" for j in brute_force(matrix, query, 7)]
    evens = [j for j in range(0, 1000, 2)]
    expected = [f"v{evens[j]}" for j in brute_force(matrix[evens], query, 7)]
    assert [i for i, _ in index.search(query, 7, FILTER_B)] == expected


def test_lazy_loader_runs_once_and_skips_bad_vectors() -> None:
    calls = []

    def loader() -> list[tuple[str, bytes, OwnerKey]]:
        calls.append(1)
        nan = np.array([np.nan, 1.0], dtype="<f4").tobytes()
        return [("ok", to_blob([1.0, 0.0]), A), ("bad_dim", to_blob([1.0, 0.0, 0.0]), A), ("nan", nan, A)]

    index = VectorIndex(2, loader=loader)
    assert calls == []
    index.upsert("late", [0.0, 1.0], A)  # triggers the load first, so it is not lost
    assert calls == [1]
    assert {i for i, _ in index.search([1.0, 1.0], 5)} == {"ok", "late"}
    assert index.last_load.loaded == 1
    assert index.last_load.skipped == 2
    index.invalidate()
    assert len(index) == 1  # reloaded from the loader: "late" was never persisted
    assert calls == [1, 1]


def test_concurrent_updates_and_searches_stay_consistent() -> None:
    rng = np.random.default_rng(4)
    matrix = unit_rows(rng, 400, 16)
    index = VectorIndex(16, initial_capacity=2)
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for i in range(offset, 400, 4):
                index.upsert(f"v{i}", matrix[i], A)
                if i % 3 == 0:
                    index.remove(f"v{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(200):
                for item_id, score in index.search(matrix[0], 5, FILTER_A):
                    assert item_id.startswith("v")
                    assert -1.0001 <= score <= 1.0001
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    survivors = {f"v{i}" for i in range(400) if i % 3 != 0}
    assert len(index) == len(survivors)
    assert all(s in index for s in survivors)


@pytest.mark.slow
def test_benchmark_100k_by_384() -> None:
    """100k × 384 search should take a few milliseconds (generous bound: shared CI machines are noisy)."""
    rng = np.random.default_rng(5)
    n, dim = 100_000, 384
    index = VectorIndex(dim, initial_capacity=n)
    # search cost does not depend on the values: tile a small random block to save set-up time
    matrix = np.tile(rng.random((1000, dim), dtype=np.float32) - np.float32(0.5), (n // 1000, 1))
    owners = (A, B, SHARED_B)
    index.load((f"v{i}", row.tobytes(), owners[i % 3]) for i, row in enumerate(matrix))  # as from the DB
    assert len(index) == n
    query = rng.standard_normal(dim).astype(np.float32)
    timings = []
    for _ in range(15):
        start = time.perf_counter()
        index.search(query, 10, FILTER_A)
        timings.append(time.perf_counter() - start)
    assert float(np.median(timings)) < 0.1


def clustered_rows(rng: np.random.Generator, n: int, dim: int, topics: int) -> NDArray[np.float32]:
    """Rows near one of `topics` random directions (cosine ≈ 0.7 to it), like embeddings of real texts."""
    centres = unit_rows(rng, topics, dim)
    rows = centres[rng.integers(0, topics, n)] + 0.6 * unit_rows(rng, n, dim)
    unit: NDArray[np.float32] = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return unit


def loaded(matrix: NDArray[np.float32]) -> VectorIndex:
    """An index holding `matrix` row i as "v{i}" (owner A), loaded as from the database (trained when large)."""
    index = VectorIndex(matrix.shape[1])
    index.load((f"v{i}", row, A) for i, row in enumerate(matrix))
    return index


def test_large_indexes_probe_a_coarse_quantizer_with_high_recall() -> None:
    from memos_bridge.storage import vectors

    rng = np.random.default_rng(11)
    n, dim = vectors.IVF_MIN_ROWS + 5_000, 64
    matrix = clustered_rows(rng, n, dim, topics=200)
    index = loaded(matrix)
    assert index.ivf_lists == int(np.sqrt(n))
    recalls = []
    for query in clustered_rows(rng, 40, dim, topics=200):
        exact = set(brute_force(matrix, query, 20))
        found = {int(item[1:]) for item, _ in index.search(query, 20)}
        recalls.append(len(found & exact) / 20)
    assert float(np.mean(recalls)) >= 0.9
    # rows added after training are tagged on insert and found; removed rows are gone
    fresh = matrix[0] + 0.01 * unit_rows(rng, 1, dim)[0]
    index.upsert("fresh", fresh, A)
    assert index.search(fresh, 1)[0][0] == "fresh"
    index.remove("fresh")
    index.remove("v0")
    assert "v0" not in {item for item, _ in index.search(matrix[0], 50)}
    # the owner filter still applies on the probed subset
    index.upsert("theirs", matrix[1], B)
    assert "theirs" not in {item for item, _ in index.search(matrix[1], 20, FILTER_A)}
    assert index.search(matrix[1], 1, FILTER_B)[0][0] == "theirs"


def test_small_indexes_stay_exact() -> None:
    rng = np.random.default_rng(12)
    matrix = unit_rows(rng, 500, 32)
    index = VectorIndex(32)
    index.load((f"v{i}", row, A) for i, row in enumerate(matrix))
    assert index.ivf_lists == 0
    query = rng.standard_normal(32).astype(np.float32)
    assert [int(item[1:]) for item, _ in index.search(query, 10)] == brute_force(matrix, query, 10)


def test_every_row_stays_findable_through_updates_removals_and_inserts_after_training() -> None:
    """The IVF layout groups rows by list; an update that changes a row's list, a removal that moves the last
    row into a hole, and rows inserted after training (the tail) must all stay findable: a row queried with
    its own vector is in its own (nearest) list, so it must come back first, exactly once."""
    from memos_bridge.storage import vectors

    rng = np.random.default_rng(21)
    n, dim = vectors.IVF_MIN_ROWS + 2_000, 32
    matrix = clustered_rows(rng, n, dim, topics=150)
    index = loaded(matrix)
    assert index.ivf_lists > 0
    live = {f"v{i}": matrix[i] for i in range(n)}
    for step in range(600):
        choice = step % 3
        if choice == 0:  # an update that moves the row to another region (usually another list)
            item = f"v{int(rng.integers(0, n))}"
            if item in live:
                live[item] = clustered_rows(rng, 1, dim, topics=150)[0]
                index.upsert(item, live[item], A)
        elif choice == 1:  # a removal from anywhere: the last row moves into the hole
            item = f"v{int(rng.integers(0, n))}"
            if item in live:
                del live[item]
                assert index.remove(item)
        else:  # a new row after training
            item = f"new{step}"
            live[item] = clustered_rows(rng, 1, dim, topics=150)[0]
            index.upsert(item, live[item], A)
    assert len(index) == len(live)
    for item in [*rng.choice(sorted(live), size=300, replace=False), *[k for k in live if k.startswith("new")]]:
        found = index.search(live[item], 5)
        ids = [found_id for found_id, _ in found]
        assert ids[0] == item and len(set(ids)) == len(ids), (item, found[:2])
    for gone in {f"v{i}" for i in range(n)} - set(live):
        assert gone not in {found_id for found_id, _ in index.search(matrix[int(gone[1:])], 5)}


def test_many_misplaced_rows_trigger_a_regroup() -> None:
    from memos_bridge.storage import vectors

    rng = np.random.default_rng(22)
    n, dim = vectors.IVF_MIN_ROWS + 100, 16
    matrix = clustered_rows(rng, n, dim, topics=80)
    index = loaded(matrix)
    tail = vectors.IVF_REGROUP_MIN + n // vectors.IVF_REGROUP_SHARE + 1
    fresh = clustered_rows(rng, tail, dim, topics=80)
    for i, row in enumerate(fresh):
        index.upsert(f"new{i}", row, A)
    index.search(fresh[0], 1)  # the search sees a tail over the limit and regroups every row by list
    assert index.search(fresh[0], 1)[0][0] == "new0"
    assert index._sorted_n == len(index) and not index._misplaced  # the layout itself is what this checks


def test_marked_rows_keep_their_mark_through_removals_growth_loads_and_regrouping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memos_bridge.storage import vectors

    monkeypatch.setattr(vectors, "IVF_MIN_ROWS", 600)  # train the coarse quantizer (it reorders every row)
    rng = np.random.default_rng(31)
    n, dim = 900, 16
    matrix = unit_rows(rng, n, dim)
    index = VectorIndex(dim, initial_capacity=4)  # grows several times
    for i in range(n):
        index.upsert(f"r{i}", matrix[i], A, marked=i % 3 == 0)
    index.search(matrix[1], 1)  # trains the quantizer, which regroups every row by list
    assert index.ivf_lists > 0
    for i in range(0, n, 5):  # the last row moves into each hole, with its mark
        index.remove(f"r{i}")
    live = [i for i in range(n) if i % 5]
    for i in live:
        assert index.is_marked(f"r{i}") == (i % 3 == 0)
    marked = [i for i in live if i % 3 == 0]
    for q in rng.choice(marked, size=10, replace=False):
        hits = index.search(matrix[q], 5, marked_only=True)
        assert hits[0][0] == f"r{q}"
        assert all(int(row_id[1:]) % 3 == 0 for row_id, _ in hits)
    unmarked_query = matrix[live[1]] if live[1] % 3 else matrix[live[2]]
    assert all(int(row_id[1:]) % 3 == 0 for row_id, _ in index.search(unmarked_query, 20, marked_only=True))

    reloaded = VectorIndex(dim)
    reloaded.load([(f"r{i}", matrix[i], A, i % 3 == 0) for i in live] + [("plain", matrix[1], A)])
    assert [reloaded.is_marked(f"r{i}") for i in live] == [i % 3 == 0 for i in live]
    assert not reloaded.is_marked("plain") and not reloaded.is_marked("absent")
    index.upsert(f"r{marked[0]}", matrix[marked[0]], A)  # an upsert without the mark clears it
    assert not index.is_marked(f"r{marked[0]}")


def test_one_pass_for_all_rows_and_the_marked_rows_equals_two_searches() -> None:
    rng = np.random.default_rng(5)
    matrix = unit_rows(rng, 500, 24)
    index = VectorIndex(24)
    for i, row in enumerate(matrix):
        index.upsert(f"r{i}", row, (A, B, SHARED_B)[i % 3], marked=i % 4 == 0)
    for _ in range(10):
        query = rng.standard_normal(24).astype(np.float32)
        for owner, floor in ((None, None), (FILTER_A, None), (FILTER_B, 0.1)):
            every, marked = index.search_with_marked(query, 7, owner, min_score=floor)
            assert every == index.search(query, 7, owner, min_score=floor)
            assert marked == index.search(query, 7, owner, min_score=floor, marked_only=True)
            assert marked and all(int(row_id[1:]) % 4 == 0 for row_id, _ in marked)
    assert index.search_with_marked(np.zeros(24, dtype=np.float32), 5) == ([], [])
