"""`host` provider: ask the connected agent host for a completion over `host.llm.complete`.

The service never holds model credentials in this mode; the host answers with its own model. The request
goes back over the connection that is currently being served (or the most recently active one for
background work), which is what `resolve_host` returns.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError

from memos_bridge.contract.dto import HostLlmCompleteResult
from memos_bridge.contract.errors import METHOD_NOT_FOUND, ErrorCode, MemosError
from memos_bridge.contract.events import HOST_LLM_COMPLETE_METHOD
from memos_bridge.llm.base import ChatMessage, Completion


class HostRequester(Protocol):
    async def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any: ...


class HostLLM:
    """Completions from the connected host.

    A host that connects without a `host.llm.complete` handler answers "method not found" (-32601): that
    connection is remembered as offering no LLM, so every stage takes its deterministic path at once
    instead of paying a round trip (and a failure) per call for the rest of the connection.
    """

    name = "host"

    def __init__(self, resolve_host: Callable[[], HostRequester | None], default_timeout_ms: int) -> None:
        self._resolve_host = resolve_host
        self._default_timeout_ms = default_timeout_ms
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
        try:
            raw = await host.request(HOST_LLM_COMPLETE_METHOD, params, timeout=timeout_ms / 1000 + 5)
        except MemosError as exc:
            if _method_not_found(exc):
                self._without_llm.add(host)
            raise _as_llm_error(exc) from exc
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
