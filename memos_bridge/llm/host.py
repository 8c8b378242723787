"""`host` provider: ask the connected agent host for a completion over `host.llm.complete`.

The service never holds model credentials in this mode; the host answers with its own model. The request
goes back over the connection that is currently being served (or the most recently active one for
background work), which is what `resolve_host` returns.
"""

from __future__ import annotations

import random
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from pydantic import ValidationError

from memos_bridge.contract.dto import HostLlmCompleteResult
from memos_bridge.contract.errors import METHOD_NOT_FOUND, ErrorCode, MemosError
from memos_bridge.contract.events import HOST_LLM_COMPLETE_METHOD
from memos_bridge.llm.base import ChatMessage, Completion
from memos_bridge.llm.budget import charge_retry


class HostRequester(Protocol):
    async def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any: ...


class HostLLM:
    """Completions from the connected host.

    A host that connects without a `host.llm.complete` handler answers "method not found" (-32601): that
    connection is remembered as offering no LLM, so every stage takes its deterministic path at once
    instead of paying a round trip (and a failure) per call for the rest of the connection.

    A host whose model is rate-limited answers `llm_rate_limited` (optionally with
    `details.retryAfterMs`): the request is sent again after a back-off (exponential with jitter, or the
    host's hint), at most `max_retries` times, within the call's timeout, each retry charged to the LLM
    budget (`budget.charge_retry`). Other failures are not retried here: the facade's breaker and the
    stages' deterministic paths handle them.
    """

    name = "host"

    def __init__(
        self,
        resolve_host: Callable[[], HostRequester | None],
        default_timeout_ms: int,
        *,
        max_retries: int = 2,
        backoff_ms: int = 500,
        backoff_max_ms: int = 10_000,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._resolve_host = resolve_host
        self._default_timeout_ms = default_timeout_ms
        self._max_retries = max_retries
        self._backoff_s = backoff_ms / 1000
        self._backoff_max_s = backoff_max_ms / 1000
        self._sleep = sleep
        self._without_llm: weakref.WeakSet[Any] = weakref.WeakSet()

    def available(self) -> bool:
        host = self._resolve_host()
        return host is not None and host not in self._without_llm

    async def complete(
        self,
        messages: list[ChatMessage],
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_ms: int | None = None,
    ) -> Completion:
        host = self._resolve_host()
        if host is None:
            raise MemosError(ErrorCode.LLM_UNAVAILABLE, "no host connection to ask for a completion")
        timeout_ms = timeout_ms or self._default_timeout_ms
        params: dict[str, Any] = {
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "timeoutMs": timeout_ms,
        }
        if model is not None:
            params["model"] = model
        if temperature is not None:
            params["temperature"] = temperature
        if max_tokens is not None:
            params["maxTokens"] = max_tokens
        started = time.perf_counter()
        raw = await self._request(host, params, timeout_ms)
        try:
            result = HostLlmCompleteResult.model_validate(raw)
        except ValidationError as exc:
            raise MemosError(ErrorCode.LLM_OUTPUT_MALFORMED, "host.llm.complete returned no text") from exc
        return Completion(
            text=result.text,
            provider=self.name,
            model=result.model,
            duration_ms=(time.perf_counter() - started) * 1000,
            usage=result.usage.to_wire() if result.usage else {},
        )

    async def _request(self, host: HostRequester, params: dict[str, Any], timeout_ms: int) -> Any:
        """`host.llm.complete`, sent again after a back-off while the host reports a rate limit."""
        deadline = time.monotonic() + timeout_ms / 1000
        attempt = 0
        while True:
            try:
                return await host.request(HOST_LLM_COMPLETE_METHOD, params, timeout=params["timeoutMs"] / 1000 + 5)
            except MemosError as exc:
                if _method_not_found(exc):
                    self._without_llm.add(host)
                error = _as_llm_error(exc)
                if error.code is not ErrorCode.LLM_RATE_LIMITED or attempt >= self._max_retries:
                    raise error from exc
                delay = self._backoff(attempt, _retry_after_s(exc))
                left = deadline - time.monotonic() - delay
                if left <= 0:
                    raise error from exc  # no time left for another answer
                try:
                    charge_retry()
                except MemosError as refused:
                    raise error from refused
            attempt += 1
            await self._sleep(delay)
            params = {**params, "timeoutMs": max(1, int(left * 1000))}

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self._backoff_max_s)
        exponential: float = self._backoff_s * 2.0**attempt
        return min(self._backoff_max_s, exponential * random.uniform(0.5, 1.0))


def _retry_after_s(exc: MemosError) -> float | None:
    """The host's `retryAfterMs` hint (in the remote error's `data.details`), in seconds."""
    remote = exc.details.get("remote") if isinstance(exc.details, dict) else None
    data = remote.get("data") if isinstance(remote, dict) else None
    details = data.get("details") if isinstance(data, dict) else None
    value = details.get("retryAfterMs") if isinstance(details, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value) / 1000
    return None


_LLM_CODES = {
    ErrorCode.LLM_TIMEOUT,
    ErrorCode.LLM_RATE_LIMITED,
    ErrorCode.LLM_UNAVAILABLE,
    ErrorCode.LLM_OUTPUT_MALFORMED,
}


def _method_not_found(exc: MemosError) -> bool:
    remote = exc.details.get("remote") if isinstance(exc.details, dict) else None
    return isinstance(remote, dict) and remote.get("code") == METHOD_NOT_FOUND


def _as_llm_error(exc: MemosError) -> MemosError:
    """Map transport outcomes to the LLM error family the facade's fallbacks understand."""
    if exc.code in _LLM_CODES:
        return exc
    if exc.code is ErrorCode.DEADLINE_EXCEEDED:
        return MemosError(ErrorCode.LLM_TIMEOUT, "host did not answer host.llm.complete in time")
    if exc.code is ErrorCode.TRANSPORT_CLOSED:
        return MemosError(ErrorCode.LLM_UNAVAILABLE, "host connection closed during host.llm.complete")
    return MemosError(ErrorCode.LLM_UNAVAILABLE, f"host.llm.complete failed: {exc.message}")


class NoLLM:
    """`none` provider: every stage uses its deterministic path."""

    name = "none"

    def available(self) -> bool:
        return False

    async def complete(
        self,
        messages: list[ChatMessage],
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_ms: int | None = None,
    ) -> Completion:
        raise MemosError(ErrorCode.LLM_UNAVAILABLE, "LLM provider is 'none'")
