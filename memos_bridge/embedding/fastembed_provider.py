"""The real embedder: fastembed running an ONNX sentence model, fully offline.

By default it runs the packaged all-MiniLM-L6-v2 int8 model (see `model_files`); with
`embedding.model_dir` set it runs that fastembed model folder under the name `embedding.model`.

Design choices, and why:
- **Lazy.** Importing this module imports neither fastembed nor onnxruntime (about 0.25 s of import
  time); the model loads on the first `embed()` or on `warmup()`, in a worker thread, exactly once
  even when many first calls race (a lock with a double check).
- **Offline, always.** `HF_HUB_OFFLINE=1` is set before fastembed is imported and the model is loaded
  with `specific_model_path` and `local_files_only`, so fastembed never tries the hub (without a local
  path it retries for ~40 s before failing).
- **Never blocks the event loop.** Model calls run in a worker thread; ONNX Runtime releases the GIL.
  Concurrent `embed()` calls are coalesced by `MicroBatcher` into batches of up to
  `MAX_COALESCED_TEXTS` texts, which fastembed splits into `batch_size` chunks for ONNX Runtime.
- **Queries never wait for documents.** Queries (a `turn.start` a host blocks on) and documents (captured
  steps) have a batcher each, and the two may run the model at the same time (an ONNX Runtime session
  is safe to run from several threads). Under many busy hosts the document batches are large (hundreds
  of texts, most of a second); a query queued behind one waited for all of it, and that wait was most
  of `turn.start`'s p95 under load. Queries still coalesce with each other.
- **Less padding.** Within a batch, texts are sorted by length before chunking, so each chunk pads to
  a similar length; results are put back in input order. Vectors are the same either way (the mean
  pooling ignores padding) up to int8 dynamic-quantisation noise (cosine > 0.999).
- **Cache first.** The LRU is consulted before the model; duplicates inside one call or one coalesced
  batch are embedded once.
- **Empty strings** are embedded like any other text, i.e. as `[CLS] [SEP]`, giving a fixed, valid
  unit vector: consistent with what the model does, and callers need no special case. (Stripping
  means whitespace-only texts get that same vector.)
- **Failures are values, not crashes.** Any load or inference failure becomes
  `MemosError(EMBEDDING_UNAVAILABLE)`, is recorded in `status().last_error`, and a failed load is not
  retried for `LOAD_RETRY_S` seconds, so a broken install does not pay the load cost on every call.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread
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
from memos_bridge.embedding.batcher import MicroBatcher
from memos_bridge.embedding.cache import EmbeddingCache, cache_key
from memos_bridge.embedding.model_files import assemble_packaged_model
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

#: The name the packaged model is registered under in fastembed (and the default `embedding.model`).
PACKAGED_MODEL = "local/all-MiniLM-L6-v2-int8"
PACKAGED_DIM = 384
#: Folder under `<home>/models` that holds the assembled packaged model.
PACKAGED_FOLDER = "all-MiniLM-L6-v2-int8"
#: Upper bound of texts in one coalesced batch (and slice of a large call): large enough to amortise
#: the per-call cost, small enough to keep a batch's peak memory and the wait of requests queued
#: behind it modest.
MAX_COALESCED_TEXTS = 256
#: Seconds during which a failed load is reported again instead of being retried.
LOAD_RETRY_S = 10.0

_REGISTRY_LOCK = threading.Lock()


def _unavailable(message: str, **details: Any) -> MemosError:
    return MemosError(ErrorCode.EMBEDDING_UNAVAILABLE, message, details or None)


def _fresh(err: MemosError) -> MemosError:
    """A new exception with the same content: one error can be raised in several tasks at once, and
    sharing an instance would make their tracebacks pile up on it."""
    return MemosError(err.code, err.message, err.details)


def _detect_model_file(folder: Path) -> str:
    for candidate in ("model.onnx", "onnx/model.onnx", "model_optimized.onnx"):
        if (folder / candidate).is_file():
            return candidate
    raise _unavailable(f"no model.onnx in the embedding model folder {folder}", path=str(folder))


def _ensure_registered(text_embedding: Any, name: str, dim: int, folder: Path) -> None:
    """Make `name` known to fastembed. A name fastembed already knows (built-in, or registered by an
    earlier embedder in this process; `add_custom_model` raises on a second registration) is reused
    after checking its dimension; a new one is registered as a mean-pooled, normalised ONNX model."""
    from fastembed.common.model_description import ModelSource, PoolingType

    with _REGISTRY_LOCK:
        for description in text_embedding.list_supported_models():
            if str(description["model"]).lower() == name.lower():
                if int(description["dim"]) != dim:
                    raise _unavailable(
                        f"embedding model {name} has dimension {description['dim']}, settings say {dim}",
                        model=name,
                    )
                return
        text_embedding.add_custom_model(
            model=name,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf=name),  # required by fastembed, never contacted (specific_model_path)
            dim=dim,
            model_file=_detect_model_file(folder),
            description="memos-bridge local model",
        )


class FastEmbedEmbedder:
    """`Embedder` backed by fastembed; see the module docstring for the behaviour."""

    provider = "fastembed"

    def __init__(self, settings: EmbeddingSettings, models_dir: Path) -> None:
        self.name: str = settings.model
        self.dim: int = settings.dim
        self._settings = settings
        self._models_dir = Path(models_dir)
        self._cache = EmbeddingCache(settings.cache_size)
        size = max(MAX_COALESCED_TEXTS, settings.batch_size)
        self._batchers: dict[Role, MicroBatcher[tuple[Role, list[str]], Vectors]] = {
            role: MicroBatcher(self._process, size) for role in ROLES
        }
        self._load_lock = threading.Lock()
        #: One model run at a time per role; a query and a document batch may overlap.
        self._infer_locks: dict[Role, threading.Lock] = {role: threading.Lock() for role in ROLES}
        self._count_lock = threading.Lock()
        self._model: Any = None  # fastembed.TextEmbedding once loaded
        self._closed = False
        self._load_ms: float | None = None
        self._failed_at: float | None = None
        self._last_error: str | None = None
        self._last_ok_at: int | None = None
        #: Model invocations and texts sent to the model (diagnostics; the tests check coalescing).
        self.model_calls = 0
        self.texts_embedded = 0

    # ----------------------------------------------------------------------------------- public API

    async def embed(self, texts: Sequence[str], role: Role = "document") -> Vectors:
        items = self._prepare(texts, role)
        if not items:
            return empty_vectors(self.dim)
        found, missing = self._lookup(items, role)
        # A large call (a re-index) goes in slices, each queued behind the requests that arrived
        # meanwhile, so interactive queries are not stuck behind thousands of texts.
        for start in range(0, len(missing), MAX_COALESCED_TEXTS):
            chunk = missing[start : start + MAX_COALESCED_TEXTS]
            try:
                computed = await self._batchers[role].submit((role, chunk), len(chunk))
            except MemosError as exc:
                raise _fresh(exc) from exc
            except Exception as exc:  # a bug, not an outage; still never an unexpected type
                raise _unavailable(f"embedding failed: {type(exc).__name__}: {exc}") from exc
            found.update(zip(chunk, computed, strict=True))
        return np.stack([found[text] for text in items])

    def embed_sync(self, texts: Sequence[str], role: Role = "document") -> Vectors:
        items = self._prepare(texts, role)
        if not items:
            return empty_vectors(self.dim)
        found, missing = self._lookup(items, role)
        if missing:
            try:
                computed = self._process([(role, missing)])[0]
            except MemosError:
                raise
            except Exception as exc:
                raise _unavailable(f"embedding failed: {type(exc).__name__}: {exc}") from exc
            found.update(zip(missing, computed, strict=True))
        return np.stack([found[text] for text in items])

    async def warmup(self) -> None:
        await anyio.to_thread.run_sync(self._ensure_loaded)

    def status(self) -> EmbedderStatus:
        return EmbedderStatus(
            available=not self._closed and self._failed_at is None,
            provider=self.provider,
            model=self.name,
            dim=self.dim,
            loaded=self._model is not None,
            load_ms=self._load_ms,
            last_error=self._last_error,
            last_ok_at=self._last_ok_at,
            cache_hits=self._cache.hits,
            cache_misses=self._cache.misses,
        )

    def close(self) -> None:
        """Drop the ONNX session (waits for a running batch); the embedder cannot be used afterwards."""
        with self._load_lock, self._infer_locks["query"], self._infer_locks["document"]:
            self._closed = True
            self._model = None
            self._cache.clear()

    @property
    def cache(self) -> EmbeddingCache:
        return self._cache

    @property
    def batches(self) -> int:
        """Coalesced batches run by the async path (each is one `model_calls` per role in it)."""
        return sum(batcher.batches for batcher in self._batchers.values())

    # ----------------------------------------------------------------------------------- internals

    def _prepare(self, texts: Sequence[str], role: Role) -> list[str]:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        items = check_texts(texts)
        if items and self._closed:
            raise _unavailable("the embedder is closed", model=self.name)
        return items

    def _lookup(self, items: list[str], role: Role) -> tuple[dict[str, Vectors], list[str]]:
        """Cached vectors by text, and the distinct texts still to embed (in first-seen order)."""
        found: dict[str, Vectors] = {}
        missing: dict[str, None] = {}
        for text in items:
            if text in found or text in missing:
                continue
            vector = self._cache.get(cache_key(self.name, role, text))
            if vector is None:
                missing[text] = None
            else:
                found[text] = vector
        return found, list(missing)

    def _process(self, payloads: list[tuple[Role, list[str]]]) -> list[Vectors]:
        """Worker thread: embed a coalesced batch, one model call per role, each text once."""
        distinct: dict[Role, dict[str, None]] = {}
        for role, texts in payloads:
            distinct.setdefault(role, {}).update(dict.fromkeys(texts))
        vectors: dict[tuple[Role, str], Vectors] = {}
        for role, texts_of_role in distinct.items():
            texts = list(texts_of_role)
            for text, vector in zip(texts, self._compute(texts, role), strict=True):
                vectors[(role, text)] = vector
        return [np.stack([vectors[(role, text)] for text in texts]) for role, texts in payloads]

    def _compute(self, texts: list[str], role: Role) -> Vectors:
        model = self._ensure_loaded()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        ordered = [texts[i] for i in order]
        with self._infer_locks[role]:
            if self._closed:
                raise _unavailable("the embedder is closed", model=self.name)
            try:
                embed = model.query_embed if role == "query" else model.embed
                raw = np.asarray(list(embed(ordered, batch_size=self._settings.batch_size)))
                if raw.shape != (len(texts), self.dim):
                    raise RuntimeError(f"model returned shape {raw.shape} for {len(texts)} texts")
            except Exception as exc:
                err = _unavailable(f"embedding failed: {type(exc).__name__}: {exc}", model=self.name)
                self._last_error = err.message
                log.error("embedding %d texts failed: %r", len(texts), exc)
                raise err from exc
            with self._count_lock:
                self.model_calls += 1
                self.texts_embedded += len(texts)
        result = np.empty((len(texts), self.dim), dtype=np.float32)
        result[order] = l2_normalise(raw)
        for text, vector in zip(texts, result, strict=True):
            self._cache.put(cache_key(self.name, role, text), vector)
        self._last_ok_at = now_ms()
        return result

    def _ensure_loaded(self) -> Any:
        model = self._model
        if model is not None:
            return model
        with self._load_lock:
            if self._closed:
                raise _unavailable("the embedder is closed", model=self.name)
            if self._model is not None:
                return self._model
            if self._failed_at is not None and time.monotonic() - self._failed_at < LOAD_RETRY_S:
                raise _unavailable(self._last_error or "the embedding model failed to load", model=self.name)
            started = time.perf_counter()
            try:
                model = self._load()
            except Exception as exc:
                err = (
                    exc
                    if isinstance(exc, MemosError)
                    else _unavailable(
                        f"could not load the embedding model {self.name}: {type(exc).__name__}: {exc}",
                        model=self.name,
                    )
                )
                self._failed_at = time.monotonic()
                self._last_error = err.message
                log.error("embedding model %s failed to load: %s", self.name, err.message)
                if err is exc:
                    raise
                raise err from exc
            self._load_ms = (time.perf_counter() - started) * 1000
            self._failed_at = None
            self._model = model
            log.info("embedding model %s loaded in %.0f ms", self.name, self._load_ms)
            return model

    def _model_folder(self) -> Path:
        settings = self._settings
        if settings.model_dir:
            folder = Path(settings.model_dir).expanduser()
            if not folder.is_dir():
                raise _unavailable(f"embedding.model_dir {folder} is not a folder", path=str(folder))
            return folder
        if self.name != PACKAGED_MODEL:
            raise _unavailable(
                f"embedding model {self.name} is not packaged; set embedding.model_dir to its folder",
                model=self.name,
            )
        if self.dim != PACKAGED_DIM:
            raise _unavailable(f"the packaged model has dimension {PACKAGED_DIM}, settings say {self.dim}")
        return assemble_packaged_model(self._models_dir / PACKAGED_FOLDER, settings.max_length)

    def _load(self) -> Any:
        """Build the fastembed session (worker thread, under the load lock)."""
        folder = self._model_folder()
        os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub is imported: it reads this once
        from fastembed import TextEmbedding

        _ensure_registered(TextEmbedding, self.name, self.dim, folder)
        self._models_dir.mkdir(parents=True, exist_ok=True)
        model = TextEmbedding(
            self.name,
            cache_dir=str(self._models_dir),  # fastembed insists on one; nothing is written there
            threads=self._settings.threads,
            specific_model_path=str(folder),
            local_files_only=True,
            lazy_load=True,  # the session is built by _load_session
        )
        _load_session(
            model, self._settings.threads, spinning=self._settings.onnx_spinning, arena=self._settings.onnx_memory_arena
        )
        # One tiny run allocates ONNX Runtime's buffers now rather than during the first real call.
        probe = np.asarray(list(model.embed(["warm up"], batch_size=1)))
        if probe.shape != (1, self.dim):
            raise _unavailable(
                f"embedding model {self.name} produces {probe.shape[-1]}-d vectors, settings say {self.dim}",
                model=self.name,
            )
        return model


def _load_session(model: Any, threads: int | None, *, spinning: bool, arena: bool = False) -> None:
    """Build the ONNX Runtime session of a lazily constructed fastembed model, with thread spinning and the
    memory arena off unless the settings turn them on.

    Why: ONNX Runtime's intra-op threads spin for a while after every operator, waiting for the next one.
    On a 2-core machine the spinning threads take the cores the service's own threads need while a query
    is embedded (routing, keyword channels): with spinning, one `turn.start` cost about a third more CPU
    and its query embedding ran 2-3x slower than the same embedding alone (scripts/bench_retrieval.py).
    fastembed exposes no session options, so the model is constructed with `lazy_load` and its session
    is built here from the same file, providers and thread count, with `session.intra_op.allow_spinning`
    as `embedding.onnx_spinning` says (building a second session and dropping fastembed's kept ~50 MiB of
    freed arena resident). If fastembed's internals ever change shape, its own loader runs instead (logged),
    which is only slower.

    The arena: ONNX Runtime's CPU arena keeps the largest buffers it ever needed. After one batch of 32 texts
    of 256 tokens it held 672 MiB (in-process, after a heap trim), and a 30-minute soak's resident memory
    jumped by 104 MiB within 3,000 steps and never came back. Without the arena each run frees its buffers
    (the service's heap trims return them); batch and query embedding ran as fast either way (in-process,
    150 batches of 16 texts and 200 single queries each way).
    """
    inner = model.model  # fastembed's OnnxTextEmbedding
    try:
        import onnxruntime as ort

        path = Path(inner._model_dir) / inner.model_description.model_file
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads is not None:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1  # graph nodes run in order; runs overlap only across the two roles
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        options.enable_cpu_mem_arena = arena
        inner.model = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
        inner._ensure_tokenizer()
    except Exception as exc:  # fastembed's own session: slower, never broken
        log.warning("could not build the ONNX Runtime session with the service's options: %r", exc)
        inner.model = None
        inner.load_onnx_model()
