"""Settings for the LLM section, and MemoryCore building the facade (host provider, budgets, api_logs)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from memos_bridge.config import LLMSettings, load_settings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core.facade import MemoryCore
from memos_bridge.embedding.base import Embedder
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.openai_compat import OpenAICompatLLM
from memos_bridge.retrieval.intent import classify_intent, classify_intent_heuristic
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import ApiLogRow

from ..conftest import make_settings
from .fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

KEY = "sk-from-env-0123456789"


def test_llm_settings_defaults_are_documented() -> None:
    settings = LLMSettings()
    assert settings.provider == "host" and settings.timeout_ms == 45_000
    assert settings.fallback_to_host and settings.json_schema_mode
    assert (settings.budget_per_episode, settings.budget_per_hour) == (60, 600)
    assert settings.breaker_terminal_cooldown_s == 600 and settings.breaker_cooldown_s == 60
    for name, field in LLMSettings.model_fields.items():
        assert field.description, f"llm.{name} has no description"


def test_openai_compatible_needs_a_base_url(tmp_path: Path) -> None:
    with pytest.raises(MemosError) as info:
        load_settings(tmp_path, env={"MEMOS_BRIDGE_LLM__PROVIDER": "openai_compatible"})
    assert info.value.code is ErrorCode.CONFIG_INVALID and "base_url" in info.value.message


def test_the_api_key_comes_from_the_environment_and_is_never_shown(tmp_path: Path) -> None:
    env = {
        "MEMOS_BRIDGE_LLM__PROVIDER": "openai_compatible",
        "MEMOS_BRIDGE_LLM__BASE_URL": "http://127.0.0.1:11434/v1",
        "MEMOS_BRIDGE_LLM__API_KEY": KEY,
        "MEMOS_BRIDGE_LLM__BUDGET_PER_HOUR": "5",
    }
    settings = load_settings(tmp_path, env=env)
    assert settings.llm.api_key is not None and settings.llm.api_key.get_secret_value() == KEY
    assert settings.llm.budget_per_hour == 5
    assert KEY not in repr(settings) and KEY not in settings.model_dump_json() and KEY not in str(settings.llm)


async def test_core_builds_a_facade_around_the_host_provider_and_logs_calls(core_factory: Any) -> None:
    host = ScriptedProvider("pong", name="host")
    core = await core_factory(llm=host)
    assert isinstance(core.llm, LLMFacade) and core.llm.name == "host"
    result = await core.llm_test(dto.LlmTestParams(prompt="ping"))
    assert result.ok and result.text == "pong"
    intent = await classify_intent("why is the sky blue", core.llm)  # weak heuristic → asks the LLM
    assert intent.source == "heuristic"  # "pong" is not an intent: malformed twice → the heuristic stands
    assert await core.llm.flush_logs()
    rows = await core.db.read(lambda s: list(s.scalars(select(ApiLogRow).order_by(ApiLogRow.id))))
    assert [(r.tool_name, r.success) for r in rows] == [
        ("llm:llm.test", True),
        ("llm:session.intent", False),
        ("llm:session.intent", False),
    ]
    assert rows[1].input_json["prompt"] == "session.intent.classify"
    stats = core.llm.stats()["ops"]
    assert stats["session.intent"]["malformed"] == 2 and stats["llm.test"]["calls"] == 1


@pytest.fixture
async def make_core(tmp_path: Path, real_embedder: Embedder) -> AsyncIterator[Callable[..., MemoryCore]]:
    """A core with chosen `[llm]` settings (core_factory's `llm` argument is the provider, not the section)."""
    made: list[MemoryCore] = []

    def make(host: Any, **llm: Any) -> MemoryCore:
        settings = make_settings(tmp_path / f"home{len(made)}", llm=llm)
        settings.home.mkdir(parents=True, exist_ok=True)
        db = Database(settings.database_url)
        db.open()
        core = MemoryCore(settings, db, real_embedder, host)
        made.append(core)
        return core

    yield make
    for core in made:
        await core.llm.aclose()
        core.db.close()


async def test_core_uses_openai_compatible_first_with_the_host_as_fallback(make_core: Any) -> None:
    host = ScriptedProvider("pong", name="host")
    core = make_core(host, provider="openai_compatible", base_url="http://127.0.0.1:9/v1")
    providers = core.llm.providers
    assert isinstance(providers[0], OpenAICompatLLM) and providers[1] is host
    assert core.llm.name == "openai_compatible"


async def test_an_exhausted_budget_makes_callers_use_their_fallback(make_core: Any) -> None:
    host = ScriptedProvider('{"kind": "task", "confidence": 0.9}', name="host")
    core = make_core(host, budget_per_hour=1)
    first = await classify_intent("why is the sky blue", core.llm)
    second = await classify_intent("why is the sky blue", core.llm)
    assert first.source == "llm"
    assert second == classify_intent_heuristic("why is the sky blue")
    assert len(host.calls) == 1
    assert not core.llm.available()  # callers check this first, so the refusal costs nothing
    assert core.llm.stats()["budget"]["usedThisHour"] == 1
    health = await core.health()
    assert health.llm.available is False  # an exhausted budget reads as "no LLM" to health too
