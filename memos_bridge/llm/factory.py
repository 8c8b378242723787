"""Build the `LLMFacade` the service uses from `LLMSettings`.

The host provider is passed in rather than built here because it needs the live connection hub, which
belongs to the server; everything else (the HTTP provider, the chain order, breakers, budgets, the log
sink) follows from the settings.
"""

from __future__ import annotations

import time

from memos_bridge.config import LLMSettings
from memos_bridge.llm.apilog import ApiLogSink
from memos_bridge.llm.base import LLMProvider
from memos_bridge.llm.breaker import BreakerPolicy, Clock
from memos_bridge.llm.budget import CallBudget
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.host import NoLLM
from memos_bridge.llm.openai_compat import OpenAICompatLLM


def build_providers(settings: LLMSettings, host: LLMProvider | None) -> list[LLMProvider]:
    """The provider chain: the configured provider first, then the host when it may stand in."""
    if settings.provider == "none":
        return [NoLLM()]
    if settings.provider == "host":
        return [host or NoLLM()]
    assert settings.base_url is not None  # enforced by LLMSettings
    primary = OpenAICompatLLM(
        base_url=settings.base_url,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        model=settings.model,
        timeout_ms=settings.timeout_ms,
        max_retries=settings.max_retries,
        backoff_ms=settings.retry_backoff_ms,
        backoff_max_ms=settings.retry_backoff_max_ms,
        json_schema_mode=settings.json_schema_mode,
        max_tokens=settings.max_tokens,
    )
    chain: list[LLMProvider] = [primary]
    if settings.fallback_to_host and host is not None and not isinstance(host, NoLLM):
        chain.append(host)
    return chain


def build_llm_facade(
    settings: LLMSettings,
    host: LLMProvider | None,
    *,
    sink: ApiLogSink | None = None,
    clock: Clock = time.monotonic,
) -> LLMFacade:
    """The facade for these settings; `host` is the `host.llm.complete` provider when one exists."""
    return LLMFacade(
        build_providers(settings, host),
        budget=CallBudget(settings.budget_per_episode, settings.budget_per_hour, clock=clock),
        sink=sink,
        breaker_policy=BreakerPolicy(
            failure_threshold=settings.breaker_failure_threshold,
            transient_cooldown_s=settings.breaker_cooldown_s,
            terminal_cooldown_s=settings.breaker_terminal_cooldown_s,
        ),
        clock=clock,
        default_timeout_ms=settings.timeout_ms,
    )
