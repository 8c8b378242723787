"""In-memory brute-force vector index (cosine similarity with numpy), and the vector BLOB format.

Vectors live once in the database, as little-endian float32 BLOBs (`to_blob` / `from_blob`). On SQLite (and
on a PostgreSQL server without pgvector) the service loads them into one contiguous float32 matrix and keeps
it current with `upsert` / `remove` as rows change. A matrix-vector product plus `argpartition` over
100k × 384 takes a few milliseconds, much faster than a KNN query over BLOBs in SQLite, and needs no SQLite
extension. On PostgreSQL with pgvector the database searches instead (`pg_vectors.py`), and this index is
not built; `core/vector_store.py` chooses.

Layout: row `i` of the matrix holds the unit-normalised vector of `ids[i]`; `groups[i]` is a small integer
naming its owner namespace and `shared[i]` says whether it is visible to every namespace. Owner filtering
is therefore one vectorised comparison, not a Python loop. Removal moves the last row into the hole, so it
is O(1) and the live rows stay contiguous; capacity doubles when full.

All methods are thread-safe (one re-entrant lock). A search holds the lock for its matrix product, which
keeps it consistent with concurrent updates without copying the matrix.

Large indexes (≥ `IVF_MIN_ROWS`) add an inverted-file coarse quantizer: √n spherical k-means centroids,
each row tagged with its nearest one; a query scores only the rows of its nearest 15 % of the lists
instead of all of them, with recall@20 of 0.93 at 25k and 0.99 at 100k rows against the exact search on
clustered data (tested at 25k). Training also groups the rows by list, so a probed list is one contiguous
slice of the matrix: at 100k × 384 the exact product reads 150 MB and costs ~10–13 ms per index on one
core, gathering the probed rows out of place ~9 ms, the contiguous slices ~3 ms. Rows inserted after
training form an unsorted tail, and a row an update or a removal leaves in another list's slice is
"misplaced"; both are scored through a small gather, and the rows are regrouped when either grows large.
Below the threshold (most users) the search stays exact. The centroids are re-trained when the index has
doubled since.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from memos_bridge.storage.owner import OwnerFilter, OwnerKey

FloatArray = NDArray[np.float32]
AnyFloatArray = NDArray[np.floating[Any]]
VectorLike = AnyFloatArray | Sequence[float] | bytes
VectorRow = tuple[str, VectorLike, OwnerKey] | tuple[str, VectorLike, OwnerKey, bool]
"""(id, vector as BLOB or array, owner[, marked]) as produced by a loader (`marked`: see `VectorIndex`)."""

_BLOB_DTYPE = np.dtype("<f4")

VECTOR_FIELDS: dict[str, tuple[str, ...]] = {
    "trace": ("vec_summary", "vec_action"),
    "policy": ("vec",),
    "skill": ("vec",),
    "world_model": ("vec",),
    "memory": ("vec",),
}
"""The vector columns of each searchable kind (traces: what the step did and the action it took)."""

IVF_MIN_ROWS = 20_000
"""Indexes smaller than this are searched exactly."""
IVF_TRAIN_SAMPLE = 16_384
IVF_ITERATIONS = 6
IVF_PROBE_SHARE = 0.15
IVF_MIN_PROBE = 8
IVF_REGROUP_SHARE = 16
"""Regroup the rows by list when the unsorted tail or the misplaced rows exceed 1/16 of the index."""
IVF_REGROUP_MIN = 256


def to_blob(vec: AnyFloatArray | Sequence[float]) -> bytes:
    """Serialise a 1-D vector as little-endian float32 bytes (the BLOB column format)."""
    arr = np.asarray(vec, dtype=_BLOB_DTYPE)
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("vector contains NaN or infinity")
    return arr.tobytes()


def from_blob(blob: bytes, dim: int) -> FloatArray:
    """Decode a BLOB written by `to_blob`; raises ValueError unless it holds exactly `dim` floats."""
    if len(blob) != dim * _BLOB_DTYPE.itemsize:
        raise ValueError(f"vector blob has {len(blob)} bytes, expected {dim * _BLOB_DTYPE.itemsize}")
    return np.frombuffer(blob, dtype=_BLOB_DTYPE).astype(np.float32)


def vector_text(vec: AnyFloatArray | Sequence[float]) -> str:
    """A unit vector as compact text for a JSON column (float16, base64: 1 KiB for 384 dimensions). For vectors
    kept beside a row (the requests a lesson was learnt on), compared by cosine only, where float16 is ample."""
    arr = np.asarray(vec, dtype=np.float32)
    if arr.ndim != 1 or not np.isfinite(arr).all():
        raise ValueError("expected a finite 1-D vector")
    return base64.b64encode(arr.astype("<f2").tobytes()).decode("ascii")


def vector_from_text(text: str, dim: int | None = None) -> FloatArray | None:
    """Decode `vector_text`; None for anything else (a record written by another version stays readable)."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    if not raw or len(raw) % 2 or (dim is not None and len(raw) != dim * 2):
        return None
    return np.frombuffer(raw, dtype="<f2").astype(np.float32)


class LoadResult(NamedTuple):
    loaded: int
    skipped: int
    """Rows whose vector had the wrong dimension or was not finite (e.g. written by another model)."""


class VectorIndex:
    """A cosine-similarity index of `dim`-dimensional vectors keyed by string id, with owner filtering.

    A row may be *marked* (`upsert(..., marked=True)`, or a 4th element of a loaded row), and a search may be
    limited to the marked rows. The owner uses it to let one matrix answer for two columns that hold the same
    vector in most rows: a step's summary and action vectors are one embedding when the step was embedded
    once, so the action column's search scores the summary matrix's marked rows instead of a second copy.
    """

    def __init__(
        self,
        dim: int,
        *,
        loader: Callable[[], Iterable[VectorRow]] | None = None,
        initial_capacity: int = 1024,
    ) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self._dim = dim
        self._loader = loader
        self._loaded = loader is None
        self._lock = threading.RLock()
        self._initial_capacity = max(1, initial_capacity)
        self._reset(self._initial_capacity)
        self.last_load = LoadResult(0, 0)

    # -- state -------------------------------------------------------------------------------------------

    def _reset(self, capacity: int) -> None:
        self._matrix: FloatArray = np.zeros((capacity, self._dim), dtype=np.float32)
        self._cluster: NDArray[np.int32] = np.full(capacity, -1, dtype=np.int32)
        self._centroids: FloatArray | None = None
        self._trained_at = 0
        # IVF layout: rows [0, _sorted_n) are grouped by list, list c at [_list_starts[c], _list_starts[c + 1]);
        # later rows are the unsorted tail; `_misplaced` holds grouped positions whose row is of another list.
        self._sorted_n = 0
        self._list_starts: NDArray[np.intp] = np.zeros(1, dtype=np.intp)
        self._misplaced: set[int] = set()
        self._groups: NDArray[np.int32] = np.zeros(capacity, dtype=np.int32)
        self._shared: NDArray[np.bool_] = np.zeros(capacity, dtype=np.bool_)
        self._marked: NDArray[np.bool_] = np.zeros(capacity, dtype=np.bool_)
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._group_ids: dict[tuple[str, str, str | None], int] = {}

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def capacity(self) -> int:
        return int(self._matrix.shape[0])

    def __len__(self) -> int:
        with self._lock:
            self._ensure_loaded()
            return len(self._ids)

    def __contains__(self, item: object) -> bool:
        with self._lock:
            self._ensure_loaded()
            return item in self._pos

    def get(self, item_id: str) -> FloatArray | None:
        """A copy of the stored (normalised) vector of `item_id`, or None."""
        with self._lock:
            self._ensure_loaded()
            at = self._pos.get(item_id)
            return None if at is None else self._matrix[at].copy()

    def _group(self, owner: OwnerKey) -> int:
        key = owner.namespace
        gid = self._group_ids.get(key)
        if gid is None:
            gid = self._group_ids[key] = len(self._group_ids)
        return gid

    def _reserve(self, needed: int) -> None:
        cap = self.capacity
        if needed <= cap:
            return
        new_cap = max(needed, cap * 2)
        n = len(self._ids)
        matrix = np.zeros((new_cap, self._dim), dtype=np.float32)
        matrix[:n] = self._matrix[:n]
        cluster = np.full(new_cap, -1, dtype=np.int32)
        cluster[:n] = self._cluster[:n]
        self._cluster = cluster
        groups = np.zeros(new_cap, dtype=np.int32)
        groups[:n] = self._groups[:n]
        shared = np.zeros(new_cap, dtype=np.bool_)
        shared[:n] = self._shared[:n]
        marked = np.zeros(new_cap, dtype=np.bool_)
        marked[:n] = self._marked[:n]
        self._matrix, self._groups, self._shared, self._marked = matrix, groups, shared, marked

    def _coerce(self, vec: VectorLike) -> FloatArray:
        """The vector as a float32 array of shape (dim,); raises ValueError otherwise."""
        arr = from_blob(vec, self._dim) if isinstance(vec, bytes) else np.asarray(vec, dtype=np.float32)
        if arr.shape != (self._dim,):
            raise ValueError(f"expected a vector of shape ({self._dim},), got {arr.shape}")
        return arr

    def _normalised(self, vec: VectorLike) -> FloatArray:
        """Validated unit vector (a zero vector stays zero and then scores 0 against everything)."""
        arr = self._coerce(vec)
        sumsq = float(np.dot(arr, arr))  # NaN/inf anywhere (or float32 overflow) makes this non-finite
        if not np.isfinite(sumsq):
            raise ValueError("vector contains NaN or infinity")
        return arr / np.float32(np.sqrt(sumsq)) if sumsq > 0 else arr

    def _put(self, item_id: str, unit: FloatArray, owner: OwnerKey, marked: bool = False) -> None:
        pos = self._pos.get(item_id)
        if pos is None:
            pos = len(self._ids)
            self._reserve(pos + 1)
            self._ids.append(item_id)
            self._pos[item_id] = pos
        self._matrix[pos] = unit
        self._groups[pos] = self._group(owner)
        self._shared[pos] = owner.shared
        self._marked[pos] = marked
        if self._centroids is not None:
            self._cluster[pos] = int(np.argmax(self._centroids @ unit))
            self._note_placement(pos)

    # -- loading -----------------------------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        if not self._loaded and self._loader is not None:
            self._load_locked(self._loader())

    def ensure_loaded(self) -> None:
        """Run the loader now if it has not run yet (otherwise the first use does)."""
        with self._lock:
            self._ensure_loaded()

    def invalidate(self) -> None:
        """Forget the contents; the loader (if any) runs again on next use."""
        with self._lock:
            self._reset(self._initial_capacity)
            self._loaded = self._loader is None

    def load(self, rows: Iterable[VectorRow]) -> LoadResult:
        """Replace the contents with `rows`; rows with an unusable vector are skipped and counted."""
        with self._lock:
            return self._load_locked(rows)

    def _load_locked(self, rows: Iterable[VectorRow]) -> LoadResult:
        # A start-up load is ~10^5 rows: check sizes per row (cheap), then decode, validate and normalise
        # in bulk from one joined buffer instead of building an array per row.
        expected = self._dim * _BLOB_DTYPE.itemsize
        slot: dict[str, int] = {}
        chunks: list[bytes] = []
        owners: list[OwnerKey] = []
        marks: list[bool] = []
        skipped = 0
        for item_id, vec, owner, *mark in rows:
            if isinstance(vec, bytes):
                raw = vec
            else:
                arr = np.asarray(vec, dtype=_BLOB_DTYPE)
                raw = arr.tobytes() if arr.shape == (self._dim,) else b""
            if len(raw) != expected:
                skipped += 1
                continue
            at = slot.get(item_id)
            if at is None:  # a repeated id replaces the earlier row, as upsert would
                slot[item_id] = len(chunks)
                chunks.append(raw)
                owners.append(owner)
                marks.append(bool(mark and mark[0]))
            else:
                chunks[at], owners[at], marks[at] = raw, owner, bool(mark and mark[0])
        ids = list(slot)
        matrix = np.frombuffer(b"".join(chunks), dtype=_BLOB_DTYPE).reshape(len(ids), self._dim)
        sumsq = np.einsum("ij,ij->i", matrix, matrix)  # same finiteness rule as `_normalised`
        finite = np.isfinite(sumsq)
        if not finite.all():
            skipped += int((~finite).sum())
            keep = np.flatnonzero(finite)
            matrix, sumsq = matrix[keep], sumsq[keep]
            ids = [ids[i] for i in keep]
            owners = [owners[i] for i in keep]
            marks = [marks[i] for i in keep]

        n = len(ids)
        self._reset(max(self._initial_capacity, n))
        live = self._matrix[:n]
        norms = np.sqrt(sumsq)[:, None]
        np.divide(matrix, norms, out=live, where=norms > 0)
        self._ids = ids
        self._pos = {item_id: i for i, item_id in enumerate(ids)}
        for i, owner in enumerate(owners):
            self._groups[i] = self._group(owner)
            self._shared[i] = owner.shared
        self._marked[:n] = marks
        self._loaded = True
        self.last_load = LoadResult(n, skipped)
        self._maybe_train()
        return self.last_load

    # -- coarse quantizer (large indexes) ----------------------------------------------------------------

    @property
    def ivf_lists(self) -> int:
        """Number of centroids of the coarse quantizer (0 = exact search)."""
        with self._lock:
            return 0 if self._centroids is None else int(self._centroids.shape[0])

    def _maybe_train(self) -> None:
        n = len(self._ids)
        if n >= IVF_MIN_ROWS and (self._centroids is None or n >= 2 * self._trained_at):
            self._train(n)
        elif self._centroids is not None:
            limit = max(IVF_REGROUP_MIN, n // IVF_REGROUP_SHARE)
            if n - self._sorted_n > limit or len(self._misplaced) > limit:
                self._group_by_list(n)

    def _train(self, n: int) -> None:
        """Spherical k-means on a sample, then tag every row with its nearest centroid."""
        lists = max(int(np.sqrt(n)), 2)
        rng = np.random.default_rng(n)
        sample = self._matrix[rng.choice(n, size=min(n, IVF_TRAIN_SAMPLE), replace=False)]
        centroids = sample[rng.choice(sample.shape[0], size=lists, replace=False)].copy()
        for _ in range(IVF_ITERATIONS):
            nearest = np.argmax(sample @ centroids.T, axis=1)
            sums = np.zeros_like(centroids)
            np.add.at(sums, nearest, sample)
            norms = np.linalg.norm(sums, axis=1)
            empty = norms == 0
            if empty.any():  # re-seed empty lists with random sample rows
                sums[empty] = sample[rng.choice(sample.shape[0], size=int(empty.sum()), replace=False)]
                norms[empty] = 1.0
            centroids = (sums / norms[:, None]).astype(np.float32)
        for start in range(0, n, 8192):
            block = self._matrix[start : min(start + 8192, n)]
            self._cluster[start : start + block.shape[0]] = np.argmax(block @ centroids.T, axis=1)
        self._centroids = centroids
        self._trained_at = n
        self._group_by_list(n)

    def _group_by_list(self, n: int) -> None:
        """Reorder rows [0, n) by list (stable), so every list is one contiguous slice."""
        assert self._centroids is not None
        order = np.argsort(self._cluster[:n], kind="stable")
        for start in range(0, self._dim, 64):  # by column blocks: the temporary copy is n × 64, not n × dim
            stop = min(start + 64, self._dim)
            self._matrix[:n, start:stop] = self._matrix[order, start:stop]
        self._groups[:n] = self._groups[order]
        self._shared[:n] = self._shared[order]
        self._marked[:n] = self._marked[order]
        self._cluster[:n] = self._cluster[order]
        self._ids = [self._ids[i] for i in order]
        self._pos = {item_id: i for i, item_id in enumerate(self._ids)}
        lists = self._centroids.shape[0]
        self._list_starts = np.searchsorted(self._cluster[:n], np.arange(lists + 1)).astype(np.intp)
        self._sorted_n = n
        self._misplaced.clear()

    def _slot_lists(self, positions: NDArray[np.intp]) -> NDArray[np.intp]:
        """The list whose slice each grouped position lies in (not necessarily its row's own list)."""
        return np.searchsorted(self._list_starts, positions, side="right") - 1

    def _note_placement(self, pos: int) -> None:
        """Record whether grouped position `pos` now holds a row of another list than its slice's."""
        if pos >= self._sorted_n:
            return
        if int(self._cluster[pos]) == int(self._slot_lists(np.asarray([pos]))[0]):
            self._misplaced.discard(pos)
        else:
            self._misplaced.add(pos)

    def _probe(self, query: FloatArray, n: int) -> tuple[NDArray[np.intp], FloatArray] | None:
        """(positions, scores) of the rows of the query's nearest lists, or None for an exact search.

        The probed lists' slices are scored in place; the tail and the misplaced rows of probed lists
        (outside the probed slices, so no row is scored twice) through one gather.
        """
        if self._centroids is None:
            return None
        lists = self._centroids.shape[0]
        probe = max(IVF_MIN_PROBE, int(np.ceil(lists * IVF_PROBE_SHARE)))
        if probe >= lists:
            return None
        nearest = np.sort(np.argpartition(-(self._centroids @ query), probe - 1)[:probe])
        positions: list[NDArray[np.intp]] = []
        scores: list[FloatArray] = []
        grouped = self._sorted_n
        for c in nearest.tolist():
            start, stop = int(self._list_starts[c]), min(int(self._list_starts[c + 1]), grouped)
            if start < stop:
                positions.append(np.arange(start, stop, dtype=np.intp))
                scores.append(self._matrix[start:stop] @ query)
        extra = np.arange(grouped, n, dtype=np.intp)
        if self._misplaced:
            moved = np.fromiter(self._misplaced, dtype=np.intp, count=len(self._misplaced))
            extra = np.concatenate([moved[~np.isin(self._slot_lists(moved), nearest)], extra])
        extra = extra[np.isin(self._cluster[extra], nearest)]
        if extra.size:
            positions.append(extra)
            scores.append(self._matrix[extra] @ query)
        if not positions:
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float32)
        return np.concatenate(positions), np.concatenate(scores)

    # -- updates -----------------------------------------------------------------------------------------

    def upsert(self, item_id: str, vec: VectorLike, owner: OwnerKey, *, marked: bool = False) -> None:
        """Insert or replace the vector of `item_id` (raises ValueError for a bad vector)."""
        unit = self._normalised(vec)
        with self._lock:
            self._ensure_loaded()
            self._put(item_id, unit, owner, marked)

    def is_marked(self, item_id: str) -> bool:
        """Whether `item_id` is present and marked."""
        with self._lock:
            self._ensure_loaded()
            pos = self._pos.get(item_id)
            return pos is not None and bool(self._marked[pos])

    def remove(self, item_id: str) -> bool:
        """Drop `item_id` (O(1): the last row moves into its slot). Returns whether it was present."""
        with self._lock:
            self._ensure_loaded()
            pos = self._pos.pop(item_id, None)
            if pos is None:
                return False
            last = len(self._ids) - 1
            if pos != last:
                moved = self._ids[last]
                self._matrix[pos] = self._matrix[last]
                self._groups[pos] = self._groups[last]
                self._cluster[pos] = self._cluster[last]
                self._shared[pos] = self._shared[last]
                self._marked[pos] = self._marked[last]
                self._ids[pos] = moved
                self._pos[moved] = pos
            self._ids.pop()
            if last < self._sorted_n:  # no tail: the grouped rows end one earlier
                self._sorted_n = last
                self._misplaced.discard(last)
            if pos != last:
                self._note_placement(pos)
            return True

    # -- search ------------------------------------------------------------------------------------------

    def search(
        self,
        query_vec: VectorLike,
        k: int,
        owner_filter: OwnerFilter | None = None,
        allowed_ids: Collection[str] | None = None,
        min_score: float | None = None,
        marked_only: bool = False,
    ) -> list[tuple[str, float]]:
        """Top-`k` [(id, cosine similarity)], best first.

        `owner_filter` keeps rows of that namespace plus shared rows (None = no filtering);
        `allowed_ids` restricts the candidates (and then only those rows are scored);
        `min_score` drops weaker matches; `marked_only` keeps only marked rows. A zero query vector matches
        nothing.
        """
        return self._search_sets(query_vec, k, owner_filter, allowed_ids, min_score, (marked_only,))[0]

    def search_with_marked(
        self, query_vec: VectorLike, k: int, owner_filter: OwnerFilter | None = None, min_score: float | None = None
    ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """`search(...)` and `search(..., marked_only=True)` from one matrix product (the owner searches two
        columns at once when one holds the other's repeated vectors)."""
        every, marked = self._search_sets(query_vec, k, owner_filter, None, min_score, (False, True))
        return every, marked

    def _search_sets(
        self,
        query_vec: VectorLike,
        k: int,
        owner_filter: OwnerFilter | None,
        allowed_ids: Collection[str] | None,
        min_score: float | None,
        marked_only: tuple[bool, ...],
    ) -> list[list[tuple[str, float]]]:
        """One scoring pass, then a top `k` per entry of `marked_only` (all rows, or the marked rows)."""
        query = self._normalised(query_vec)
        if k <= 0 or not query.any():
            return [[] for _ in marked_only]
        with self._lock:
            self._ensure_loaded()
            n = len(self._ids)
            if n == 0:
                return [[] for _ in marked_only]
            positions: NDArray[np.intp] | None = None
            if allowed_ids is not None:
                found = [p for i in allowed_ids if (p := self._pos.get(i)) is not None]
                positions = np.unique(np.asarray(found, dtype=np.intp))
                scores = self._matrix[positions] @ query
            else:
                self._maybe_train()
                probed = self._probe(query, n)
                if probed is None:
                    scores = self._matrix[:n] @ query
                else:
                    positions, scores = probed
            mask: NDArray[np.bool_] | None = None
            if owner_filter is not None:
                gids = [gid for namespace, gid in self._group_ids.items() if owner_filter.matches(namespace)]
                groups = self._groups[:n] if positions is None else self._groups[positions]
                shared = self._shared[:n] if positions is None else self._shared[positions]
                mask = (groups == gids[0] if len(gids) == 1 else np.isin(groups, gids)) | shared
            if min_score is not None:
                above = scores >= np.float32(min_score)
                mask = above if mask is None else mask & above
            marked = self._marked[:n] if positions is None else self._marked[positions]
            return [
                self._top(positions, scores, (marked if mask is None else mask & marked) if only else mask, k)
                for only in marked_only
            ]

    def _top(
        self, positions: NDArray[np.intp] | None, scores: FloatArray, mask: NDArray[np.bool_] | None, k: int
    ) -> list[tuple[str, float]]:
        """The best `k` scored rows the mask lets through, best first (caller holds the lock)."""
        total = int(scores.shape[0])
        if mask is not None:
            total = int(np.count_nonzero(mask))
            scores = np.where(mask, scores, np.float32(-np.inf))
        take = min(k, total)
        if take == 0:
            return []
        top = np.argpartition(-scores, take - 1)[:take] if take < scores.shape[0] else np.arange(scores.shape[0])
        best = top[np.argsort(-scores[top], kind="stable")]
        rows = best if positions is None else positions[best]
        return [(self._ids[int(r)], float(scores[int(b)])) for r, b in zip(rows, best, strict=True)]
